package hosts

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/gpudispatch/gpudispatch/hosts/slurm"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
)

// FreePort finds a TCP port no one uses on host, for a job over several
// hosts whose part 0 runs there (its MASTER_PORT).
func (l *Lab) FreePort(ctx context.Context, host string) (int, error) {
	r, err := l.lookup(ctx, host)
	if err != nil {
		return 0, err
	}
	switch r.(type) {
	case *slurm.Cluster:
		return 0, fmt.Errorf("%s: a Slurm cluster's nodes are Slurm's: a job over several hosts runs there as one batch job", host)
	case *Remote:
	default:
		// This machine: the kernel gives a port no one uses.
		ln, err := net.Listen("tcp", ":0")
		if err != nil {
			return 0, err
		}
		defer ln.Close()
		return ln.Addr().(*net.TCPAddr).Port, nil
	}
	// A look like those at the GPUs: within --probe-timeout, and none
	// while an earlier one still hangs there.
	v, err := l.probes.run(ctx, host, "the look for a free port", l.opts.ProbeTimeout, func(ctx context.Context) (any, error) {
		out, code, err := probe(ctx, r, spawn.FreePort)
		if err != nil {
			return 0, err
		}
		port, perr := strconv.Atoi(strings.TrimSpace(out))
		if code != 0 || perr != nil || port <= 0 {
			return 0, errors.New(strings.TrimSpace(out))
		}
		return port, nil
	})
	if err != nil {
		return 0, fmt.Errorf("%s: %w", host, err)
	}
	return v.(int), nil
}

// Address is host's address as other machines reach it: what the pool
// connects to for a remote host, this machine's name for a local one.
func (l *Lab) Address(host string) string {
	l.mu.RLock()
	r := l.runners[host]
	l.mu.RUnlock()
	switch r := r.(type) {
	case *Remote:
		return r.pool.Hostname()
	case *Local:
		name, _ := os.Hostname()
		return name
	}
	return ""
}
