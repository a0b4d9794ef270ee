package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"golang.org/x/term"

	"github.com/gpudispatch/gpudispatch/dispatch"
)

// streams are the command's standard files; tests replace them.
type streams struct {
	in       io.Reader
	out, err io.Writer
}

// Exit statuses. exitCodes below says what each means for each command;
// these constants and exitFor are the only places they are decided.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitInterrupted = 130
)

// exitCode is one exit status and what it means for run (and serve),
// status, hosts, submit, and the commands that steer a run (cancel, retry,
// priority, stop); "" where a command does not use it.
type exitCode struct {
	code                              int
	run, status, hosts, submit, steer string
}

// exitCodes is the one table of exit statuses: every command's help is
// written from it, and the manual's table (docs/running.md) is tested against it.
var exitCodes = []exitCode{
	{exitOK, "every job succeeded", "every job succeeded", "every host is up",
		"every line was queued (with --wait: and every job succeeded)", "done for every job named"},
	{exitFailed, "at least one job failed, timed out, was lost or was rejected", "some job did not succeed (or has not yet)", "some host is down (with --check: or fails its check)",
		"some line was rejected (with --wait: or some job did not succeed)", "some job named is unknown, or not in a state the command takes (cancel: waiting or running; retry: ended without success; priority: waiting)"},
	{exitUsage, "usage or configuration error before any job ran", "no journal there, or a usage error", "the inventory is bad, or a usage error",
		"no gpudispatch serve on that log dir, or a usage error", "no gpudispatch running on that log dir, or a usage error"},
	{exitInterrupted, "interrupted (SIGINT/SIGTERM, gpudispatch stop), also after a drain that let running jobs finish", "", "",
		"with --wait: some job was cancelled, or the wait was interrupted", ""},
}

// exitHelp is the "Exit status:" part of a command's help: meaning picks
// the command's column of exitCodes.
func exitHelp(meaning func(exitCode) string) string {
	var b strings.Builder
	b.WriteString("Exit status:\n")
	for _, c := range exitCodes {
		if m := meaning(c); m != "" {
			fmt.Fprintf(&b, "  %-4d %s\n", c.code, m)
		}
	}
	return b.String()
}

// exitFor is the exit status of a run that ended with s.
func exitFor(s *dispatch.Summary) int {
	switch {
	case s.Interrupted:
		return exitInterrupted
	case !s.Succeeded():
		return exitFailed
	}
	return exitOK
}

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
			fmt.Fprintln(textTo(s.err), "gpudispatch:", ee.err)
		}
		return ee.code
	}
	// cobra's own errors: unknown flags, bad values
	fmt.Fprintln(textTo(s.err), "gpudispatch:", err)
	return exitUsage
}

// newRootCommand is "run" with the other commands under it, so that
// "gpudispatch --inventory lab.yaml < cmds.txt" runs jobs.
func newRootCommand(s streams) *cobra.Command {
	root := newRunCommand(s, nil)
	root.Use = "gpudispatch [flags] [JOBFILE ...]"
	root.SilenceErrors = true
	root.SilenceUsage = true
	root.AddCommand(newRunCommand(s, nil), newServeCommand(s, nil), newSubmitCommand(s, nil),
		newSteerCommand(s, "cancel", nil), newSteerCommand(s, "retry", nil), newSteerCommand(s, "priority", nil), newSteerCommand(s, "stop", nil),
		newSweepCommand(s), newHostsCommand(s, nil), newStatusCommand(s, nil), newVersionCommand(s), newDocsCommand())
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			c.Example = `  source <(gpudispatch completion bash)           # in ~/.bashrc: commands, flags, --hosts names
  gpudispatch completion zsh > "${fpath[1]}/_gpudispatch"
  gpudispatch completion fish > ~/.config/fish/completions/gpudispatch.fish`
		}
	}
	root.SetIn(s.in)
	root.SetOut(s.out)
	root.SetErr(s.err)
	return root
}

// isTerminal reports whether f (a stream) is a terminal: a user who typed
// gpudispatch with nothing piped in is told that it reads jobs from the
// keyboard, and a terminal on stderr gets the live view. /dev/null is a
// character device too, but no terminal: a run with 2>/dev/null (or
// started by a program, whose unset streams are /dev/null) draws no live
// view into it.
// It asks through SyscallConn, not Fd, which would take a stream's
// descriptor out of non-blocking mode.
func isTerminal(stream any) bool {
	f, ok := stream.(*os.File)
	if !ok {
		return false
	}
	raw, err := f.SyscallConn()
	if err != nil {
		return false
	}
	is := false
	if err := raw.Control(func(fd uintptr) { is = term.IsTerminal(int(fd)) }); err != nil {
		return false
	}
	return is
}

// textTo is w for lines that may hold job text (commands, names, errors,
// what a journal says): on a terminal their control characters are shown
// escaped, so that a job line cannot retitle, clear or write to the
// clipboard of the terminal that shows it; a pipe or a file gets the
// bytes as they are.
func textTo(w io.Writer) io.Writer {
	if isTerminal(w) {
		return dispatch.EscapeWriter{W: w}
	}
	return w
}

// bindEnv lets every flag be set as GPUDISPATCH_<FLAG> too.
func bindEnv(v *viper.Viper, f *pflag.FlagSet) {
	v.SetEnvPrefix("GPUDISPATCH")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	if err := v.BindPFlags(f); err != nil {
		panic(err) // only on a programming error: the flags were just defined
	}
}
