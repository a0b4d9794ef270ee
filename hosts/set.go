package hosts

import (
	"context"
	"fmt"
	"io"
)

// Set runs each job on the Runner of the host it names.
type Set map[string]Runner

// Run runs c on host.
func (s Set) Run(ctx context.Context, host string, c Command, stdout, stderr io.Writer) (int, error) {
	r, err := s.runner(host)
	if err != nil {
		return -1, err
	}
	return r.Run(ctx, c, stdout, stderr)
}

// WaitUp returns once host can take jobs again (see Runner).
func (s Set) WaitUp(ctx context.Context, host string) error {
	r, err := s.runner(host)
	if err != nil {
		return err
	}
	return r.WaitUp(ctx)
}

// Reap returns once nothing is left on host of the lost job tagged tag
// (see Runner).
func (s Set) Reap(ctx context.Context, host, tag string) error {
	r, err := s.runner(host)
	if err != nil {
		return err
	}
	return r.Reap(ctx, tag)
}

// LockGPU takes GPU gpu of host for run (see Runner).
func (s Set) LockGPU(ctx context.Context, host string, gpu int, run string) (GPULock, error) {
	r, err := s.runner(host)
	if err != nil {
		return nil, err
	}
	return r.LockGPU(ctx, gpu, run)
}

// ProbeGPUs asks nvidia-smi on host what its GPUs hold now.
func (s Set) ProbeGPUs(ctx context.Context, host string) ([]GPU, error) {
	r, err := s.runner(host)
	if err != nil {
		return nil, err
	}
	return ProbeGPUs(ctx, r)
}

func (s Set) runner(host string) (Runner, error) {
	r, ok := s[host]
	if !ok {
		return nil, fmt.Errorf("%s: not a host of this run", host)
	}
	return r, nil
}
