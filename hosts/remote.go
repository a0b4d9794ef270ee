package hosts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/gpulock"
	"github.com/gpudispatch/gpudispatch/hosts/jobshell"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
	"github.com/gpudispatch/gpudispatch/hosts/sshpool"
)

// Remote runs jobs on a host in job shells on its pooled SSH connections.
type Remote struct {
	name        string
	pool        *sshpool.Pool
	supervision jobshell.Supervision
	lockDir     string
	shells      *jobshell.Shells
	locks       *gpulock.Lockers
}

func newRemote(name string, p *sshpool.Pool, sup jobshell.Supervision, lockDir string, probe time.Duration) *Remote {
	r := &Remote{name: name, pool: p, supervision: sup, lockDir: lockDir}
	r.shells = jobshell.New(r.spawn, sup)
	r.locks = newLockers(r.spawn, name, lockDir, sup, probe)
	return r
}

// Run implements Runner. A connection that dies while the job runs makes
// the error wrap executor.ErrConnectionLost: the job's shell on the host
// kills the job when its heartbeats stop.
func (r *Remote) Run(ctx context.Context, c executor.Command, stdout, stderr io.Writer) (int, error) {
	code, err := r.shells.Run(ctx, c, stdout, stderr)
	var lost jobshell.LostError
	if errors.As(err, &lost) {
		return -1, fmt.Errorf("%s: %w: %v", r.name, executor.ErrConnectionLost, lost.Err)
	}
	return code, err
}

// Adopt implements Runner: a job shell kills its job once its coordinator
// has gone silent, so a job an earlier coordinator started here is gone,
// and runs again.
func (r *Remote) Adopt(context.Context, executor.Command, int64, int64, io.Writer, io.Writer) (int, time.Time, error) {
	return -1, time.Now(), fmt.Errorf("%s: %w: its job shell ended it when its coordinator went away", r.name, executor.ErrJobLost)
}

// Close ends the idle job shells, and those of jobs still running once they
// end, and the GPU lock holders, which keep the locks still held for
// as long as those jobs may take to die. The connections stay.
func (r *Remote) Close() {
	r.shells.Close()
	r.locks.Close()
}

// LockGPU implements Runner.
func (r *Remote) LockGPU(ctx context.Context, gpu int, run string) (executor.GPULock, error) {
	return r.locks.Lock(ctx, gpu, run)
}

func (r *Remote) checkLockDir(ctx context.Context) error {
	return gpulock.CheckDir(ctx, r.spawn, r.lockDir)
}

// WaitUp implements Runner.
func (r *Remote) WaitUp(ctx context.Context) error {
	return r.pool.WaitUp(ctx)
}

// Reap implements Runner: once the host answers, it looks for the shell
// that ran the job (which lives until the job's group is gone) every
// heartbeat interval. The shell stops the job itself within three missed
// heartbeats and the grace period.
func (r *Remote) Reap(ctx context.Context, tag string) error {
	job, tag := tag, r.shells.ShellOf(tag)
	if !jobshell.ValidTag(tag) {
		return fmt.Errorf("reap: bad tag %q", tag)
	}
	for {
		if err := r.pool.WaitUp(ctx); err != nil {
			return err
		}
		left, err := r.tagged(ctx, tag)
		if err == nil && !left {
			r.shells.Forget(job)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.supervision.Heartbeat):
		}
	}
}

// tagged reports whether a shell started with tag still runs on the host.
func (r *Remote) tagged(ctx context.Context, tag string) (bool, error) {
	s, release, err := r.pool.Session(ctx)
	if err != nil {
		return false, err
	}
	defer release()
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	err = s.Run("ps -eo args= | grep -q -e '" + jobshell.TagPattern(tag) + "'")
	code, exited := spawn.ExitStatus(err)
	switch {
	case exited && code == 0:
		return true, nil
	case exited && code == 1:
		return false, nil
	}
	return false, fmt.Errorf("%s: looking for job %s: %w", r.name, tag, err)
}

// cutOffError is a session that ended with no exit status: said in words,
// not x/crypto's ("wait: remote command exited without exit status or exit
// signal").
type cutOffError struct{ err error }

func (e *cutOffError) Error() string {
	return "the connection closed before the remote shell said how it ended (the host or the network went away)"
}

func (e *cutOffError) Unwrap() error { return e.err }

// spawn is r's spawner: it starts bash on r's host over the pool.
func (r *Remote) spawn(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
	s, release, err := r.pool.Session(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.name, err)
	}
	s.Stdout, s.Stderr = stdout, stderr
	stdin, err := s.StdinPipe()
	if err == nil {
		if err = s.Start(line); err != nil {
			// The server did not run the command: nothing of it started.
			err = fmt.Errorf("start: %w: %v", executor.ErrHostDown, err)
		}
	}
	if err != nil {
		s.Close()
		release()
		return nil, fmt.Errorf("%s: %w", r.name, err)
	}
	wait := func() error {
		defer release()
		defer s.Close()
		err := s.Wait()
		if errors.As(err, new(*ssh.ExitMissingError)) {
			return &cutOffError{err: err}
		}
		return err
	}
	return &spawn.Proc{Stdin: stdin, Wait: wait}, nil
}
