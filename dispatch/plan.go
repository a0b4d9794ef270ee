package dispatch

import (
	"fmt"
	"io"
	"time"
)

// Plan prints where each job would run and runs nothing (--dry-run). It
// admits and places jobs with the code of a real run (left-out and down
// hosts, jobs that can never run, Resume), and pretends that, when every
// slot is taken, the job that started first ends first. Jobs that only
// down hosts could run are said to wait for them. Nothing is written to the
// log dir.
func Plan(opts Options, inputs []Input, w io.Writer) (*Summary, error) {
	r, err := prepare(opts)
	if err != nil {
		return nil, err
	}
	for _, d := range r.damaged {
		fmt.Fprintf(w, "gpudispatch: warning: --resume: %s; the line was skipped\n", d)
	}
	for _, h := range r.sched.table.hosts {
		if why := opts.Down[h.host.Name]; why != nil {
			r.sched.table.setDown(h, why.Error(), time.Now())
		}
	}
	jobs := make(chan parsed)
	stop := make(chan struct{})
	defer close(stop)
	go read(inputs, opts.Kind, jobs, stop)
	var running []placement
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
			continue
		case "":
			continue
		}
		r.sched.add(&queued{job: j})
		for {
			for _, a := range r.sched.next() {
				fmt.Fprintf(w, "job %s would run on %s: %s\n", a.q.job.ID(), a.p, OneLine(a.q.job.Command))
				r.summary.add(r.event(EventFinished, a.q.job, 1))
				running = append(running, a.p)
			}
			if len(r.sched.waiting) == 0 {
				break
			}
			if len(running) == 0 {
				// Only hosts that are down now could run what waits.
				for _, q := range r.sched.drop() {
					fmt.Fprintf(w, "job %s would wait: %s\n", q.job.ID(), r.sched.table.downFor(q.job))
				}
				break
			}
			r.sched.table.release(running[0])
			running = running[1:]
		}
	}
	return r.summary, nil
}
