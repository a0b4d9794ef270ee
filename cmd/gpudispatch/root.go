package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

// streams are the command's standard files; tests replace them.
type streams struct {
	in       io.Reader
	out, err io.Writer
}

// Exit statuses. This table is the only place they are decided.
const (
	exitOK          = 0   // every job succeeded
	exitFailed      = 1   // a job failed, timed out, was lost or was rejected
	exitUsage       = 2   // usage or configuration error before any job ran
	exitInterrupted = 130 // interrupted (Ctrl-C, SIGTERM), even after a clean drain
)

const exitHelp = `Exit status:
  0    every job succeeded
  1    at least one job failed, timed out, was lost or was rejected
  2    usage or configuration error before any job ran
  130  interrupted (SIGINT/SIGTERM), also after a drain that let running jobs finish
`

// exitError carries an exit status through cobra.
type exitError struct {
	code int
	err  error // nil when the command already said everything
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

func execute(args []string, s streams) int {
	root := newRootCommand(s)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(s.err, "gpudispatch:", ee.err)
		}
		return ee.code
	}
	// cobra's own errors: unknown flags, bad values
	fmt.Fprintln(s.err, "gpudispatch:", err)
	return exitUsage
}

// newRootCommand is "run" with the other commands under it, so that
// "gpudispatch --inventory lab.yaml < cmds.txt" runs jobs.
func newRootCommand(s streams) *cobra.Command {
	root := newRunCommand(s)
	root.Use = "gpudispatch [flags] [JOBFILE ...]"
	root.SilenceErrors = true
	root.SilenceUsage = true
	root.AddCommand(newRunCommand(s), newSweepCommand(s), newHostsCommand(s), newStatusCommand(s), newVersionCommand(s))
	root.SetIn(s.in)
	root.SetOut(s.out)
	root.SetErr(s.err)
	return root
}

// isTerminal reports whether f (a stream) is a terminal: a user who typed
// gpudispatch with nothing piped in is told that it reads jobs from the
// keyboard, and a terminal on stderr gets the live view.
func isTerminal(stream any) bool {
	f, ok := stream.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
