package web

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch"
	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// page is what the templates draw: the run at one moment.
type page struct {
	// Base is the path the page's addresses start with: /t/TOKEN.
	Base string
	// Live is set for a part sent as an update: elapsed times are left to
	// the script (so that a part changes only when the run does).
	Live     bool
	Now      time.Time
	Ended    bool // the run has ended: its page stays for reading
	Serving  bool
	Stopping bool
	Progress progress
	Hosts    []hostCard
	Waiting  []dispatch.WaitingJob
	// MoreWaiting counts the waiting jobs not listed; Held are the jobs a
	// Slurm cluster holds.
	MoreWaiting int
	Held        []*jobInfo
	Finished    []*jobInfo
	Note        *note
	Timeline    timeline
	// Filter is what the page shows of the jobs (on first load; the
	// script applies it to updates).
	Filter filter
}

// progress is the bar: counts, rate and ETA.
type progress struct {
	Total, Done      int
	Running, Waiting int
	// Outcomes counts the ended jobs by outcome, those with none left out.
	Outcomes []outcome
	Rate     string
	ETA      time.Duration
}

// outcome is how many jobs ended one way.
type outcome struct {
	Word string
	N    int
	Good bool
}

// hostCard is one host: its health, its GPUs and their jobs.
type hostCard struct {
	dispatch.HostView
	GPUs []gpuRow
	// Jobs are a Slurm cluster's jobs (its GPUs are Slurm's).
	Jobs []*jobInfo
	// SampleErr says why nvidia-smi could not be asked; Sampled is when
	// it last was.
	SampleErr string
	Sampled   time.Time
}

// gpuRow is one GPU: the run's view of it, what nvidia-smi said of it, and
// the jobs on it.
type gpuRow struct {
	dispatch.GPUView
	Info *executor.GPU
	Jobs []*jobInfo
	// Chart is its memory and utilisation over the last hour, from the
	// page's samples (nil until it has two).
	Chart *chart
}

// build makes the page from the run's overview o (its last one, once the
// run has ended) and what the events said, with its timeline when
// timeline is set. The caller holds s.mu.
func (s *Server) build(o *dispatch.Overview, ended bool, now time.Time, live, timeline bool) *page {
	p := &page{Base: s.base, Live: live, Now: now, Ended: ended}
	if o == nil {
		o = &dispatch.Overview{}
	}
	if ended {
		oc := *o
		oc.Serving = false
		o = &oc
	}
	p.Serving, p.Stopping, p.Waiting, p.MoreWaiting = o.Serving, o.Stopping, o.Waiting, o.MoreWaiting
	p.Progress = s.progress(now)

	running := map[string][]*jobInfo{} // by host
	for _, j := range s.jobs {
		j := j.copy()
		switch {
		case j.Pending:
			p.Held = append(p.Held, j)
		case j.State == dispatch.StateRunning:
			// A job over several hosts is on each host's card.
			for _, pl := range j.Places() {
				running[pl.Host] = append(running[pl.Host], j)
			}
		}
	}
	byID := func(a, b *jobInfo) int { return cmp.Compare(a.Source+"\x00"+a.ID, b.Source+"\x00"+b.ID) }
	slices.SortFunc(p.Held, byID)
	for _, h := range o.Hosts {
		c := hostCard{HostView: h}
		jobs := running[h.Name]
		slices.SortFunc(jobs, func(a, b *jobInfo) int { return a.Start.Compare(b.Start) })
		if h.Cluster {
			c.Jobs = jobs
		}
		smp := s.samples[h.Name]
		c.Sampled = smp.at
		if smp.err != nil {
			c.SampleErr = smp.err.Error()
		}
		for _, g := range h.GPUs {
			row := gpuRow{GPUView: g}
			for i := range smp.gpus {
				if executor.GPUID(smp.gpus[i].Index) == g.ID {
					row.Info = &smp.gpus[i]
					row.Chart = chartOf(s.history[gpuPlace{h.Name, smp.gpus[i].Index}])
				}
			}
			for _, j := range jobs {
				if slices.Contains(j.gpusOn(h.Name), g.ID) {
					row.Jobs = append(row.Jobs, j)
				}
			}
			c.GPUs = append(c.GPUs, row)
		}
		p.Hosts = append(p.Hosts, c)
	}
	for i := len(s.ended) - 1; i >= 0; i-- {
		p.Finished = append(p.Finished, s.jobs[s.ended[i]].copy())
	}
	if timeline {
		p.Timeline = buildTimeline(s.jobs, o.Hosts, now, live)
	}
	return p
}

// progress counts the jobs by state, with the pace they end at.
func (s *Server) progress(now time.Time) progress {
	t := &s.tally
	p := progress{
		Total: t.Done() + t.Left(), Done: t.Done(),
		Running: t.Count(dispatch.StateRunning), Waiting: t.Count(dispatch.StateWaiting),
	}
	for _, o := range dispatch.Outcomes {
		if n := t.Count(o.State()); n > 0 {
			p.Outcomes = append(p.Outcomes, outcome{dispatch.StateWord(o.State()), n, o == dispatch.EventFinished})
		}
	}
	if rate, eta := t.Pace(s.first, now); rate > 0 {
		p.Rate, p.ETA = dispatch.RateString(rate), dispatch.RoundDuration(eta)
	}
	return p
}
