package sshpool

import (
	"errors"
	"testing"
	"time"
)

// retryAfter grows exponentially to its cap, waits long after a refused
// login, and jitters within ±50%.
func TestRetryAfter(t *testing.T) {
	tests := []struct {
		n        int
		err      error
		min, max time.Duration
	}{
		{1, errors.New("connection refused"), 500 * time.Millisecond, 1500 * time.Millisecond},
		{3, errors.New("connection refused"), 2 * time.Second, 6 * time.Second},
		{50, errors.New("i/o timeout"), retryMax / 2, retryMax * 3 / 2},
		{1, errors.New("ssh: handshake failed: ssh: unable to authenticate, attempted methods [none publickey]"), retryRefused / 2, retryRefused * 3 / 2},
		{1, ErrHostKeyChanged, retryRefused / 2, retryRefused * 3 / 2},
	}
	for _, tt := range tests {
		for i := 0; i < 50; i++ {
			if d := retryAfter(tt.n, tt.err); d < tt.min || d >= tt.max {
				t.Errorf("retryAfter(%d, %v) = %v, want in [%v, %v)", tt.n, tt.err, d, tt.min, tt.max)
				break
			}
		}
	}
}
