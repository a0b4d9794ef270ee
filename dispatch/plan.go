package dispatch

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
)

// Plan prints where each job would run and runs nothing (--dry-run). It uses
// the scheduler of a real run and pretends that, when every slot is taken,
// the job that started first ends first. Nothing is written to the log dir.
func Plan(opts Options, inputs []Input, w io.Writer) (*Summary, error) {
	done := map[jobKey]bool{}
	if opts.Resume {
		var err error
		if done, err = succeeded(filepath.Join(opts.LogDir, JournalName)); err != nil {
			return nil, &SetupError{fmt.Errorf("--resume: %w", err)}
		}
	}
	sched := &scheduler{table: newSlotTable(opts.Inventory)}
	summary := newSummary()
	jobs := make(chan parsed)
	stop := make(chan struct{})
	defer close(stop)
	go read(inputs, jobs, stop)
	var running []placement
	for p := range jobs {
		var le *LineError
		switch {
		case errors.As(p.err, &le):
			fmt.Fprintf(w, "%s: job %s rejected: %s\n", le.Job.Where(), le.Job.ID(), le.Err)
			summary.add(Event{Event: EventRejected, Job: le.Job.ID(), Seq: le.Job.Seq, Source: le.Job.Where(), Error: le.Err.Error()})
			continue
		case p.err != nil:
			summary.InputErrors = append(summary.InputErrors, p.err.Error())
			continue
		}
		j := p.job
		if err := sched.table.check(j); err != nil {
			fmt.Fprintf(w, "%s: job %s rejected: %s\n", j.Where(), j.ID(), err)
			summary.add(Event{Event: EventRejected, Job: j.ID(), Seq: j.Seq, Source: j.Where(), Error: err.Error()})
			continue
		}
		if done[jobKey{j.Text, j.Occurrence}] {
			fmt.Fprintf(w, "job %s skipped: it succeeded before\n", j.ID())
			summary.Skipped++
			continue
		}
		sched.add(&queued{job: j})
		for {
			for _, a := range sched.next() {
				fmt.Fprintf(w, "job %s would run on %s: %s\n", a.q.job.ID(), a.p, OneLine(a.q.job.Command))
				summary.add(Event{Event: EventFinished})
				running = append(running, a.p)
			}
			if len(sched.waiting) == 0 {
				break
			}
			sched.table.release(running[0])
			running = running[1:]
		}
	}
	return summary, nil
}
