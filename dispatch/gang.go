package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// A job over several hosts ([nodes=N]) is one attempt of one job, as any
// other: one queued job, one placement (GPUs on N hosts, grouped by host
// in rank order: placement.parts), one claim on all its GPUs, one result
// and one outcome. What differs is how it runs: N parts, one per host,
// each a Command of its own with the ranks' variables, started together
// once every GPU is claimed, and ended together: the first part that
// fails, times out or is lost ends the others (runParts). Part 0's
// output is the job's logs (ID.out, ID.err), part K's ID.rankK.out and
// ID.rankK.err.

// part is one part of a job over several hosts, as its attempt starts it.
type part struct {
	host string
	c    executor.Command
	logs logFiles
}

// gangEnv is what every part of a job over several hosts is told of the
// others (MASTER_PORT comes later, from masterPort): NODE_RANK, NNODES,
// MASTER_ADDR (part 0's host as the others reach it), WORLD_SIZE and
// GPUDISPATCH_NODES (the hosts, in rank order).
func gangEnv(parts []placement, rank int, j *Job, master string) []string {
	names := make([]string, len(parts))
	for i, p := range parts {
		names[i] = p.host.host.Name
	}
	return []string{
		"NODE_RANK=" + strconv.Itoa(rank),
		"NNODES=" + strconv.Itoa(len(parts)),
		"MASTER_ADDR=" + master,
		"WORLD_SIZE=" + strconv.Itoa(len(parts)*j.GPUs),
		"GPUDISPATCH_NODES=" + strings.Join(names, ","),
	}
}

// masterAddr is h's address as the other hosts of a job reach it: its
// inventory address:, else what the Executor connects to, else its name.
func (r *run) masterAddr(h inventory.Host) string {
	if h.Address != "" {
		return h.Address
	}
	if pf, ok := r.opts.Executor.(executor.Gang); ok {
		if a := pf.Address(h.Name); a != "" {
			return a
		}
	}
	return h.Name
}

// masterPort finds a free port on part 0's host, for every part. A host
// that answers and finds none (or whose look hangs) is set aside as one
// that cannot set up the job is (an executor.UnfitError): nothing ran, and
// the job waits again.
func (r *run) masterPort(ctx context.Context, host string) (int, error) {
	pf, ok := r.opts.Executor.(executor.Gang)
	if !ok {
		return 0, &executor.UnfitError{Where: host, Why: "cannot look for a free port there for part 0 of a job over several hosts"}
	}
	port, err := pf.FreePort(ctx, host)
	switch {
	case err == nil:
		return port, nil
	case unreachable(err) || ctx.Err() != nil:
		return 0, fmt.Errorf("looking for a free MASTER_PORT on %s: %w", host, err)
	}
	return 0, &executor.UnfitError{Where: host, Why: "no free MASTER_PORT found there for part 0 of a job over several hosts: " + err.Error()}
}

// openPartLogs opens the logs of parts 1.. of an attempt whose own logs
// (part 0's) are l: base.rank1.out, base.rank1.err...
func openPartLogs(l *logFiles, n int, mode fs.FileMode) error {
	base := strings.TrimSuffix(l.out.Name(), ".out")
	for k := 1; k < n; k++ {
		out, err := create(base+".rank"+strconv.Itoa(k)+".out", mode)
		if err != nil {
			return err
		}
		errf, err := create(base+".rank"+strconv.Itoa(k)+".err", mode)
		if err != nil {
			out.Close()
			return err
		}
		l.parts = append(l.parts, logFiles{out: &logWriter{f: out}, err: &logWriter{f: errf}})
	}
	return nil
}

// PartError says which part of a job over several hosts ended it, and
// how: the job's end is that part's (its exit status, its error).
type PartError struct {
	Rank int
	Host string
	Code int
	Err  error
}

func (e *PartError) Error() string {
	what := "exited " + strconv.Itoa(e.Code)
	if e.Err != nil {
		what = e.Err.Error()
	}
	return fmt.Sprintf("part %d on %s: %s", e.Rank, e.Host, what)
}

// Unwrap is the part's own error.
func (e *PartError) Unwrap() error { return e.Err }

// errPartEnded ends the other parts of a job whose part ended it.
var errPartEnded = errors.New("another part of the job ended it")

