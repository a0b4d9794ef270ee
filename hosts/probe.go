package hosts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/gpulock"
	"github.com/gpudispatch/gpudispatch/hosts/nvidiasmi"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
)

// ErrNoNvidiaSMI means the host has no nvidia-smi on the login shell's PATH.
var ErrNoNvidiaSMI = executor.ErrNoNvidiaSMI

// ProbeGPUs asks nvidia-smi on r's machine for its GPUs, through the same
// login shell as jobs so it sees the same PATH.
func ProbeGPUs(ctx context.Context, r Runner) ([]executor.GPU, error) {
	var out, errOut bytes.Buffer
	code, err := r.Run(ctx, executor.Command{Script: nvidiasmi.Query}, &out, &errOut)
	switch {
	case err != nil:
		return nil, err
	case code == spawn.ExitNotFound:
		return nil, ErrNoNvidiaSMI
	}
	// nvidia-smi's exit status says little: rows may come with an error
	// (one GPU lost), and its errors come on stdout as often as stderr.
	gpus, err := nvidiasmi.Parse(out.String(), errOut.String())
	var said *nvidiasmi.SaidError
	switch {
	case errors.As(err, &said) && code != 0:
		return nil, fmt.Errorf("nvidia-smi (exit status %d): %s", code, said.Words)
	case err == nil && len(gpus) == 0 && code != 0:
		return nil, fmt.Errorf("nvidia-smi: exit status %d", code)
	}
	return gpus, err
}

// ProbeLocks fills in which gpudispatch run holds each GPU's lock in dir on
// r's machine, without taking any, and returns the runs that wait for its
// GPUs (fair share).
func ProbeLocks(ctx context.Context, r Runner, dir string, gpus []executor.GPU) (waiting []string, err error) {
	if len(gpus) == 0 {
		return nil, nil
	}
	out, code, err := probe(ctx, r, gpulock.ProbeScript(dir, gpus))
	if err == nil && code != 0 {
		err = fmt.Errorf("looking at GPU locks in %s: %s", dir, out)
	}
	if err != nil {
		return nil, err
	}
	return gpulock.ReadProbe(out, gpus), nil
}

// probe runs script on r's machine and returns its stdout, or, when it
// exits non-zero, its exit status and stderr as one message.
func probe(ctx context.Context, r Runner, script string) (string, int, error) {
	var out, errOut bytes.Buffer
	code, err := r.Run(ctx, executor.Command{Script: script}, &out, &errOut)
	if err != nil || code == 0 {
		return out.String(), code, err
	}
	return fmt.Sprintf("exit status %d: %s", code, strings.TrimSpace(errOut.String())), code, nil
}

// HungError says that a look at a host's GPUs did not answer in time: the
// host is sick, and gets no new job until a later look answers.
type HungError struct {
	// What did not answer ("nvidia-smi"); Limit is how long it was given.
	What  string
	Limit time.Duration
	// Still is set when an earlier look still hangs there, and no new one
	// was started.
	Still bool
}

// Unwrap says what kind of failure this is.
func (e *HungError) Unwrap() error { return executor.ErrProbeTimeout }

func (e *HungError) Error() string {
	still := ""
	if e.Still {
		still = " (and still does not)"
	}
	return fmt.Sprintf("%s did not answer within %s%s (a GPU fallen off the bus? a driver in a bad state? a login profile that never finishes? --probe-timeout)", e.What, e.Limit, still)
}

// probes bounds the looks at hosts' GPUs: each gets the probe timeout, and
// a host whose last look still hangs (an nvidia-smi stuck in the driver, in
// state D, outlives even SIGKILL) is not looked at again until that one
// returns, so that looks never pile up there. A look still under way
// within its limit is not one that hangs: a second look at nvidia-smi
// joins it (both get its answer), and a look of another kind waits for it.
// Its zero value is ready.
type probes struct {
	mu sync.Mutex
	// cur is, per host, the latest look there.
	cur map[string]*look
	// last is, per host, the GPUs the latest look that answered found,
	// and when that look started.
	last map[string]seenGPUs
}

// seenGPUs is what a look at a host's GPUs found, and when it started.
type seenGPUs struct {
	gpus []executor.GPU
	at   time.Time
}

// freshFor is how long what a look found stands for what a GPU lock
// holder starting on the host would find itself: the run locks the GPUs
// it just looked at.
const freshFor = 5 * time.Second

// seen returns the GPUs the latest look at host found, when it started
// less than freshFor ago.
func (p *probes) seen(host string) ([]executor.GPU, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.last[host]
	if !ok || time.Since(s.at) > freshFor {
		return nil, false
	}
	return slices.Clone(s.gpus), true
}

