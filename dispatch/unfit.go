package dispatch

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// A host whose job shell cannot set up a job's environment (its workdir is
// missing, its conda env or module is not there, its setup fails) says so
// once, when the shell starts, and runs nothing: the job did not start.
// The host is then unfit for every job with that environment (the same
// Prelude): none goes there until Options.Recheck has passed, when the
// next one tries again. Its other jobs go to the hosts that can set it up;
// a job that no host it may run on can set up fails at once, with each
// host's reason.

// unfitMark is why a host cannot set up a Prelude, and since when.
type unfitMark struct {
	why string
	at  time.Time
}

// unfitFor says why h cannot set up j's environment now, or "".
func (h *hostSlots) unfitFor(j *Job) string {
	if len(h.unfit) == 0 {
		return ""
	}
	return h.unfit[h.keyFor(j)].why
}

// keyFor is the Prelude key of j on h: the host's own, found once per
// inventory, unless j names another conda env.
func (h *hostSlots) keyFor(j *Job) string {
	if j.Conda == "" || j.Conda == h.host.Conda {
		return h.preludeKey
	}
	return prelude(h.host, j).Key()
}

// usable reports whether h may be given j now (its slots aside).
func (h *hostSlots) usable(j *Job) bool { return !h.down && h.unfitFor(j) == "" && h.tagged(j) }

// unfitExpiry is the time for a host to try a Prelude again.
type unfitExpiry struct {
	h   *hostSlots
	key string
	at  time.Time
}

// setUnfit takes the answer of q's attempt on h, whose shell could not set
// up its environment: nothing ran. It says so (once per reason), marks h
// unfit for that environment until Recheck, and fails the waiting jobs,
// q included, that no host can set up; q waits again otherwise.
func (r *run) setUnfit(h *hostSlots, q *queued, err error) {
	why := err.Error()
	var u *executor.UnfitError
	if errors.As(err, &u) {
		why = u.Why
	}
	key := h.keyFor(q.job)
	if h.unfit == nil {
		h.unfit = map[string]unfitMark{}
	}
	if h.unfit[key].why != why {
		what := "cannot set up its jobs, which go to other hosts: "
		if q.job.Conda != "" && q.job.Conda != h.host.Conda {
			what = fmt.Sprintf("cannot set up jobs with conda=%s, which go to other hosts: ", q.job.Conda)
		}
		e := r.warning(h.host.Name, q.job.ID(), what+why)
		r.record(e)
	}
	now := time.Now()
	h.unfit[key] = unfitMark{why: why, at: now}
	go func() {
		t := time.NewTimer(r.opts.Recheck)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.bg.Done():
			return
		}
		select {
		case r.locking.unfitOver <- unfitExpiry{h, key, now}:
		case <-r.bg.Done():
		}
	}()
	r.notStarted(q)
	r.sched.add(q)
	r.failWaiting(r.sched.table.noneCanSetUp)
}

// onUnfitOver lets h try the Prelude of x again.
func (r *run) onUnfitOver(x unfitExpiry) {
	if m, ok := x.h.unfit[x.key]; ok && m.at.Equal(x.at) {
		delete(x.h.unfit, x.key)
	}
}

// noneCanSetUp says why no host j may run on can set up its environment
// now, each host's reason, or "" when one may (or is down, and may once
// back).
func (t *slotTable) noneCanSetUp(j *Job) string {
	var why []string
	for _, h := range t.candidates(j) {
		if h.removed || !h.fits(j) {
			continue
		}
		w := h.unfitFor(j)
		if w == "" {
			return ""
		}
		why = append(why, h.host.Name+": "+w)
	}
	if len(why) == 0 {
		return ""
	}
	return "no host can set up its environment (" + strings.Join(why, "; ") + ")"
}