// runParts runs the n parts of one attempt together (run runs part k,
// on hosts[k]) and returns once every part has ended: the first that
// fails, times out or is lost ends the others (through their context:
// TERM, then KILL after the grace period, as any cancel), and the
// attempt's end is that part's (rank). When every part exits 0, or the
// attempt is ended from outside (a cancel, the run's time limit), it is
// part 0's. A part whose host could not be told to stop
// (executor.ErrCancelUnreached) comes first: its GPUs may still be in
// use.
func runParts(ctx context.Context, hosts []string, run func(ctx context.Context, k int) (int, error)) (code, rank int, err error) {
	pctx, end := context.WithCancelCause(ctx)
	defer end(nil)
	type ended struct {
		rank, code int
		err        error
	}
	ends := make(chan ended, len(hosts))
	for k := range hosts {
		go func() {
			code, err := run(pctx, k)
			ends <- ended{k, code, err}
		}()
	}
	codes, errs := make([]int, len(hosts)), make([]error, len(hosts))
	first := -1
	for range hosts {
		e := <-ends
		codes[e.rank], errs[e.rank] = e.code, e.err
		if first < 0 && ctx.Err() == nil && (e.code != 0 || e.err != nil) {
			first = e.rank
			end(errPartEnded)
		}
	}
	for k, err := range errs {
		if errors.Is(err, executor.ErrCancelUnreached) {
			first = k
			break
		}
	}
	if first < 0 {
		return codes[0], 0, errs[0]
	}
	return codes[first], first, &PartError{Rank: first, Host: hosts[first], Code: codes[first], Err: errs[first]}
}

// partsProgress tells progress that the attempt runs once every one of
// its n parts said so (its start is the last one's), after ready, which
// lets them go; what a part says that is not that goes on as it is, with
// the part's host. A job on one host is its one part: what it says goes
// on as it is.
func partsProgress(n int, progress func(host string, p executor.Progress), ready func()) func(host string) func(executor.Progress) {
	if n == 1 {
		return func(host string) func(executor.Progress) {
			return func(p executor.Progress) { progress(host, p) }
		}
	}
	var mu sync.Mutex
	running := map[string]bool{}
	var last time.Time
	return func(host string) func(executor.Progress) {
		return func(p executor.Progress) {
			if !p.Running {
				progress(host, p)
				return
			}
			mu.Lock()
			running[host] = true
			started := p.Started
			if started.IsZero() {
				started = time.Now()
			}
			if started.After(last) {
				last = started
			}
			all, at := len(running) == n, last
			mu.Unlock()
			if all {
				ready()
				p.Started = at
				progress(host, p)
			}
		}
	}
}

// letGo tells every part of an attempt (part k tagged tags[k] on
// hosts[k]), each set up and waiting, to run its line, all at once; a
// part that cannot be told ends the attempt (kill) as a part that could
// not start: nothing ran.
func (r *run) letGo(ctx context.Context, hosts, tags []string, kill context.CancelCauseFunc) {
	g, ok := r.opts.Executor.(executor.Gang)
	if !ok {
		return
	}
	var wg sync.WaitGroup
	for k, host := range hosts {
		wg.Go(func() {
			if err := g.Go(ctx, host, tags[k]); err != nil {
				kill(&PartError{Rank: k, Host: host, Code: -1, Err: fmt.Errorf("%w: its part could not be let go: %v", executor.ErrHostDown, err)})
			}
		})
	}
	wg.Wait()
}

// partEvents lists parts 1.. of an attempt (of parts, its placement's),
// for its events.
func partEvents(parts []placement, tags []string, logs logFiles) []Part {
	var out []Part
	for k, pt := range parts[1:] {
		e := Part{Rank: k + 1, Host: pt.host.host.Name, GPUs: pt.gpuIDs()}
		if k < len(tags)-1 {
			e.Tag = tags[k+1]
		}
		if k < len(logs.parts) {
			e.Stdout, e.Stderr = logs.parts[k].out.Name(), logs.parts[k].err.Name()
		}
		out = append(out, e)
	}
	return out
}

// partTag names part rank of the attempt tagged tag on its host.
func partTag(tag string, rank int) string {
	if rank == 0 {
		return tag
	}
	return tag + ".rank" + strconv.Itoa(rank)
}
