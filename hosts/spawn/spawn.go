package spawn

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
)

// Proc is a bash started on a machine, reading its script from Stdin.
type Proc struct {
	Stdin io.WriteCloser
	// Wait returns once the process has exited and its output was written;
	// its error gives the exit status to ExitStatus.
	Wait func() error
}

// Func starts bash on a machine with line as its command, writing its
// stdout and stderr to the writers as they arrive.
type Func func(ctx context.Context, line string, stdout, stderr io.Writer) (*Proc, error)

// Bootstrap is the whole command line handed to the machine: bash, reading
// code (sent first on its stdin) and running it. name, and args when there
// are some (letters, digits and ".-_" only: the caller checks), stay in the
// shell's argv, where ps finds them.
//
// read -N takes the code in one read(2) where read with a delimiter takes a
// system call per byte: bash cannot read a pipe past a delimiter. In the C
// locale -N counts bytes.
func Bootstrap(code, name string, args ...string) string {
	line := `exec bash -c 'LC_ALL=C IFS= read -r -N ` + strconv.Itoa(len(code)) + ` w && eval "$w"' ` + name
	for _, a := range args {
		line += " " + a
	}
	return line
}

// LastLine is the last non-blank line of s: what a process that failed
// said last on its stderr.
func LastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// Signal is the name of the signal that ended the process of a Proc's Wait
// error, without "SIG" ("USR2"), or "" when none did (it exited, or was
// cut off).
func Signal(err error) string {
	var remote interface{ Signal() string }
	if errors.As(err, &remote) {
		return strings.TrimPrefix(remote.Signal(), "SIG")
	}
	return localSignal(err)
}

// ExitStatus is the exit status in a Proc's Wait error, local (os/exec) or
// remote (x/crypto/ssh), and whether there is one: a process that was cut
// off (a lost connection) has none, and a local one killed by a signal has
// -1.
func ExitStatus(err error) (int, bool) {
	var local interface{ ExitCode() int }
	var remote interface{ ExitStatus() int }
	switch {
	case err == nil:
		return 0, true
	case errors.As(err, &local):
		return local.ExitCode(), true
	case errors.As(err, &remote):
		return remote.ExitStatus(), true
	}
	return 0, false
}
