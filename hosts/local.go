package hosts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Local runs jobs on this machine, through the same wrapper as remote hosts.
type Local struct {
	Supervision Supervision
	// LockDir is where GPU locks live ("": DefaultLockDir).
	LockDir string
	// Name is the inventory's name for this machine, for messages ("":
	// "local").
	Name string
}

// Run implements Runner.
func (l Local) Run(ctx context.Context, c Command, stdout, stderr io.Writer) (int, error) {
	header, err := c.header(l.Supervision)
	if err != nil {
		return -1, err
	}
	cmd := exec.Command("bash", "-c", bootstrap(c.Tag))
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// A group of its own keeps a terminal's Ctrl-C away from the job: the
	// coordinator decides whether to drain or kill.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// If a job hands its output pipes to a process that escaped its group,
	// do not wait for that process forever once the wrapper has exited.
	cmd.WaitDelay = time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return -1, fmt.Errorf("local: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("local: start bash: %w", err)
	}
	err = supervise(ctx, stdin, header, l.Supervision, cmd.Wait)
	code := exitCode(cmd.ProcessState)
	if isExit(err) || errors.Is(err, exec.ErrWaitDelay) {
		err = nil
	}
	return code, err
}

// LockGPU implements Runner.
func (l Local) LockGPU(ctx context.Context, gpu int, run string) (GPULock, error) {
	return lockGPU(ctx, spawnLocal, first(l.Name, "local"), gpu, run, first(l.LockDir, DefaultLockDir), l.Supervision)
}

// WaitUp implements Runner: this machine is always up.
func (Local) WaitUp(context.Context) error { return nil }

// Reap implements Runner: a local Run returns only once its job is gone,
// so nothing is ever left to wait for.
func (Local) Reap(context.Context, string) error { return nil }

func isExit(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee)
}

// exitCode reports a process's status the way a shell does: 128+n for
// signal n.
func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok {
		return -1
	}
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
