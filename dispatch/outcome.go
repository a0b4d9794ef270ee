package dispatch

import (
	"context"
	"errors"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// outcome is what the end of an attempt means, said once from what the
// Executor returned (its exit status and error) before the run acts on it
// (onResult), as Nomad's drivers state an exit once (ExitResult). Each error
// of package executor's contract maps to one row of outcomeOf, which a
// table test checks.
type outcome struct {
	// kind is the event that ends the attempt: EventFinished, EventFailed,
	// EventTimeout, EventCancelled or EventLost. It is not recorded when
	// the job waits again with no attempt used (limited, unfit).
	kind EventKind
	// hostDown takes the host out of use until it answers again: the
	// connection was lost, a cancel could not reach it, or it was down
	// before the job started.
	hostDown bool
	// limited says that a batch system refused the job for a limit of its
	// own (ErrLimit): nothing ran and the host is fine; the job waits for a
	// slot there or elsewhere.
	limited bool
	// unfit says that the host could not set up the job's environment
	// (ErrUnfit): nothing ran; the host is set aside for that environment.
	unfit bool
	// notStarted says that nothing ran (the host was down, or limited):
	// the attempt does not count and its empty logs go.
	notStarted bool
	// unstopped says that the attempt's processes may still run and hold
	// its GPUs (the connection was lost, or a cancel did not reach): its
	// slots stay taken until the host says they are gone.
	unstopped bool
	// byUser says that someone asked for the cancel (cancel, the web
	// page), rather than the run deciding it.
	byUser bool
}

// outcomeOf says what an attempt that ended with exit status code (-1:
// none) and err means.
func outcomeOf(code int, err error) outcome {
	lost := errors.Is(err, executor.ErrConnectionLost)
	unreached := errors.Is(err, executor.ErrCancelUnreached)
	down := errors.Is(err, executor.ErrHostDown)
	o := outcome{
		hostDown:   lost || unreached || down,
		limited:    errors.Is(err, executor.ErrLimit),
		unfit:      errors.Is(err, executor.ErrUnfit),
		unstopped:  lost || unreached,
		byUser:     errors.Is(err, errCancelAsked),
		notStarted: down || errors.Is(err, executor.ErrLimit),
	}
	switch {
	case err == nil && code == 0:
		o.kind = EventFinished
	case err == nil:
		o.kind = EventFailed
	case errors.Is(err, errJobTimeout), errors.Is(err, executor.ErrTimeLimit):
		o.kind = EventTimeout
	case errors.Is(err, context.Canceled):
		o.kind = EventCancelled
	case lost || o.notStarted || errors.Is(err, executor.ErrJobLost):
		o.kind = EventLost
	default:
		o.kind = EventFailed
	}
	return o
}
