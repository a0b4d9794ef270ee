package hosts

import (
	"context"
	"errors"
	"time"
)

// silence tells a host that is only cut off from one that is gone: a host
// that stops answering keeps its jobs, presumed running, until it has been
// silent for lostAfter while this coordinator was awake and other hosts
// answered. A coordinator that slept (a laptop's lid closed: its wall clock
// ran on while its monotonic clock stood still) or that reaches no host at
// all (its own network is down) is not the host's fault.
type silence struct {
	lostAfter time.Duration
	// tick is how often the host is looked at again.
	tick time.Duration
	// othersAnswer reports whether another remote host of the run answers.
	othersAnswer func() bool
}

// errGivenUp is a host silent for too long.
var errGivenUp = errors.New("the host was silent for the lost-after time")

// clock starts counting a host's silence.
func (s *silence) clock() *silenceClock {
	return &silenceClock{s: s, last: time.Now()}
}

// silenceClock counts one host's silence from when it was cut off.
type silenceClock struct {
	s      *silence
	silent time.Duration
	last   time.Time
}

// count adds the time since the last look to the silence, when it counts,
// and reports whether the host is given up.
func (c *silenceClock) count() bool {
	now := time.Now()
	mono, wall := now.Sub(c.last), now.Round(0).Sub(c.last.Round(0))
	c.last = now
	if wall-mono < time.Second && c.s.othersAnswer() {
		c.silent += mono
	}
	return c.silent >= c.s.lostAfter
}

// waitBack returns once up (the host's WaitUp) says the host answers, or
// errGivenUp once its silence counts for lostAfter, or ctx's error.
func (c *silenceClock) waitBack(ctx context.Context, up func(context.Context) error) error {
	for {
		tctx, cancel := context.WithTimeout(ctx, c.s.tick)
		err := up(tctx)
		cancel()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case !errors.Is(err, context.DeadlineExceeded):
			return err
		}
		if c.count() {
			return errGivenUp
		}
	}
}

// pause waits a tick after a look that found the host still cut off, and
// reports whether it is given up.
func (c *silenceClock) pause(ctx context.Context) bool {
	select {
	case <-ctx.Done():
	case <-time.After(c.s.tick):
	}
	return c.count()
}
