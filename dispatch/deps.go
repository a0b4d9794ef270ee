package dispatch

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
)

// A job may wait for others ([after=ID,...]: until each succeeded;
// [after_any=ID,...]: until each ended, whatever its outcome). An ID is a
// job number, a name, or a glob over names, of jobs the run already knows:
// queued, running or ended in it, or (with Resume) succeeded in an earlier
// run, which counts as done. An ID that names no such job rejects the line,
// and so does the job's own (a job can only wait for jobs before it, so
// that no other cycle can form). A waiting dependent is held apart from the
// queue: it takes no slot and blocks no job behind it, and it joins the
// queue, in its place by priority and number, once the last job it waits
// for ended. When a job it needs to succeed ends otherwise, it is cancelled
// with that reason ("dependency train_3 failed"), and so, in turn, are its
// own dependents.

// deps keeps the jobs that wait for others. held are they, apart from the
// queue (a held job is in the queue only once it is let go: never both);
// dependents are they by the id of each job they still wait for; earlier
// are the ids of the jobs that succeeded in an earlier run (Resume), which
// count as done.
type deps struct {
	held       []*queued
	dependents map[string][]*queued
	earlier    map[string]bool
}

// depWait is what a held job still waits for: by id, whether that job must
// succeed.
type depWait struct {
	left map[string]bool
}

// depGlob reports whether an after= ID is a glob over names.
func depGlob(id string) bool { return strings.ContainsAny(id, "*?[") }

// resolveDeps turns j's after= and after_any= IDs into the ids of the jobs
// they name, each with whether it must succeed; an ID that names no known
// job, or names j itself, is an error for j's line.
func (r *run) resolveDeps(j *Job) (map[string]bool, error) {
	need := map[string]bool{}
	add := func(ids []string, key string, success bool) error {
		for _, id := range ids {
			var found []string
			if depGlob(id) {
				for _, known := range r.knownIDs() {
					if ok, _ := path.Match(id, known); ok && known != j.ID() {
						found = append(found, known)
					}
				}
				if len(found) == 0 {
					return fmt.Errorf("%s=%s: no job queued so far has a name that matches", key, id)
				}
			} else {
				id = r.byNumber(id)
				switch {
				case id == j.ID():
					return fmt.Errorf("%s=%s: a job cannot wait for itself", key, id)
				case r.serving.jobs[id] == nil && !r.deps.earlier[id]:
					return fmt.Errorf("%s=%s: no job %s before this one (a job waits for jobs queued before it)", key, id, id)
				}
				found = []string{id}
			}
			for _, f := range found {
				need[f] = need[f] || success
			}
		}
		return nil
	}
	if err := add(j.After, "after", true); err != nil {
		return nil, err
	}
	if err := add(j.AfterAny, "after_any", false); err != nil {
		return nil, err
	}
	return need, nil
}

// byNumber is the id of the job of the run numbered id, when id is a
// number and that job has a name: a number names the job with that
// number, named or not. Else id as it is.
func (r *run) byNumber(id string) string {
	n, err := strconv.Atoi(id)
	if err != nil || r.serving.jobs[id] != nil || r.deps.earlier[id] {
		return id
	}
	for known, q := range r.serving.jobs {
		if q.job.Seq == n {
			return known
		}
	}
	return id
}

// knownIDs are the ids of the jobs the run knows, in no order.
func (r *run) knownIDs() []string {
	ids := make([]string, 0, len(r.serving.jobs)+len(r.deps.earlier))
	for id := range r.serving.jobs {
		ids = append(ids, id)
	}
	for id := range r.deps.earlier {
		ids = append(ids, id)
	}
	return ids
}

// enqueue queues q, recording message, or holds it apart while jobs it
// waits for have not ended; a job it needs has ended without success
// cancels it. It reports an error, queuing nothing, when q's dependencies
// name no known job.
func (r *run) enqueue(q *queued, message string) error {
	j := q.job
	if len(j.After) == 0 && len(j.AfterAny) == 0 {
		r.queue(q, message)
		return nil
	}
	need, err := r.resolveDeps(j)
	if err != nil {
		return err
	}
	w := &depWait{left: map[string]bool{}}
	var failed *Event
	for id, success := range need {
		dep := r.serving.jobs[id]
		switch {
		case dep == nil || dep.ended != nil && dep.ended.Event == EventFinished:
			// Succeeded, here or in an earlier run.
		case dep.ended != nil:
			if success {
				failed = dep.ended
			}
		default:
			w.left[id] = success
			r.deps.dependents[id] = append(r.deps.dependents[id], q)
		}
	}
	e := r.event(EventQueued, j, q.attempts)
	e.Message = message
	e.After = waitingFor(w)
	if r.opts.Serve {
		e.Spec = r.specOf(j)
	}
	r.record(e)
	switch {
	case failed != nil:
		r.depFailed(q, failed)
	case len(w.left) == 0:
		r.sched.add(q)
	default:
		q.deps = w
		r.deps.held = append(r.deps.held, q)
	}
	return nil
}

// waitingFor lists the ids w still waits for, sorted.
func waitingFor(w *depWait) []string {
	ids := make([]string, 0, len(w.left))
	for id := range w.left {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// depsEnded tells the jobs held for e's job that it ended: each that no
// longer waits joins the queue, and each that needed it to succeed when it
// did not is cancelled.
func (r *run) depsEnded(e Event) {
	waiting := r.deps.dependents[e.Job]
	delete(r.deps.dependents, e.Job)
	for _, q := range waiting {
		w := q.deps
		if w == nil || q.ended != nil {
			continue // cancelled meanwhile
		}
		success, ok := w.left[e.Job]
		if !ok {
			continue
		}
		delete(w.left, e.Job)
		switch {
		case success && e.Event != EventFinished:
			r.deps.unhold(q)
			r.depFailed(q, &e)
		case len(w.left) == 0:
			r.deps.unhold(q)
			joined := r.event(EventQueued, q.job, q.attempts)
			joined.Message = "the jobs it waited for ended"
			r.record(joined)
			r.sched.add(q)
		}
	}
}

// unhold takes q out of the held jobs.
func (d *deps) unhold(q *queued) {
	q.deps = nil
	if i := slices.Index(d.held, q); i >= 0 {
		d.held = slices.Delete(d.held, i, i+1)
	}
}

// depFailed cancels q, which needed the job of dep to succeed.
func (r *run) depFailed(q *queued, dep *Event) {
	e := r.event(EventCancelled, q.job, q.attempts)
	e.Error = fmt.Sprintf("%s%s %s", depReason, dep.Job, depOutcome(dep.Event))
	r.final(e)
}

// depReason begins the error of a job cancelled for a dependency.
const depReason = "dependency "

// depCancelled reports whether e cancelled a job for a dependency.
func depCancelled(e Event) bool {
	return e.Event == EventCancelled && strings.HasPrefix(e.Error, depReason)
}

// depOutcome says how a job that did not succeed ended.
func depOutcome(kind EventKind) string {
	switch kind {
	case EventTimeout:
		return "timed out"
	case EventCancelled:
		return "was cancelled"
	case EventRejected:
		return "was rejected"
	case EventLost:
		return "was lost"
	}
	return "failed"
}

// heldWhy says why a held job waits.
func heldWhy(q *queued) string {
	return "after " + strings.Join(waitingFor(q.deps), ", ")
}

// dropHeld takes every held job out, for a run that stops.
func (d *deps) dropHeld() []*queued {
	held := d.held
	for _, q := range held {
		q.deps = nil
	}
	d.held = nil
	clear(d.dependents)
	return held
}
