package hosts

import (
	"context"
	"io"
)

// Runner runs commands on one machine.
type Runner interface {
	// Run runs c and streams its stdout and stderr to the writers as the bytes
	// arrive. It returns the exit code (128+n for a job killed by signal n)
	// once the job and its process group are gone. err is non-nil when the job
	// could not be started (err wraps ErrHostDown when the machine cannot be
	// reached), was stopped because ctx ended (err wraps context.Cause(ctx)),
	// or its machine was lost while it ran (err wraps ErrConnectionLost).
	Run(ctx context.Context, c Command, stdout, stderr io.Writer) (exitCode int, err error)
	// WaitUp returns once the machine can take jobs: at once when it can,
	// else when it is reachable again, or when ctx ends.
	WaitUp(ctx context.Context) error
	// Reap returns once nothing is left on the machine of the job run with
	// Command.Tag tag, whose Run ended with ErrConnectionLost: until then its
	// GPU may still be in use. It waits for the machine to be reachable, or
	// for ctx to end.
	Reap(ctx context.Context, tag string) error
	// LockGPU takes the lock that keeps other gpudispatch runs off GPU gpu
	// of the machine for the run whose commands' tags start with
	// run + "-". An error wraps ErrGPULocked when another run holds it,
	// ErrNoFlock when the machine cannot lock, ErrHostDown when it cannot be
	// reached.
	LockGPU(ctx context.Context, gpu int, run string) (GPULock, error)
}
