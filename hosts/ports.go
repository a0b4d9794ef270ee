package hosts

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/gpudispatch/gpudispatch/hosts/slurm"
)

// freePortScript prints a TCP port from 29500 up (torchrun's default and
// the ports after it, below Linux's ephemeral range) that no socket on the
// machine uses, in any state, by /proc/net/tcp and tcp6: a job over
// several hosts gets it as its MASTER_PORT. It looks from a random place
// in the range (two jobs started together on one host do not pick the
// same one) and goes round it once. Plain sh and awk (mawk too), as the
// login shell may be any.
const freePortScript = `cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk -v lo=29500 -v n=3000 -v r="$(od -An -N2 -tu2 /dev/urandom)" '
{ split($2, a, ":"); used[a[2]] = 1 }
END {
  for (i = 0; i < n; i++) {
    p = lo + (r + i) % n
    if (!(sprintf("%04X", p) in used)) { print p; exit 0 }
  }
  print "no free port from " lo " to " lo + n - 1 > "/dev/stderr"
  exit 1
}'
`

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
	out, code, err := probe(ctx, r, freePortScript)
	if err != nil {
		return 0, err
	}
	port, perr := strconv.Atoi(strings.TrimSpace(out))
	if code != 0 || perr != nil || port <= 0 {
		return 0, fmt.Errorf("%s: %s", host, strings.TrimSpace(out))
	}
	return port, nil
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
