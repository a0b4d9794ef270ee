package hosts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"

	"golang.org/x/crypto/ssh"
)

// Remote runs jobs on a host in job shells on its pooled SSH connections.
type Remote struct {
	name        string
	pool        *pool
	supervision Supervision
	shells      *shells
	locks       *lockers
}

func newRemote(name string, p *pool, sup Supervision, lockDir string) *Remote {
	r := &Remote{name: name, pool: p, supervision: sup}
	r.shells = &shells{spawn: r.spawn, sup: sup}
	r.locks = &lockers{spawn: r.spawn, where: name, dir: lockDir, sup: sup}
	return r
}

// Run implements Runner. A connection that dies while the job runs makes
// the error wrap ErrConnectionLost: the job's shell on the host kills the
// job when its heartbeats stop.
func (r *Remote) Run(ctx context.Context, c executor.Command, stdout, stderr io.Writer) (int, error) {
	code, err := r.shells.run(ctx, c, stdout, stderr)
	var lost errShellLost
	if errors.As(err, &lost) {
		return -1, fmt.Errorf("%s: %w: %v", r.name, executor.ErrConnectionLost, lost.err)
	}
	return code, err
}

// Close ends the idle job shells, and those of jobs still running once they
// end, and the GPU lock holders, which keep the locks still held for
// as long as those jobs may take to die. The connections stay.
func (r *Remote) Close() {
	r.shells.close()
	r.locks.close()
}

// LockGPU implements Runner.
func (r *Remote) LockGPU(ctx context.Context, gpu int, run string) (executor.GPULock, error) {
	return r.locks.lock(ctx, gpu, run)
}

// WaitUp implements Runner.
func (r *Remote) WaitUp(ctx context.Context) error {
	return r.pool.waitUp(ctx)
}

// Reap implements Runner: once the host answers, it looks for the shell
// that ran the job (which lives until the job's group is gone) every
// heartbeat interval. The shell stops the job itself within three missed
// heartbeats and the grace period.
func (r *Remote) Reap(ctx context.Context, tag string) error {
	job, tag := tag, r.shells.shellOf(tag)
	if !tagRE.MatchString(tag) {
		return fmt.Errorf("reap: bad tag %q", tag)
	}
	for {
		if err := r.pool.waitUp(ctx); err != nil {
			return err
		}
		left, err := r.tagged(ctx, tag)
		if err == nil && !left {
			r.shells.forget(job)
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
	s, release, err := r.pool.session(ctx)
	if err != nil {
		return false, err
	}
	defer release()
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	// "[ ]" keeps this command's own argv from matching the pattern.
	pattern := "gpudispatch-job[ ]" + strings.ReplaceAll(tag, ".", "[.]") + "$"
	err = s.Run("ps -eo args= | grep -q -e '" + pattern + "'")
	var exit *ssh.ExitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &exit) && exit.ExitStatus() == 1:
		return false, nil
	}
	return false, fmt.Errorf("%s: looking for job %s: %w", r.name, tag, err)
}
