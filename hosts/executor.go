package hosts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/codestore"
	"github.com/gpudispatch/gpudispatch/hosts/slurm"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
)

// Lab is what dispatch runs jobs through.
var (
	_ executor.Executor = (*Lab)(nil)
	_ executor.GPUTyper = (*Lab)(nil)
	_ executor.Gang     = (*Lab)(nil)
)

// The Lab runs each job on the Runner of the host it names: these methods
// implement executor.Executor.

// Run runs c on host.
func (l *Lab) Run(ctx context.Context, host string, c executor.Command, stdout, stderr io.Writer) (int, error) {
	r, err := l.lookup(ctx, host)
	if err != nil {
		return -1, err
	}
	if c.Gated {
		c.Script = gate(c.Tag) + c.Script
	}
	code, err := r.Run(ctx, c, stdout, stderr)
	return code, named(host, err)
}

// named names host in err's *executor.UnfitError, which a runner leaves
// unnamed (a job shell does not know its host's name), and returns err.
func named(host string, err error) error {
	var unfit *executor.UnfitError
	if errors.As(err, &unfit) && unfit.Where == "" {
		unfit.Where = host
	}
	return err
}

// WaitUp returns once host can take jobs again.
func (l *Lab) WaitUp(ctx context.Context, host string) error {
	r, err := l.lookup(ctx, host)
	if err != nil {
		return err
	}
	return r.WaitUp(ctx)
}

// Reap returns once nothing is left on host of the lost job tagged tag.
func (l *Lab) Reap(ctx context.Context, host, tag string) error {
	r, err := l.lookup(ctx, host)
	if err != nil {
		return err
	}
	return r.Reap(ctx, tag)
}

// Adopt follows, on host, the attempt tagged c.Tag of an earlier coordinator.
func (l *Lab) Adopt(ctx context.Context, host string, c executor.Command, outOff, errOff int64, stdout, stderr io.Writer) (int, time.Time, error) {
	r, err := l.lookup(ctx, host)
	if err != nil {
		return -1, time.Now(), err
	}
	return r.Adopt(ctx, c, outOff, errOff, stdout, stderr)
}

// LockGPU takes GPU gpu of host for run.
func (l *Lab) LockGPU(ctx context.Context, host string, gpu executor.GPUID, run string) (executor.GPULock, error) {
	r, err := l.lookup(ctx, host)
	if err != nil {
		return nil, err
	}
	return r.LockGPU(ctx, gpu, run)
}

// Waiting implements executor.Waiter: a host whose GPUs are locked (not a
// Slurm cluster's) keeps a record that run waits there.
func (l *Lab) Waiting(host, run string, need executor.Need) {
	if w := l.waiter(host); w != nil {
		w.Waiting(run, need)
	}
}

// StopWaiting implements executor.Waiter: a host whose GPUs are locked
// (not a Slurm cluster's) lets go of run's record of waiting there.
func (l *Lab) StopWaiting(host, run string) {
	if w := l.waiter(host); w != nil {
		w.StopWaiting(run)
	}
}

// Share implements executor.Waiter: run's share of host as the holder
// there last said it; (-1, "", nil) for a host whose GPUs are not locked.
func (l *Lab) Share(host, run string) (int, string, <-chan struct{}) {
	if w := l.waiter(host); w != nil {
		return w.Share(run)
	}
	return -1, "", nil
}

// machineWaiter is a machine whose GPUs are locked: its holders keep the
// runs' records of waiting.
type machineWaiter interface {
	Waiting(run string, need executor.Need)
	StopWaiting(run string)
	Share(run string) (int, string, <-chan struct{})
}

// waiter is host's machine, when its GPUs are locked.
func (l *Lab) waiter(host string) machineWaiter {
	l.mu.RLock()
	r := l.runners[host]
	l.mu.RUnlock()
	w, _ := r.(machineWaiter)
	return w
}

// ProbeGPUs asks nvidia-smi on host what its GPUs hold now.
func (l *Lab) ProbeGPUs(ctx context.Context, host string) ([]executor.GPU, error) {
	r, err := l.lookup(ctx, host)
	if err != nil {
		return nil, err
	}
	if _, ok := r.(*slurm.Cluster); ok {
		return nil, fmt.Errorf("%s: a Slurm cluster's GPUs are Slurm's: nvidia-smi is not asked", host)
	}
	return l.probes.gpus(ctx, host, r, l.opts.ProbeTimeout)
}

// GPUTypes lists the gres types a Slurm cluster host said it has when it
// was opened; none for another host, or one not opened yet.
func (l *Lab) GPUTypes(host string) []string {
	l.mu.RLock()
	c, _ := l.runners[host].(*slurm.Cluster)
	l.mu.RUnlock()
	if c == nil {
		return nil
	}
	return c.GPUTypes()
}

// Fetch copies into dst the files r names on host.
func (l *Lab) Fetch(ctx context.Context, host string, r executor.Return, dst string) (executor.Returned, error) {
	run, err := l.lookup(ctx, host)
	if err != nil {
		return executor.Returned{}, err
	}
	got, err := run.Fetch(ctx, r, dst)
	if err != nil {
		err = fmt.Errorf("%s: %w", host, err)
	}
	return got, err
}

// CleanCode removes from host's content store every snapshot and content
// no process runs in, and says how many snapshots and files went (hosts
// --clean).
func (l *Lab) CleanCode(ctx context.Context, host string) (string, error) {
	run, err := l.lookup(ctx, host)
	if err != nil {
		return "", err
	}
	var said string
	switch r := run.(type) {
	case *slurm.Cluster:
		said, err = r.CleanCode(ctx)
	case *Remote:
		said, err = codestore.Clean(ctx, r.spawn, "")
	default:
		said, err = codestore.Clean(ctx, spawn.Local, "")
	}
	if err != nil {
		err = fmt.Errorf("%s: %w", host, err)
	}
	return said, err
}

func (l *Lab) lookup(ctx context.Context, host string) (Runner, error) {
	r := l.runner(ctx, host)
	if r == nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if r == nil {
		return nil, fmt.Errorf("%s: not a host of this run", host)
	}
	return r, nil
}
