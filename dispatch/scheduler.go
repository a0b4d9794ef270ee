package dispatch

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// scheduler places waiting jobs on free slots, first come first served,
// with the no-starvation rule of doc.go. It is not safe for concurrent use:
// the run loop owns it.
type scheduler struct {
	table *slotTable
	// waiting is in queue order (ahead): higher priority first, then
	// arrival order (Seq); re-queued jobs go back to their place.
	waiting []*queued
}

// queued is a job of the run, with the attempts it has used, from when it
// is queued to the end of its story (and after: it may be retried).
type queued struct {
	job      *Job
	attempts int
	// failures counts its attempts that failed or timed out, in this run
	// and (with Resume) the earlier ones: they use up its retries=.
	failures int
	// claiming is set while the claim on its GPUs is settled, kill while
	// it runs; cancelAsked says that it was cancelled while claiming.
	claiming    bool
	kill        context.CancelCauseFunc
	cancelAsked bool
	// ended is the event that ended its story, until it is retried.
	ended *Event
	// launched is the event that started its attempt. On a Slurm cluster
	// the attempt is pending until Slurm runs it: pending is set until
	// then, and ran says since when it runs.
	launched Event
	pending  bool
	ran      *time.Time
	slurmID  string
	// endedAt is when its attempt ended where it ran, when its host told
	// it late (after a cut connection).
	endedAt time.Time
	// tag names its current attempt on its host (executor.Command.Tag).
	tag string
	// unfit is why no host the run knows fits the job, which was queued
	// nonetheless because hosts still being opened may: it is rejected
	// with it once every host is opened, unless one fits it.
	unfit error
	// requeueErr is why a job an earlier server left cannot be queued
	// again: its snapshot of the code is gone.
	requeueErr error
	// deps is what it waits for while it is held apart from the queue
	// (deps.go).
	deps *depWait
	// partsSince is when a job over several hosts was first said to
	// wait for a host's GPUs (need): turns between such jobs of all runs
	// go by it, on each of its hosts alike.
	partsSince time.Time
}

// needOn is what the first job of the queue that could run on h needs
// there (h is one of its hosts, with GPUs enough, one of which it may run
// on): how many of h's GPUs together, and whether it is a part of a job
// over several hosts; 0 GPUs when none could. A job over more hosts than
// are up for it now could not: its part would hold h's GPUs for hosts
// that are not there.
func (s *scheduler) needOn(h *hostSlots) executor.Need {
	for _, q := range s.waiting {
		if q.job.Host != "" && q.job.Host != h.host.Name || !h.fits(q.job) {
			continue
		}
		if q.job.Nodes > 1 && s.table.partHosts(q.job) < q.job.Nodes {
			continue
		}
		for _, g := range h.gpus {
			if g.mayRun(q.job) {
				return q.need(h)
			}
		}
	}
	return executor.Need{}
}

// need is what q's job needs of h's GPUs together; for a part of a job
// over several hosts, since when it waits (from the first time this is
// asked).
func (q *queued) need(h *hostSlots) executor.Need {
	n := executor.Need{GPUs: h.need(q.job)}
	if q.job.Nodes > 1 {
		if q.partsSince.IsZero() {
			q.partsSince = time.Now()
		}
		n.Part, n.Since = true, q.partsSince
	}
	return n
}

// ahead reports whether a comes before b in the queue: the higher
// priority, then the one that arrived first.
func ahead(a, b *Job) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	return a.Seq < b.Seq
}

// add queues q in queue order: a re-queued job goes back to its place in
// line. Jobs mostly arrive at the back, so the search starts there.
func (s *scheduler) add(q *queued) {
	i := len(s.waiting)
	for i > 0 && ahead(q.job, s.waiting[i-1].job) {
		i--
	}
	s.waiting = append(s.waiting, nil)
	copy(s.waiting[i+1:], s.waiting[i:])
	s.waiting[i] = q
	s.table.memWaits(q.job.MemMB, 1)
}

// assignment is a job and the slots it was given (already taken).
type assignment struct {
	q *queued
	p placement
}

// shape is what a job's place depends on. A pass only takes and holds
// slots, so a job whose shape found no place finds none later in the same
// pass: the jobs behind it of that shape are not placed again (a queue of
// H100 jobs before the one A100 job that a freed A100 slot is for costs
// one look at the lab, not one per job).
type shape struct {
	host, conda, models, tags   string
	gpu, gpus, nodes, mem, vram int
}

func shapeOf(j *Job) shape {
	return shape{j.Host, j.Conda, strings.Join(j.Models, "|"), strings.Join(j.Tags, ","), j.GPU, j.GPUs, j.Nodes, j.MemMB, j.VRAMMB}
}

// next makes one pass over the waiting jobs and returns those that can start
// now; their slots are taken. The first job that cannot start is the oldest
// waiting one: the free slots it needs are held for it, so later jobs may
// only use the others.
func (s *scheduler) next() []assignment {
	var out []assignment
	hd := held{}
	holding := false
	var failed map[shape]bool // made at the first job that finds no place
	kept, i := 0, 0           // s.waiting[:kept] are the jobs looked at that stay
	for ; i < len(s.waiting); i++ {
		if s.table.freeSlots-hd.total() <= 0 {
			break
		}
		q := s.waiting[i]
		var sh shape
		if failed != nil {
			sh = shapeOf(q.job)
		}
		if failed[sh] {
			s.waiting[kept] = q
			kept++
			continue
		}
		if p, ok := s.table.place(q.job, hd); ok {
			s.table.take(p)
			s.table.memWaits(q.job.MemMB, -1)
			out = append(out, assignment{q: q, p: p})
			continue
		}
		if failed == nil {
			failed, sh = map[shape]bool{}, shapeOf(q.job)
		}
		failed[sh] = true
		if !holding {
			s.table.hold(q.job, hd)
			holding = true
		}
		s.waiting[kept] = q
		kept++
	}
	// The jobs that started leave gaps among those looked at. Close them
	// by moving the few kept ones right, next to the jobs the pass did not
	// reach, rather than those (the whole queue) left: a pass costs what it
	// looked at, not the length of the queue.
	copy(s.waiting[i-kept:i], s.waiting[:kept])
	clear(s.waiting[:i-kept])
	s.waiting = s.waiting[i-kept:]
	return out
}

// dropIf removes and returns the waiting jobs for which f is true.
func (s *scheduler) dropIf(f func(*queued) bool) []*queued {
	var out []*queued
	kept := s.waiting[:0]
	for _, q := range s.waiting {
		if f(q) {
			out = append(out, q)
			s.table.memWaits(q.job.MemMB, -1)
		} else {
			kept = append(kept, q)
		}
	}
	clear(s.waiting[len(kept):])
	s.waiting = kept
	return out
}

// remove takes q out of the queue; it reports false when q was not in it.
func (s *scheduler) remove(q *queued) bool {
	i := slices.Index(s.waiting, q)
	if i < 0 {
		return false
	}
	s.waiting = slices.Delete(s.waiting, i, i+1)
	s.table.memWaits(q.job.MemMB, -1)
	return true
}

// drop removes and returns every waiting job.
func (s *scheduler) drop() []*queued {
	w := s.waiting
	s.waiting = nil
	for _, q := range w {
		s.table.memWaits(q.job.MemMB, -1)
	}
	return w
}
