package dispatch

import (
	"slices"
	"testing"
)

// Every kind of event puts its job in one state, or none.
func TestJobState(t *testing.T) {
	t.Parallel()
	want := map[string]string{
		EventQueued: StateWaiting, EventRetried: StateWaiting, EventStarted: StateRunning,
		EventFinished: EventFinished, EventFailed: EventFailed, EventTimeout: EventTimeout,
		EventLost: EventLost, EventCancelled: EventCancelled, EventRejected: EventRejected,
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
		kind, job                    string
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
		got := []int{tl.Count(StateWaiting), tl.Count(StateRunning), tl.Done(), tl.Count(EventLost)}
		if want := []int{st.waiting, st.running, st.done, st.lost}; !slices.Equal(got, want) {
			t.Fatalf("after step %d (%s %s): waiting, running, done, lost = %v, want %v", i, st.kind, st.job, got, want)
		}
	}
	if tl.Jobs() != 3 {
		t.Errorf("%d jobs, want 3", tl.Jobs())
	}
}
