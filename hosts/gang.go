package hosts

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpudispatch/gpudispatch/hosts/jobshell"
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
	// while an earlier one still hangs there; two jobs' never share one
	// (nor its port).
	v, err := l.probes.alone(ctx, host, "the look for a free port", l.opts.ProbeTimeout, func(ctx context.Context) (any, error) {
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

// gate is what a gated command's line begins with, on its first line (so
// that the line's own line numbers stand): it waits, its shell set up, for
// Go's file ~/.gpudispatch/go-TAG (looking every 20 ms: the parts of a
// job start within that of each other), removes it, and goes on; after
// ten minutes without it (the coordinator gone before it could say go) it
// gives up. Plain sh, as the login shell may be any.
func gate(tag string) string {
	return `_g_go="$HOME/.gpudispatch/go-` + tag + `" _g_n=0; while [ ! -e "$_g_go" ]; do ` +
		`_g_n=$((_g_n + 1)); if [ "$_g_n" -gt 30000 ]; then echo "gpudispatch: the job's other parts never started" >&2; exit 1; fi; sleep 0.02; done; ` +
		`rm -f -- "$_g_go"; unset _g_go _g_n; `
}

// Go lets the gated command tagged tag on host run: it makes the file its
// gate waits for (on this machine at once; on a remote host as a look at
// it is made, within --probe-timeout, returning on time even where the
// login shell hangs).
func (l *Lab) Go(ctx context.Context, host, tag string) error {
	if !jobshell.ValidTag(tag) {
		return fmt.Errorf("%s: bad tag %q", host, tag) // it names a file, in a line of shell
	}
	r, err := l.lookup(ctx, host)
	if err != nil {
		return err
	}
	switch r.(type) {
	case *slurm.Cluster:
		return fmt.Errorf("%s: a Slurm cluster runs the parts of a job as one batch job: nothing to let go", host)
	case *Remote:
	default:
		home, err := os.UserHomeDir()
		if err == nil {
			err = os.MkdirAll(filepath.Join(home, ".gpudispatch"), 0o700)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(home, ".gpudispatch", "go-"+tag), nil, 0o600)
		}
		return err
	}
	// A look like those at the GPUs: within --probe-timeout, and none
	// while an earlier one still hangs there; each part's word is its own.
	_, err = l.probes.alone(ctx, host, "the word to a part to start", l.opts.ProbeTimeout, func(ctx context.Context) (any, error) {
		out, code, err := probe(ctx, r, `mkdir -p "$HOME/.gpudispatch" && : >"$HOME/.gpudispatch/go-`+tag+`"`)
		if err == nil && code != 0 {
			err = errors.New(out)
		}
		return nil, err
	})
	if err != nil {
		return fmt.Errorf("%s: %w", host, err)
	}
	return nil
}
