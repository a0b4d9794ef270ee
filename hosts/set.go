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
	r, ok := s[host]
	if !ok {
		return -1, fmt.Errorf("%s: not a host of this run", host)
	}
	return r.Run(ctx, c, stdout, stderr)
}
