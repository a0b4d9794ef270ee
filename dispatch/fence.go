package dispatch

import (
	"fmt"
	"time"
)

// An attempt whose host could not be reached as it was given up (lost:
// the host fell silent for too long) or cancelled (the cancel could not
// be carried there) may run on there. Its final event says so
// (Unstopped), and it is fenced: once its host answers, the Executor's
// Reap stops it if it still runs, and the run records EventStopped. Until
// then its slots stay taken. A run that ends first leaves the fence in the
// journal, and the next run of the log dir (any: a fresh one, --resume,
// serve) puts it up again: an attempt ended in the journal is never re-adopted,
// and is stopped by the first coordinator that reaches its host.

// fenceWait bounds how long a run that has nothing else to do waits, as it
// ends, for the fences of hosts that answer to be carried out.
const fenceWait = 30 * time.Second

// fenceSettle is how long a run that ends waits for the hosts of its fences
// that are marked down to answer, before it stops waiting for them.
const fenceSettle = time.Second

// fence is an attempt to stop where it ran once its host answers.
type fence struct {
	// ended is its final event (lost or cancelled, with Host and Tag).
	ended Event
	// p is the slots it holds in this run until then; held is false for an
	// attempt of an earlier run, which holds none.
	p    placement
	held bool
}

// fencing keeps the attempts to stop where they ran once their hosts
// answer. fenced are those put up, by tag, until the host's Reap answers
// on reaped (each is put up once, and holds its slots, if it held, until
// then); unstopped are those earlier runs of the log dir left, put up as
// the run starts.
type fencing struct {
	reaped    chan fence
	fenced    map[string]fence
	unstopped fences
}

// fences tracks, while a journal is read, the attempts still to be stopped.
type fences map[string]Event

// see notes what e says of the attempts to stop.
func (f fences) see(e Event) {
	switch {
	case e.Tag == "":
	case e.Unstopped:
		f[e.Tag] = e
	case e.Event == EventStopped:
		delete(f, e.Tag)
	}
}

// putUp fences the attempt that e ended: it is reaped on a goroutine of
// its own, and the loop hears of it on r.fencing.reaped.
func (r *run) putUp(f fence) {
	r.fencing.fenced[f.ended.Tag] = f
	go func() {
		if r.opts.Executor.Reap(r.bg, f.ended.Host, f.ended.Tag) != nil {
			return
		}
		select {
		case r.fencing.reaped <- f:
		case <-r.bg.Done():
		}
	}()
}

// putUpEarlier fences the attempts an earlier run left to stop,
// those whose host is in this run; the others are named.
func (r *run) putUpEarlier() {
	for _, e := range r.fencing.unstopped {
		if h := r.sched.table.byName[e.Host]; h == nil || h.removed {
			r.record(r.warning(e.Host, "", fmt.Sprintf("attempt %d of job %s (run %s) may still run there, and the host is not in this run's inventory to stop it", e.Attempt, e.Job, e.Run)))
			continue
		}
		r.putUp(fence{ended: e})
	}
}

// onReaped records that f's attempt is onReaped, and frees its slots.
func (r *run) onReaped(f fence) {
	delete(r.fencing.fenced, f.ended.Tag)
	if f.held {
		r.release(f.p)
	}
	e := f.ended
	r.record(Event{Time: time.Now(), Event: EventStopped, Run: r.id, Job: e.Job, Seq: e.Seq,
		Text: e.Text, TextBytes: e.TextBytes, Occurrence: e.Occurrence, Host: e.Host, GPUs: e.GPUs,
		Attempt: e.Attempt, Tag: e.Tag, Message: "attempt of run " + e.Run + " stopped where it ran, or found ended there"})
}

// awaitFences waits, as the run ends, for the fences of hosts that answer
// (at most fenceWait); those left are said to be left for the next run. A
// host that a job's end has just marked down is given fenceSettle to say
// it answers.
func (r *run) awaitFences() {
	deadline := time.NewTimer(fenceWait)
	defer deadline.Stop()
	settle := time.NewTimer(fenceSettle)
	defer settle.Stop()
	settled := false
	for len(r.fencing.fenced) > 0 && (!settled || r.fencesUp()) {
		select {
		case f := <-r.fencing.reaped:
			r.onReaped(f)
		case h := <-r.health.ups:
			r.onHostUp(h)
		case <-settle.C:
			settled = true
		case <-deadline.C:
			r.leaveFences()
			return
		}
	}
	r.leaveFences()
}

// fencesUp reports whether a fence waits on a host that answers.
func (r *run) fencesUp() bool {
	for _, f := range r.fencing.fenced {
		if h := r.sched.table.byName[f.ended.Host]; h != nil && !h.down {
			return true
		}
	}
	return false
}

// leaveFences warns of each attempt left running where it may run.
func (r *run) leaveFences() {
	for _, f := range r.fencing.fenced {
		e := f.ended
		r.record(r.warning(e.Host, "", fmt.Sprintf("attempt %d of job %s may still run there: gpudispatch could not reach the host to stop it; the next run on this log dir (--resume or not) stops it once the host answers", e.Attempt, e.Job)))
	}
}
