package hosts

import (
	"context"
	"errors"
	"fmt"
	"io"

	"golang.org/x/crypto/ssh"
)

// Remote runs jobs on a host over its pooled SSH connections, through the
// same wrapper as Local.
type Remote struct {
	name        string
	pool        *pool
	supervision Supervision
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
	if err := s.Start(bootstrap); err != nil {
		return -1, fmt.Errorf("%s: start: %w: %v", r.name, ErrConnectionLost, err)
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
