package hosts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// Remote runs jobs on a host over its pooled SSH connections, through the
// same wrapper as Local.
type Remote struct {
	name        string
	pool        *pool
	supervision Supervision
	lockDir     string
}

// Run implements Runner. A connection that dies while the job runs makes
// the error wrap ErrConnectionLost: the wrapper on the host kills the job
// when its heartbeats stop.
func (r *Remote) Run(ctx context.Context, c Command, stdout, stderr io.Writer) (int, error) {
	header, err := c.header(r.supervision)
	if err != nil {
		return -1, err
	}
	s, release, err := r.pool.session(ctx)
	if err != nil {
		return -1, fmt.Errorf("%s: %w", r.name, err)
	}
	defer release()
	defer s.Close()
	stdin, err := s.StdinPipe()
	if err != nil {
		return -1, fmt.Errorf("%s: %w", r.name, err)
	}
	s.Stdout, s.Stderr = stdout, stderr
	if err := s.Start(bootstrap(c.Tag)); err != nil {
		// The server did not run the command: nothing of the job started.
		return -1, fmt.Errorf("%s: start: %w: %v", r.name, ErrHostDown, err)
	}
	err = supervise(ctx, stdin, header, r.supervision, s.Wait)
	var exit *ssh.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit):
		if ctx.Err() != nil {
			return exit.ExitStatus(), fmt.Errorf("job stopped: %w", context.Cause(ctx))
		}
		return exit.ExitStatus(), nil
	case ctx.Err() != nil:
		return -1, err
	}
	// No exit status: the connection went away (ExitMissingError, EOF).
	return -1, fmt.Errorf("%s: %w: %v", r.name, ErrConnectionLost, err)
}

// LockGPU implements Runner.
func (r *Remote) LockGPU(ctx context.Context, gpu int, run string) (GPULock, error) {
	spawn := func(line string) (*proc, error) { return r.spawn(ctx, line) }
	return lockGPU(ctx, spawn, r.name, gpu, run, r.lockDir, r.supervision)
}

// WaitUp implements Runner.
func (r *Remote) WaitUp(ctx context.Context) error {
	return r.pool.waitUp(ctx)
}

// Reap implements Runner: once the host answers, it looks for the job's
// wrapper (which lives until the job's group is gone) every heartbeat
// interval. The wrapper stops the job itself within three missed
// heartbeats and the grace period.
func (r *Remote) Reap(ctx context.Context, tag string) error {
	if !tagRE.MatchString(tag) {
		return fmt.Errorf("reap: bad tag %q", tag)
	}
	for {
		if err := r.pool.waitUp(ctx); err != nil {
			return err
		}
		left, err := r.tagged(ctx, tag)
		if err == nil && !left {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.supervision.Heartbeat):
		}
	}
}

// tagged reports whether a wrapper started with tag still runs on the host.
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
