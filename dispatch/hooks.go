package dispatch

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// Hooks are commands run under sh -c on the coordinator's machine: JobEnd
// as each job's story ends, RunEnd as the run ends, each told what
// happened in GPUDISPATCH_* variables. Job-end hooks wait their turn in
// the order jobs ended, at most Jobs of them running at once, on
// goroutines of their own, so a slow one delays no job; a hook is killed
// after Timeout, with every process it started (its process group); a
// failing one is a warning with its last line of stderr. The run waits at
// its end for the hooks still to run (each up to its timeout).
type Hooks struct {
	JobEnd, RunEnd string
	// Timeout bounds each hook (0: DefaultHookTimeout).
	Timeout time.Duration
	// Jobs is how many job-end hooks run at once (0: DefaultHookJobs).
	Jobs int
}

// DefaultHookTimeout is Hooks.Timeout's default.
const DefaultHookTimeout = time.Minute

// DefaultHookJobs is Hooks.Jobs's default: a few at once, so that a sweep
// of fast jobs with a slow hook does not start hundreds of processes.
const DefaultHookJobs = 4

// hookRunner runs a run's hooks and keeps their warnings until the loop
// records them.
type hookRunner struct {
	wg       sync.WaitGroup
	mu       sync.Mutex
	warnings []Event
	// said is signalled (without blocking) when a warning is kept.
	said chan struct{}
	// queue holds the hooks waiting their turn, in order; running counts
	// the goroutines that run them, at most max.
	queue   []func()
	running int
	max     int
}

// hookState is how a job's outcome is named to a hook: succeeded, failed,
// timeout, lost, cancelled, rejected.
func hookState(outcome EventKind) string {
	if outcome == EventFinished {
		return "succeeded"
	}
	return string(outcome)
}

// jobHook runs the job-end hook for e, a job's outcome.
func (r *run) jobHook(e Event) {
	exit, seconds := "", ""
	if e.Exit != nil {
		exit = strconv.Itoa(*e.Exit)
	}
	if e.Start != nil && e.End != nil {
		seconds = strconv.FormatFloat(e.End.Sub(*e.Start).Seconds(), 'f', 3, 64)
	}
	env := []string{"GPUDISPATCH_JOB_ID=" + e.Job, "GPUDISPATCH_STATE=" + hookState(e.Event), "GPUDISPATCH_HOST=" + e.Host,
		"GPUDISPATCH_STDOUT=" + e.Stdout, "GPUDISPATCH_STDERR=" + e.Stderr, "GPUDISPATCH_EXIT=" + exit,
		"GPUDISPATCH_SECONDS=" + seconds, "GPUDISPATCH_GPUS=" + executor.GPUIDs(e.GPUs)}
	if len(e.Return) > 0 {
		env = append(env, "GPUDISPATCH_RETURN_DIR="+ReturnDir(e))
	}
	r.hooks.add(cmp.Or(r.opts.Hooks.Jobs, DefaultHookJobs), func() {
		if err := r.runHook(r.opts.Hooks.JobEnd, env); err != nil {
			r.hooks.keep(r.warning("", e.Job, fmt.Sprintf("the job-end hook for job %s %v", e.Job, err)))
		}
	})
}

// add queues hook, to run once the hooks before it started, with at most
// max running at once; it never waits.
func (h *hookRunner) add(max int, hook func()) {
	h.wg.Add(1)
	h.mu.Lock()
	h.queue = append(h.queue, hook)
	start := h.running < max
	if start {
		h.running++
	}
	h.mu.Unlock()
	if start {
		go h.work()
	}
}

// work runs queued hooks, one after another, until none is left.
func (h *hookRunner) work() {
	for {
		h.mu.Lock()
		if len(h.queue) == 0 {
			h.running--
			h.mu.Unlock()
			return
		}
		hook := h.queue[0]
		h.queue = h.queue[1:]
		h.mu.Unlock()
		hook()
		h.wg.Done()
	}
}

// runEndHook runs the run-end hook, and waits for it.
func (r *run) runEndHook() {
	env := []string{"GPUDISPATCH_LOG_DIR=" + r.logDirAbs, "GPUDISPATCH_RUN=" + r.id}
	for _, o := range Outcomes {
		env = append(env, "GPUDISPATCH_"+strings.ToUpper(hookState(o))+"="+strconv.Itoa(r.summary.Counts[o]))
	}
	if err := r.runHook(r.opts.Hooks.RunEnd, env); err != nil {
		r.hooks.keep(r.warning("", "", "the run-end hook "+err.Error()))
	}
}

// runHook runs cmd under sh -c with env added to the coordinator's, and
// says how it failed: its exit status and last line of stderr, or that it
// took too long.
func (r *run) runHook(cmd string, env []string) error {
	timeout := cmp.Or(r.opts.Hooks.Timeout, DefaultHookTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c := exec.CommandContext(ctx, "sh", "-c", cmd)
	inGroup(c)
	c.Env = append(os.Environ(), env...)
	c.WaitDelay = time.Second
	var errs bytes.Buffer
	c.Stderr = &errs
	err := c.Run()
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("was killed after --hook-timeout %s: %s", timeout, cmd)
	case err != nil:
		last := strings.TrimSpace(errs.String())
		if i := strings.LastIndexByte(last, '\n'); i >= 0 {
			last = last[i+1:]
		}
		if last != "" {
			last = ": " + Printable(last)
		}
		return fmt.Errorf("failed (%v)%s", err, last)
	}
	return nil
}

// keep holds e for the loop to record.
func (h *hookRunner) keep(e Event) {
	h.mu.Lock()
	h.warnings = append(h.warnings, e)
	h.mu.Unlock()
	select {
	case h.said <- struct{}{}:
	default:
	}
}

// onHookSaid records the warnings the hooks left.
func (r *run) onHookSaid() {
	r.hooks.mu.Lock()
	ws := r.hooks.warnings
	r.hooks.warnings = nil
	r.hooks.mu.Unlock()
	for _, e := range ws {
		r.record(e)
	}
}

// endHooks waits for the job-end hooks still running, runs the run-end
// hook, and records what they said.
func (r *run) endHooks() {
	r.hooks.wg.Wait()
	if r.opts.Hooks.RunEnd != "" {
		r.runEndHook()
	}
	r.onHookSaid()
}
