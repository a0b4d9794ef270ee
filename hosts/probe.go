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
)

// ErrNoNvidiaSMI means the host has no nvidia-smi on the login shell's PATH.
var ErrNoNvidiaSMI = errors.New("nvidia-smi not found")

// ProbeGPUs asks nvidia-smi on r's machine for its GPUs, through the same
// login shell as jobs so it sees the same PATH.
func ProbeGPUs(ctx context.Context, r Runner) ([]executor.GPU, error) {
	out, code, err := probe(ctx, r, nvidiasmi.Query)
	switch {
	case err != nil:
		return nil, err
	case code == 127:
		return nil, ErrNoNvidiaSMI
	case code != 0:
		return nil, fmt.Errorf("nvidia-smi: %s", out)
	}
	return nvidiasmi.Parse(out)
}

// ProbeLocks fills in which gpudispatch run holds each GPU's lock in dir on
// r's machine, without taking any.
func ProbeLocks(ctx context.Context, r Runner, dir string, gpus []executor.GPU) error {
	if len(gpus) == 0 {
		return nil
	}
	out, code, err := probe(ctx, r, gpulock.ProbeScript(dir, gpus))
	if err == nil && code != 0 {
		err = fmt.Errorf("looking at GPU locks in %s: %s", dir, out)
	}
	if err != nil {
		return err
	}
	gpulock.ReadProbe(out, gpus)
	return nil
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
// returns, so that looks never pile up there. Its zero value is ready.
type probes struct {
	mu sync.Mutex
	// pending is closed once the host's look under way has returned.
	pending map[string]chan struct{}
}

// gpus asks nvidia-smi on host (r) for its GPUs within limit.
func (p *probes) gpus(ctx context.Context, host string, r Runner, limit time.Duration) ([]executor.GPU, error) {
	var gpus []executor.GPU
	err := p.run(ctx, host, "nvidia-smi", limit, func(ctx context.Context) error {
		var err error
		gpus, err = ProbeGPUs(ctx, r)
		return err
	})
	return gpus, err
}

// locks fills in who holds the locks of gpus on host (r) within limit.
func (p *probes) locks(ctx context.Context, host string, r Runner, dir string, gpus []executor.GPU, limit time.Duration) error {
	found := slices.Clone(gpus)
	err := p.run(ctx, host, "the look at its GPU locks", limit, func(ctx context.Context) error {
		return ProbeLocks(ctx, r, dir, found)
	})
	if err == nil {
		copy(gpus, found)
	}
	return err
}

// run runs look on host within limit, unless an earlier look still hangs
// there. It returns at the limit even when look does not (it goes on, and
// cancels what it runs, in the background).
func (p *probes) run(ctx context.Context, host, what string, limit time.Duration, look func(context.Context) error) error {
	p.mu.Lock()
	if ch := p.pending[host]; ch != nil {
		select {
		case <-ch:
		default:
			p.mu.Unlock()
			return &HungError{What: what, Limit: limit, Still: true}
		}
	}
	if p.pending == nil {
		p.pending = map[string]chan struct{}{}
	}
	done := make(chan struct{})
	p.pending[host] = done
	p.mu.Unlock()
	// Cancelled as run returns: at once for a look that answered (its
	// Done must not race its result), at the limit for one that hangs.
	lookCtx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	result := make(chan error, 1)
	go func() {
		defer close(done)
		result <- look(lookCtx)
	}()
	select {
	case err := <-result:
		if err == nil || ctx.Err() == nil && !errors.Is(lookCtx.Err(), context.DeadlineExceeded) {
			// A host whose job shell cannot be set up says so, named.
			return named(host, err)
		}
	case <-lookCtx.Done():
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return &HungError{What: what, Limit: limit}
}
