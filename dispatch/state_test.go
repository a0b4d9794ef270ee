package dispatch

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// Every kind of event puts its job in one state, or none.
func TestJobState(t *testing.T) {
	t.Parallel()
	want := map[EventKind]JobState{
		EventQueued: StateWaiting, EventRetried: StateWaiting, EventStarted: StateRunning,
		EventFinished: "finished", EventFailed: "failed", EventTimeout: "timeout",
		EventLost: "lost", EventCancelled: "cancelled", EventRejected: "rejected",
		EventBusy: "", EventWarning: "", EventReloaded: "", EventHostDown: "", EventHostUp: "",
	}
	for kind, state := range want {
		if got := (Event{Event: kind, Job: "1"}).JobState(); got != state {
			t.Errorf("%s: state %q, want %q", kind, got, state)
		}
		if got := (Event{Event: kind}).JobState(); got != "" {
			t.Errorf("%s without a job: state %q, want none", kind, got)
		}
		if Ended(state) != (state != "" && state != StateWaiting && state != StateRunning) {
			t.Errorf("Ended(%q) = %v", state, Ended(state))
		}
	}
}

// A tally follows each job through its story: a lost job that is retried
// waits again, and only the jobs that ran to their own end are done.
func TestTally(t *testing.T) {
	t.Parallel()
	var tl Tally
	steps := []struct {
		kind                         EventKind
		job                          string
		waiting, running, done, lost int
	}{
		{EventQueued, "1", 1, 0, 0, 0},
		{EventQueued, "2", 2, 0, 0, 0},
		{EventBusy, "2", 2, 0, 0, 0},
		{EventStarted, "1", 1, 1, 0, 0},
		{EventLost, "1", 1, 0, 0, 1},
		{EventRetried, "1", 2, 0, 0, 0},
		{EventStarted, "1", 1, 1, 0, 0},
		{EventRejected, "3", 1, 1, 0, 0},
		{EventFinished, "1", 1, 0, 1, 0},
		{EventCancelled, "2", 0, 0, 1, 0},
	}
	for i, st := range steps {
		tl.Apply(Event{Event: st.kind, Job: st.job})
		got := []int{tl.Count(StateWaiting), tl.Count(StateRunning), tl.Done(), tl.Count(EventLost.State())}
		if want := []int{st.waiting, st.running, st.done, st.lost}; !slices.Equal(got, want) {
			t.Fatalf("after step %d (%s %s): waiting, running, done, lost = %v, want %v", i, st.kind, st.job, got, want)
		}
	}
	if tl.Jobs() != 3 {
		t.Errorf("%d jobs, want 3", tl.Jobs())
	}
}

// The ETA reads the jobs' own times: a long job among quick ones is not
// "3.6s" from its end after a minute of running, and a job near the mean
// run time is near its end.
func TestTallyETA(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 28, 20, 0, 0, 0, time.UTC)
	at := func(s int) *time.Time { tm := t0.Add(time.Duration(s) * time.Second); return &tm }
	tests := []struct {
		name string
		// quick jobs of 3s done; running jobs' start times; waiting jobs.
		quick   int
		running []int
		waiting int
		now     int
		want    time.Duration
	}{
		// 23 quick jobs done, a sleep 120 started at 0 has run 72s: it
		// is past the mean, so as long again is left.
		{name: "a long job among quick ones", quick: 23, running: []int{0}, now: 72, want: 72 * time.Second},
		{name: "near the mean", quick: 4, running: []int{10}, now: 12, want: time.Second},
		// Two running with 1s left each, 4 waiting of 3s over 2 slots.
		{name: "waiting jobs over the running slots", quick: 4, running: []int{10, 10}, waiting: 4, now: 12, want: 7 * time.Second},
		{name: "nothing left", quick: 4, now: 12},
	}
	for _, tt := range tests {
		var tally Tally
		n := 0
		for range tt.quick {
			n++
			id := fmt.Sprint(n)
			tally.Apply(Event{Event: EventStarted, Job: id, Start: at(0)})
			tally.Apply(Event{Event: EventFinished, Job: id, Start: at(0), End: at(3)})
		}
		for _, s := range tt.running {
			n++
			tally.Apply(Event{Event: EventStarted, Job: fmt.Sprint(n), Start: at(s)})
		}
		for range tt.waiting {
			n++
			tally.Apply(Event{Event: EventQueued, Job: fmt.Sprint(n)})
		}
		if _, eta := tally.Pace(t0, *at(tt.now)); eta != tt.want {
			t.Errorf("%s: ETA %v, want %v", tt.name, eta, tt.want)
		}
	}
}
