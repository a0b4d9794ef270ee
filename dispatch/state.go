package dispatch

import (
	"fmt"
	"slices"
	"time"
)

// JobState is where a job's story is: StateWaiting, StateRunning, or the
// outcome that ended it (an outcome's kind of event, as State gives it).
type JobState string

// The states of a job whose story has not ended.
const (
	StateWaiting JobState = "waiting" // queued, queued again after a lost host, or pending in a Slurm cluster
	StateRunning JobState = "running"
)

// Outcomes are the kinds of event that end a job's story, in the order in
// which summaries list them. A lost job's story goes on when it is retried.
var Outcomes = []EventKind{EventFinished, EventFailed, EventTimeout, EventLost, EventCancelled, EventRejected}

// State is the state of a job whose story an event of kind k ended.
func (k EventKind) State() JobState { return JobState(k) }

// JobState is the state e puts its job in: StateWaiting, StateRunning or an
// outcome; "" for an event that does not move a job (host events, a busy
// GPU, warnings). This is the one place that says how the event stream
// becomes job states: the summary, status, the live view and the web page
// all read it.
func (e Event) JobState() JobState {
	switch {
	case e.Job == "":
		return ""
	case e.Event == EventQueued || e.Event == EventRetried || e.Event == EventPending && !e.SettingUp:
		return StateWaiting
	case e.Event == EventStarted || e.Event == EventPending:
		// A job whose shell is being set up holds its slot.
		return StateRunning
	case slices.Contains(Outcomes, e.Event):
		return e.Event.State()
	}
	return ""
}

// Ended reports whether state is an outcome: the job's story has ended,
// well or not.
func Ended(state JobState) bool { return state != StateWaiting && state != StateRunning && state != "" }

// Retryable reports whether a job in state may be queued again on request
// (retry): it ended without success, and was not rejected.
func Retryable(state JobState) bool {
	return Ended(state) && state != EventFinished.State() && state != EventRejected.State()
}

// StateWord is how people are told a state: "succeeded", "timed out",
// else the state itself.
func StateWord(state JobState) string {
	switch state {
	case EventFinished.State():
		return "succeeded"
	case EventTimeout.State():
		return "timed out"
	}
	return string(state)
}

// outcomeOrder is where state comes in Outcomes (after all of them when it
// is not one).
func outcomeOrder(state JobState) int {
	if i := slices.Index(Outcomes, EventKind(state)); i >= 0 {
		return i
	}
	return len(Outcomes)
}

// Tally counts a run's jobs by state as their events arrive. Its zero value
// is ready.
type Tally struct {
	state  map[string]JobState // by job id
	counts map[JobState]int
	// started is when each running job began (its Start, else its
	// event's time); took and tookN sum the run times of the jobs done,
	// for the ETA.
	started map[string]time.Time
	took    time.Duration
	tookN   int
}

// Apply moves e's job to the state e puts it in.
func (t *Tally) Apply(e Event) {
	s := e.JobState()
	if s == "" {
		return
	}
	if t.state == nil {
		t.state, t.counts, t.started = map[string]JobState{}, map[JobState]int{}, map[string]time.Time{}
	}
	if old, ok := t.state[e.Job]; ok {
		t.counts[old]--
	}
	t.state[e.Job] = s
	t.counts[s]++
	switch {
	case s == StateRunning && e.Start != nil:
		t.started[e.Job] = *e.Start
	case s == StateRunning:
		if _, ok := t.started[e.Job]; !ok {
			t.started[e.Job] = e.Time
		}
	default:
		delete(t.started, e.Job)
	}
	if (s == EventFinished.State() || s == EventFailed.State() || s == EventTimeout.State()) && e.Start != nil && e.End != nil && e.End.After(*e.Start) {
		t.took += e.End.Sub(*e.Start)
		t.tookN++
	}
}

// Count is how many jobs are in state.
func (t *Tally) Count(state JobState) int { return t.counts[state] }

// Jobs is how many jobs the events named.
func (t *Tally) Jobs() int { return len(t.state) }

// Done is how many jobs ran to their own end: succeeded, failed or timed
// out. A job cancelled, rejected or given up as lost is not done: it ran
// to no end of its own.
func (t *Tally) Done() int {
	return t.counts[EventFinished.State()] + t.counts[EventFailed.State()] + t.counts[EventTimeout.State()]
}

// Left is how many jobs are still to run or running.
func (t *Tally) Left() int { return t.counts[StateWaiting] + t.counts[StateRunning] }

// Pace is how fast the jobs get done: per second since first (when the
// run's first job started) until now, and how long the jobs left need. Both
// are 0 until a job is done; eta is 0 when none is left. Cancelled jobs,
// which end all at once, count for neither.
//
// The ETA is not the jobs left over the rate, which a long job among quick
// ones makes a lie ("ETA 3.6s" for a two-minute job that has run one): with
// D the mean run time of the jobs done, a running job that has run e has
// D−e left, or, past D, as long again as it has run; the jobs waiting take
// D each, over as many slots as jobs now run. The ETA is the longer of that
// and the longest running job's time left.
func (t *Tally) Pace(first, now time.Time) (perSecond float64, eta time.Duration) {
	done, elapsed := t.Done(), now.Sub(first)
	if first.IsZero() || done == 0 || elapsed <= 0 {
		return 0, 0
	}
	perSecond = float64(done) / elapsed.Seconds()
	if t.Left() == 0 {
		return perSecond, 0
	}
	mean := elapsed / time.Duration(done) // no run times known: the rate's
	if t.tookN > 0 {
		mean = t.took / time.Duration(t.tookN)
	}
	var work, longest time.Duration
	for _, start := range t.started {
		ran := max(now.Sub(start), 0)
		left := mean - ran
		if ran >= mean {
			left = ran
		}
		work += left
		longest = max(longest, left)
	}
	work += time.Duration(t.counts[StateWaiting]) * mean
	slots := max(len(t.started), 1)
	return perSecond, max(longest, work/time.Duration(slots))
}

// RateString says a pace in words: "2.5 jobs/s", or per minute below one a
// second.
func RateString(perSecond float64) string {
	if perSecond >= 1 {
		return fmt.Sprintf("%.1f jobs/s", perSecond)
	}
	return fmt.Sprintf("%.1f jobs/min", perSecond*60)
}
