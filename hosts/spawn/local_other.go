//go:build !unix

package spawn

import (
	"context"
	"errors"
	"io"
	"runtime"
)

// ErrLocalUnsupported is why local hosts cannot run here: jobs need bash,
// process groups and flock(1), which this system does not give. Remote
// hosts work from here all the same.
var ErrLocalUnsupported = errors.New("local hosts are not supported on " + runtime.GOOS + ": use remote hosts (SSH) from this machine")

// LocalSupported says why bash cannot be started on this machine.
func LocalSupported() error { return ErrLocalUnsupported }

// Local fails: see ErrLocalUnsupported.
func Local(context.Context, string, io.Writer, io.Writer) (*Proc, error) {
	return nil, ErrLocalUnsupported
}

// localSignal is "": no local process runs here.
func localSignal(error) string { return "" }
