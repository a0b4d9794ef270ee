package hosts

import (
	"context"
	"io"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// Runner runs commands on one machine. Its methods have the contract of
// executor.Executor's, for that machine.
type Runner interface {
	// Run runs c and streams its stdout and stderr to the writers as the
	// bytes arrive.
	Run(ctx context.Context, c executor.Command, stdout, stderr io.Writer) (exitCode int, err error)
	// WaitUp returns once the machine can take jobs.
	WaitUp(ctx context.Context) error
	// Adopt follows the attempt tagged c.Tag that an earlier coordinator
	// started, from the byte offsets its logs reached, telling c.Progress
	// how it gets on.
	Adopt(ctx context.Context, c executor.Command, outOff, errOff int64, stdout, stderr io.Writer) (exitCode int, end time.Time, err error)
	// Reap returns once nothing is left on the machine of the lost command
	// tagged tag: it ends it if it still runs.
	Reap(ctx context.Context, tag string) error
	// LockGPU takes GPU gpu of the machine for run.
	LockGPU(ctx context.Context, gpu executor.GPUID, run string) (executor.GPULock, error)
	// Fetch copies the files r names into dst.
	Fetch(ctx context.Context, r executor.Return, dst string) (executor.Returned, error)
}
