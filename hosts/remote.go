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
	"github.com/gpudispatch/gpudispatch/hosts/results"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
	"github.com/gpudispatch/gpudispatch/hosts/sshpool"
)

// Remote runs jobs on a host in job shells on its pooled SSH connections.
type Remote struct {
	name        string
	silence     *silence
	pool        *sshpool.Pool
	supervision jobshell.Supervision
	lockDir     string
	shells      *jobshell.Shells
	locks       *gpulock.Lockers
}

func newRemote(name string, p *sshpool.Pool, sup jobshell.Supervision, lockDir string, noShare bool, probe time.Duration, s *silence, seen func() ([]executor.GPU, bool)) *Remote {
	r := &Remote{name: name, pool: p, supervision: sup, lockDir: lockDir, silence: s}
	r.shells = jobshell.New(r.spawn, sup)
	r.locks = newLockers(r.spawn, name, lockDir, noShare, sup, probe, r.shells, seen)
	return r
}

// Run implements Runner. A job's life does not hang on its connection:
// when the connection of its job shell dies, the job runs on, and Run takes
// up its output from where it was once the host answers again (see
// takeUp).
func (r *Remote) Run(ctx context.Context, c executor.Command, stdout, stderr io.Writer) (int, error) {
	code, _, err := r.takeUp(ctx, c, stdout, stderr, func() (int, time.Time, error) {
		code, err := r.shells.Run(ctx, c, stdout, stderr)
		return code, time.Now(), err
	})
	return code, err
}

// Adopt implements Runner: it follows a job an earlier coordinator started
// here, whose job shell kept its output.
func (r *Remote) Adopt(ctx context.Context, c executor.Command, outOff, errOff int64, stdout, stderr io.Writer) (int, time.Time, error) {
	code, end, err := r.takeUp(ctx, c, stdout, stderr, func() (int, time.Time, error) {
		return jobshell.Follow(ctx, r.spawn, c.Tag, outOff, errOff, r.supervision.Grace, stdout, stderr)
	})
	if errors.Is(err, executor.ErrJobLost) {
		err = fmt.Errorf("%s: %w", r.name, err)
	}
	return code, end, err
}

// takeUp runs first (a job, or the following of one) and, each time it
// ends with its connection cut (a *jobshell.LostError), waits for the host
// to answer and follows the job from the bytes that came. A host that stays
// silent for the lost-after time while this coordinator is awake and other
// hosts answer is given up: the error then wraps
// executor.ErrConnectionLost, and the job is left to Reap. It tells
// c.Progress when the job is cut off, and the job's own end when it
// learned of it late.
func (r *Remote) takeUp(ctx context.Context, c executor.Command, stdout, stderr io.Writer, first func() (int, time.Time, error)) (int, time.Time, error) {
	tag := c.Tag
	tell := func(p executor.Progress) {
		if c.Progress != nil {
			c.Progress(p)
		}
	}
	code, end, err := first()
	var lost *jobshell.LostError
	quiet := r.silence.clock()
	cut := false
	for tag != "" && ctx.Err() == nil && errors.As(err, &lost) {
		if !cut {
			cut = true
			tell(executor.Progress{CutOff: time.Now(), Why: lost.Error()})
		}
		if werr := quiet.waitBack(ctx, r.pool.WaitUp); werr != nil {
			return -1, time.Now(), r.cutOff(ctx, lost)
		}
		var ferr error
		code, end, ferr = jobshell.Follow(ctx, r.spawn, tag, lost.OutBytes, lost.ErrBytes, r.supervision.Grace, stdout, stderr)
		if ferr != nil && ctx.Err() != nil && !errors.Is(ferr, context.Cause(ctx)) {
			// Cancelled before the follow could carry the cancel there.
			return -1, time.Now(), r.cutOff(ctx, lost)
		}
		if errors.Is(ferr, executor.ErrHostDown) {
			// The pool had a connection that turned out dead: still cut
			// off, from the same bytes.
			if quiet.pause(ctx) {
				return -1, time.Now(), r.cutOff(ctx, lost)
			}
			continue
		}
		err = ferr
		if errors.Is(err, executor.ErrJobLost) {
			// The host was started again, or the job's shell killed: what
			// it ran is gone with it.
			return -1, end, fmt.Errorf("%s: %w: %v", r.name, executor.ErrConnectionLost, err)
		}
	}
	if errors.As(err, &lost) {
		return -1, time.Now(), r.cutOff(ctx, lost)
	}
	if cut && err == nil {
		tell(executor.Progress{Ended: end})
	}
	return code, end, err
}

// cutOff is the error of a job whose host stopped answering: lost, or,
// when ctx ended meanwhile (a cancel), cancelled with the cancel not
// carried out there.
func (r *Remote) cutOff(ctx context.Context, lost *jobshell.LostError) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, executor.ErrDetached) {
		return fmt.Errorf("%s: %w (%w: %v)", r.name, cause, executor.ErrCancelUnreached, lost.Err)
	}
	return fmt.Errorf("%s: %w: %v", r.name, executor.ErrConnectionLost, lost.Err)
}

// Close ends the idle job shells, and those of jobs still running once they
// end, and the GPU lock holders, which keep the lock of each GPU on which
// a job still runs until it ends. The connections stay.
func (r *Remote) Close() {
	r.shells.Close()
	r.locks.Close()
}

// Waiting says that run, held to its share, waits for more of the
// machine's GPUs (see gpulock.Lockers.Waiting).
func (r *Remote) Waiting(run string, need executor.Need) { r.locks.Waiting(run, need) }

// StopWaiting says that run waits for none of the machine's GPUs any more
// (see gpulock.Lockers.StopWaiting).
func (r *Remote) StopWaiting(run string) { r.locks.StopWaiting(run) }

// Share is run's fair share of the machine (see gpulock.Lockers.Share).
func (r *Remote) Share(run string) (int, string, <-chan struct{}) { return r.locks.Share(run) }

// LockGPU implements Runner.
func (r *Remote) LockGPU(ctx context.Context, gpu executor.GPUID, run string) (executor.GPULock, error) {
	return r.locks.Lock(ctx, gpu, run)
}

func (r *Remote) checkLockDir(ctx context.Context) error {
	return gpulock.CheckDir(ctx, r.spawn, r.lockDir)
}

func (r *Remote) startLocks(ctx context.Context, run string, first gpulock.Prologue) error {
	return r.locks.Start(ctx, run, first)
}

// Fetch implements Runner.
func (r *Remote) Fetch(ctx context.Context, from executor.Return, dst string) (executor.Returned, error) {
	return results.Fetch(ctx, r.spawn, from, dst, r.silence.lostAfter)
}

// WaitUp implements Runner.
func (r *Remote) WaitUp(ctx context.Context) error {
	return r.pool.WaitUp(ctx)
}

// Reap implements Runner: once the host answers, it stops the job (if it
// still runs: its host was given up for lost while it was only cut off)
// and returns once its group is gone.
func (r *Remote) Reap(ctx context.Context, tag string) error {
	if !jobshell.ValidTag(tag) {
		return fmt.Errorf("reap: bad tag %q", tag)
	}
	for {
		if err := r.pool.WaitUp(ctx); err != nil {
			return err
		}
		err := jobshell.Stop(ctx, r.spawn, tag, r.supervision.Grace)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.supervision.Heartbeat):
		}
	}
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
