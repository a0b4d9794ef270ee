package dispatch

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// Every way an attempt can end, as the Executor says it, means one
// outcome.
func TestOutcomeOf(t *testing.T) {
	t.Parallel()
	lostConn := fmt.Errorf("n1: %w: read: EOF", executor.ErrConnectionLost)
	tests := []struct {
		name string
		code int
		err  error
		want outcome
	}{
		{"exit 0", 0, nil, outcome{kind: EventFinished}},
		{"exit 3", 3, nil, outcome{kind: EventFailed}},
		{"killed by a signal", 137, nil, outcome{kind: EventFailed}},
		{"the run's time limit", -1, fmt.Errorf("n1: %w", errJobTimeout), outcome{kind: EventTimeout}},
		{"the host's time limit", -1, fmt.Errorf("slurm: %w", executor.ErrTimeLimit), outcome{kind: EventTimeout}},
		{"cancelled", -1, context.Canceled, outcome{kind: EventCancelled}},
		{"cancelled on request", -1, fmt.Errorf("n1: %w", errCancelAsked), outcome{kind: EventCancelled, byUser: true}},
		{"connection lost", -1, lostConn, outcome{kind: EventLost, hostDown: true, unstopped: true}},
		{"a cancel that did not reach", -1, fmt.Errorf("n1: %w (%w: EOF)", context.Canceled, executor.ErrCancelUnreached),
			outcome{kind: EventCancelled, hostDown: true, unstopped: true}},
		{"a time limit that did not reach", -1, fmt.Errorf("n1: %w (%w: EOF)", errJobTimeout, executor.ErrCancelUnreached),
			outcome{kind: EventTimeout, hostDown: true, unstopped: true}},
		{"host down before the start", -1, fmt.Errorf("n1: %w", executor.ErrHostDown), outcome{kind: EventLost, hostDown: true, notStarted: true}},
		{"a batch system's limit", -1, fmt.Errorf("hpc: %w", executor.ErrLimit), outcome{kind: EventLost, limited: true, notStarted: true}},
		{"environment not set up", -1, fmt.Errorf("n1: %w", executor.ErrUnfit), outcome{kind: EventFailed, unfit: true}},
		{"lost by a batch system", -1, fmt.Errorf("hpc: %w", executor.ErrJobLost), outcome{kind: EventLost}},
		{"log file not written", -1, errors.New("write l/1.out: no space left on device"), outcome{kind: EventFailed}},
	}
	for _, tt := range tests {
		if got := outcomeOf(tt.code, tt.err); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
