//go:build unix

package spawn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// LocalSupported says why bash cannot be started on this machine: here it
// can.
func LocalSupported() error { return nil }

// Local starts bash on this machine. The process gets a group of its own,
// which keeps a terminal's Ctrl-C away from jobs: the coordinator decides
// whether to drain or kill.
func Local(_ context.Context, line string, stdout, stderr io.Writer) (*Proc, error) {
	cmd := exec.Command("bash", "-c", line)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// If a job hands its output to a process that escaped its group, do not
	// wait for that process forever once bash has exited.
	cmd.WaitDelay = time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("local: start bash: %w", err)
	}
	wait := func() error {
		if err := cmd.Wait(); !errors.Is(err, exec.ErrWaitDelay) {
			return err
		}
		return nil
	}
	return &Proc{Stdin: stdin, Wait: wait}, nil
}

// localSignal is the name of the signal that ended a local process (an
// *exec.ExitError), without "SIG", or "".
func localSignal(err error) string {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return ""
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return strings.TrimPrefix(unix.SignalName(ws.Signal()), "SIG")
	}
	return ""
}
