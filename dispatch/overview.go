package dispatch

import (
	"context"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// Overview is a run as its loop sees it at one moment: its hosts and GPUs,
// and the head of its queue in order, with why each job waits. The web
// page draws it; the jobs that run and ended it learns from the events.
type Overview struct {
	// Serving is set for a standing queue (jobs can be added), Stopping
	// once the run takes no new job.
	Serving  bool
	Stopping bool
	Hosts    []HostView
	// Waiting is the head of the queue, in the order jobs will start;
	// MoreWaiting counts the waiting jobs after it.
	Waiting     []WaitingJob
	MoreWaiting int
}

// HostView is one host of a run.
type HostView struct {
	Name string
	// Cluster is set for a Slurm cluster: it has no GPUs of its own to
	// show, and Slots places for jobs.
	Cluster bool
	Slots   int
	// Down is set while the host cannot be reached, since DownSince, for
	// Why. Removed is set once an edit of the inventory dropped it.
	Down      bool
	DownSince time.Time
	Why       string
	Removed   bool
	// Opening is set while the host is still being opened (Down is set
	// too): it has not answered yet.
	Opening bool
	// Unfit, when set, says why the host cannot set up its jobs'
	// environment (its workdir, env or setup): it takes none of them
	// until it is tried again.
	Unfit string
	GPUs  []GPUView
}

// GPUView is one GPU of a host: its slots, how many are taken, and why it
// takes no job when it is set aside (locked by another run, busy).
type GPUView struct {
	ID    executor.GPUID
	Slots int
	Used  int
	Busy  string
	// MemJobs counts its jobs that declare memory (they take no slot),
	// MemUsedMB the memory they declare, MemBudgetMB what it gives such
	// jobs (-1: not known yet).
	MemJobs     int
	MemUsedMB   int
	MemBudgetMB int
	// Model and MemoryMB are what the run's looks say the GPU is (a MIG
	// instance: its GPU's name and profile), "" and 0 until one answered:
	// the page has them before its own first sample.
	Model    string
	MemoryMB int
}

// WaitingJob is a job in the queue.
type WaitingJob struct {
	ID       string
	Command  string
	Priority int
	// Why says why it waits: its host is down, its GPU is busy, it waits
	// for 2 GPUs of one host, or for its turn.
	Why string
}

// Overview returns the run's hosts and at most limit waiting jobs.
func (c *Control) Overview(ctx context.Context, limit int) (*Overview, error) {
	var o *Overview
	if err := c.do(ctx, func(r *run) { o = r.overview(limit) }); err != nil {
		return nil, err
	}
	return o, nil
}

func (r *run) overview(limit int) *Overview {
	o := &Overview{Serving: r.opts.Serve, Stopping: r.stopping}
	for _, h := range r.sched.table.hosts {
		hv := HostView{
			Name: h.host.Name, Cluster: h.cluster,
			Down: h.down, DownSince: h.since, Why: h.why, Removed: h.removed, Opening: h.opening,
		}
		if len(h.unfit) > 0 {
			hv.Unfit = h.unfit[h.preludeKey].why
		}
		for _, g := range h.gpus {
			if h.cluster {
				hv.Slots = g.cap
				continue
			}
			hv.GPUs = append(hv.GPUs, GPUView{ID: g.id, Slots: g.cap, Used: g.used, Busy: g.busy,
				MemJobs: g.memJobs, MemUsedMB: g.memUsed, MemBudgetMB: g.budget(), Model: g.model, MemoryMB: g.vramMB})
		}
		o.Hosts = append(o.Hosts, hv)
	}
	n := min(limit, len(r.sched.waiting))
	for i, q := range r.sched.waiting[:n] {
		o.Waiting = append(o.Waiting, WaitingJob{
			ID: q.job.ID(), Command: q.job.Command, Priority: q.job.Priority,
			Why: r.sched.table.whyWaiting(q.job, i),
		})
	}
	o.MoreWaiting = len(r.sched.waiting) - n
	for _, q := range r.deps.held {
		if len(o.Waiting) == limit {
			o.MoreWaiting++
			continue
		}
		o.Waiting = append(o.Waiting, WaitingJob{ID: q.job.ID(), Command: q.job.Command, Priority: q.job.Priority, Why: heldWhy(q)})
	}
	return o
}
