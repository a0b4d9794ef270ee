package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// Plan prints where each job would run and runs nothing (--dry-run). It
// admits and places jobs with the code of a real run (left-out and down
// hosts, jobs that can never run, Resume, after=), after one look at each
// host's GPUs as a run makes (their models, memory and MIG instances, for
// model=, vram= and mem=), and pretends that, when every slot is taken, or
// a job waits for another, the job that started first ends first, and
// succeeds. A job that cannot be placed is said to wait, with its reason.
// Nothing is written to the log dir.
func Plan(opts Options, inputs []Input, w io.Writer) (*Summary, error) {
	r, err := prepare(opts)
	if err != nil {
		return nil, err
	}
	for _, d := range r.past.damaged {
		fmt.Fprintf(w, "gpudispatch: warning: --resume: %s; the line was skipped\n", d)
	}
	for _, h := range r.sched.table.hosts {
		if why := opts.Down[h.host.Name]; why != nil {
			r.sched.table.setDown(h, why.Error(), time.Now())
		}
	}
	r.lookOnce()
	jobs := make(chan parsed)
	stop := make(chan struct{})
	defer close(stop)
	go read(inputs, opts.Kind, jobs, stop)
	s := &simulation{r: r, w: w, ended: map[string]bool{}}
	for p := range jobs {
		j, kind, why := r.verdict(p)
		switch kind {
		case EventRejected, EventFailed:
			verb := "rejected"
			if kind == EventFailed {
				verb = "would fail"
			}
			fmt.Fprintf(w, "%s: job %s %s: %s\n", j.Where(), j.ID(), verb, why)
			e := r.event(kind, j, 0)
			e.Error = why.Error()
			r.summary.add(e)
			continue
		case skipped:
			fmt.Fprintf(w, "job %s skipped: it succeeded before\n", j.ID())
			r.summary.Skipped++
			r.deps.earlier[j.ID()] = true
			continue
		case "":
			continue
		}
		need, _ := r.resolveDeps(j) // verdict checked them
		q := &queued{job: j}
		r.serving.jobs[j.ID()] = q
		s.add(q, need)
	}
	s.finish()
	return r.summary, nil
}

// lookOnce asks every host that is up what its GPUs are, as a run does as
// it opens them (usage.go, memory.go), and each Slurm cluster its GPU
// types: at once, each within the probe's own limit.
func (r *run) lookOnce() {
	if r.opts.Executor == nil {
		return
	}
	type answer struct {
		h    *hostSlots
		gpus []executor.GPU
		err  error
	}
	var wg sync.WaitGroup
	answers := make(chan answer, len(r.sched.table.hosts))
	for _, h := range r.sched.table.hosts {
		switch {
		case h.down || h.removed:
		case h.cluster:
			r.gpuTypes(h)
		default:
			wg.Go(func() {
				gpus, err := r.opts.Executor.ProbeGPUs(context.Background(), h.host.Name)
				answers <- answer{h, gpus, err}
			})
		}
	}
	wg.Wait()
	close(answers)
	for a := range answers {
		if a.err != nil {
			// As a run that cannot ask: the GPUs as listed, and mem=
			// jobs kept off them (rejected where it never can).
			a.h.memAsk, a.h.memErr = memKnown, a.err.Error()
			a.h.memNever = errors.Is(a.err, executor.ErrNoNvidiaSMI)
			continue
		}
		seen, _ := byIndex(a.gpus)
		r.sched.table.learnKinds(a.h, seen)
		r.sched.table.learnMemory(a.h, a.gpus, r.opts.SkipBusy)
	}
}

// simulation is a dry run's pretend time: the jobs placed and running, in
// the order they started, and those waiting for others to end.
type simulation struct {
	r       *run
	w       io.Writer
	running []assignment
	// blocked are the jobs whose dependencies have not ended, with them.
	blocked []blockedJob
	ended   map[string]bool
}

type blockedJob struct {
	q    *queued
	need map[string]bool
}

// add places q once the jobs it needs ended, ending running jobs, the
// first started first, until it is placed or nothing is left to end.
func (s *simulation) add(q *queued, need map[string]bool) {
	s.blocked = append(s.blocked, blockedJob{q, need})
	s.settle()
}

// settle queues the jobs whose dependencies ended, places what it can,
// and ends running jobs until nothing waits, or nothing runs.
func (s *simulation) settle() {
	sched := s.r.sched
	for {
		kept := s.blocked[:0]
		for _, b := range s.blocked {
			if s.ready(b.need) {
				sched.add(b.q)
			} else {
				kept = append(kept, b)
			}
		}
		s.blocked = kept
		for _, a := range sched.next() {
			after := ""
			if len(a.q.job.After)+len(a.q.job.AfterAny) > 0 {
				after = " after " + strings.Join(append(append([]string(nil), a.q.job.After...), a.q.job.AfterAny...), ",")
			}
			fmt.Fprintf(s.w, "job %s would run on %s%s: %s\n", a.q.job.ID(), a.p, after, OneLine(a.q.job.Command))
			s.r.summary.add(s.r.event(EventFinished, a.q.job, 1))
			s.running = append(s.running, a)
		}
		if len(s.running) == 0 {
			// Nothing runs that could end: what waits would wait here.
			s.cannot()
			return
		}
		if len(sched.waiting) == 0 && len(s.blocked) == 0 {
			return
		}
		// The first started ends first, and succeeds.
		a := s.running[0]
		s.running = s.running[1:]
		sched.table.release(a.p)
		s.ended[a.q.job.ID()] = true
	}
}

// ready reports whether every job in need ended.
func (s *simulation) ready(need map[string]bool) bool {
	for id := range need {
		if !s.ended[id] && !s.r.deps.earlier[id] {
			return false
		}
	}
	return true
}

// cannot says why each job that cannot be placed with every slot free
// would wait: only down hosts could run it, its memory or kind is not
// known, its host's GPUs are busy.
func (s *simulation) cannot() {
	t := s.r.sched.table
	for _, q := range s.r.sched.drop() {
		why := t.downFor(q.job)
		if why == "" {
			why = strings.TrimSuffix(t.whyWaiting(q.job, 0), "; first in line: slots are held for it as they free up")
		}
		fmt.Fprintf(s.w, "job %s would wait: %s\n", q.job.ID(), why)
	}
}

// finish ends the simulation: the jobs still waiting for others wait for
// jobs that would not run.
func (s *simulation) finish() {
	for len(s.blocked) > 0 && len(s.running) > 0 {
		s.settle()
	}
	for _, b := range s.blocked {
		var never []string
		for id := range b.need {
			if !s.ended[id] && !s.r.deps.earlier[id] {
				never = append(never, id)
			}
		}
		slices.Sort(never)
		fmt.Fprintf(s.w, "job %s would wait: for %s, which would not run here\n", b.q.job.ID(), strings.Join(never, ", "))
	}
}
