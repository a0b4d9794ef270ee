package dispatch

import (
	"fmt"
	"time"
)

// A host goes down when it cannot be reached: its slots take no job until
// the Executor says it is back (WaitUp), and jobs that only down hosts can
// run fail once it has been down for Options.HostDownTimeout. The slot
// table keeps each host's state (down, why, episode, expired); health
// brings the news of it.

// health brings what goroutines learn of hosts that went down: that one
// answers again (ups), or that its host-down timeout passed (expired, for
// the time it went down then: a host that came back and went down again
// meanwhile starts a new episode, and the old timeout does nothing).
type health struct {
	ups     chan *hostSlots
	expired chan expiry
}

// expiry is a host's host-down timeout passing, for one time it went down.
type expiry struct {
	h       *hostSlots
	episode int
}

// cutOff takes host out of use at once when the connection of a job (or
// part of one) there was cut at when: the host is down, and says how many
// jobs are presumed running there, until it answers again.
func (r *run) cutOff(host string, when time.Time, why string) {
	h := r.sched.table.byName[host]
	if h == nil || h.down {
		return
	}
	running := 0
	for _, o := range r.serving.jobs {
		if o.kill != nil && o.launched.ranOn(h.host.Name) {
			running++ // a job over several GPUs counts once
		}
	}
	r.hostDown(h, fmt.Errorf("unreachable since %s (%s), %s presumed running there", when.Format("15:04:05"), why, Count(running, "job")))
}

// hostDown takes h's slots out of use until the Executor says it is back,
// and starts its host-down timeout.
func (r *run) hostDown(h *hostSlots, why error) {
	if !r.sched.table.setDown(h, why.Error(), time.Now()) {
		return
	}
	r.record(r.hostEvent(EventHostDown, h))
	name, episode := h.host.Name, h.episode
	go func() {
		if r.opts.Executor.WaitUp(r.bg, name) != nil {
			return
		}
		select {
		case r.health.ups <- h:
		case <-r.bg.Done():
		}
	}()
	time.AfterFunc(r.opts.HostDownTimeout, func() {
		select {
		case r.health.expired <- expiry{h, episode}:
		case <-r.bg.Done():
		}
	})
}

func (r *run) onHostUp(h *hostSlots) {
	r.mem.look = true
	if h.watched {
		h.lookAgain()
	}
	r.sched.table.setUp(h)
	r.record(r.hostEvent(EventHostUp, h))
}

// onHostExpired fails the waiting jobs that no host still waited for can run.
func (r *run) onHostExpired(x expiry) {
	if !x.h.down || x.h.episode != x.episode {
		return // it came back meanwhile
	}
	x.h.expired = true
	r.failWaiting(func(j *Job) string { return r.sched.table.unrunnable(j, r.opts.HostDownTimeout) })
}

// failWaiting fails, with the reason why gives, the waiting jobs for which
// it gives one.
func (r *run) failWaiting(why func(*Job) string) {
	reasons := map[*queued]string{}
	dropped := r.sched.dropIf(func(q *queued) bool {
		reasons[q] = why(q.job)
		return reasons[q] != ""
	})
	for _, q := range dropped {
		e := r.event(EventFailed, q.job, q.attempts)
		e.Error = reasons[q]
		r.final(e)
	}
}