// look is one look at a host: what it asks, when it started and its limit,
// and, once done is closed, its answer.
type look struct {
	what    string
	started time.Time
	limit   time.Duration
	done    chan struct{}
	val     any
	err     error
}

// gpus asks nvidia-smi on host (r) for its GPUs within limit.
func (p *probes) gpus(ctx context.Context, host string, r Runner, limit time.Duration) ([]executor.GPU, error) {
	v, err := p.run(ctx, host, "nvidia-smi", limit, func(ctx context.Context) (any, error) {
		at := time.Now()
		gpus, err := ProbeGPUs(ctx, r)
		if err == nil {
			p.mu.Lock()
			if p.last == nil {
				p.last = map[string]seenGPUs{}
			}
			p.last[host] = seenGPUs{gpus: slices.Clone(gpus), at: at}
			p.mu.Unlock()
		}
		return gpus, err
	})
	gpus, _ := v.([]executor.GPU)
	return slices.Clone(gpus), err // joined looks share the answer
}

// locks fills in who holds the locks of gpus on host (r) within limit.
func (p *probes) locks(ctx context.Context, host string, r Runner, dir string, gpus []executor.GPU, limit time.Duration) ([]string, error) {
	found := slices.Clone(gpus)
	waiting, err := p.run(ctx, host, "the look at its GPU locks", limit, func(ctx context.Context) (any, error) {
		return ProbeLocks(ctx, r, dir, found)
	})
	if err != nil {
		return nil, err
	}
	copy(gpus, found)
	w, _ := waiting.([]string)
	return w, nil
}

// run runs ask on host within limit, and returns its answer. A look under
// way there is joined when it asks the same (what), and waited for, for
// the rest of its limit, when it asks something else; one past its limit
// still hangs, and nothing new is started. run returns at the limit even
// when ask does not (it goes on, and cancels what it runs, in the
// background).
func (p *probes) run(ctx context.Context, host, what string, limit time.Duration, ask func(context.Context) (any, error)) (any, error) {
	return p.lookAt(ctx, host, what, true, limit, ask)
}

// alone is run for a look whose answer is its own (a port for one job, a
// word to one job): it joins no other, and waits for any under way.
func (p *probes) alone(ctx context.Context, host, what string, limit time.Duration, ask func(context.Context) (any, error)) (any, error) {
	return p.lookAt(ctx, host, what, false, limit, ask)
}

// lookAt is run, and alone without join.
func (p *probes) lookAt(ctx context.Context, host, what string, join bool, limit time.Duration, ask func(context.Context) (any, error)) (any, error) {
	for {
		p.mu.Lock()
		cur := p.cur[host]
		if cur == nil || closed(cur.done) {
			l := &look{what: what, started: time.Now(), limit: limit, done: make(chan struct{})}
			if p.cur == nil {
				p.cur = map[string]*look{}
			}
			p.cur[host] = l
			p.mu.Unlock()
			return p.own(ctx, host, l, ask)
		}
		p.mu.Unlock()
		left := time.Until(cur.started.Add(cur.limit))
		if left <= 0 {
			return nil, &HungError{What: cur.what, Limit: cur.limit, Still: true}
		}
		t := time.NewTimer(left)
		select {
		case <-cur.done:
			t.Stop()
			if join && cur.what == what && !errors.Is(cur.err, context.Canceled) && !errors.Is(cur.err, context.DeadlineExceeded) {
				return cur.val, cur.err
			}
			// Another kind of look, or one its caller gave up: ask anew.
		case <-t.C:
			return nil, &HungError{What: cur.what, Limit: cur.limit, Still: true}
		case <-ctx.Done():
			t.Stop()
			return nil, context.Cause(ctx)
		}
	}
}

// own runs l, this caller's look.
func (p *probes) own(ctx context.Context, host string, l *look, ask func(context.Context) (any, error)) (any, error) {
	// Cancelled as own returns: at once for a look that answered (its
	// Done must not race its result), at the limit for one that hangs.
	lookCtx, cancel := context.WithTimeout(ctx, l.limit)
	defer cancel()
	go func() {
		v, err := ask(lookCtx)
		l.val, l.err = v, named(host, err) // a host whose job shell cannot be set up says so, named
		close(l.done)
	}()
	select {
	case <-l.done:
		if l.err == nil || ctx.Err() == nil && !errors.Is(lookCtx.Err(), context.DeadlineExceeded) {
			return l.val, l.err
		}
	case <-lookCtx.Done():
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return nil, &HungError{What: l.what, Limit: l.limit}
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
