package dispatch

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
)

// A cancel that cannot reach its job's host (cut off as it is given) is
// recorded with the attempt marked as one that may run on; the job's slot
// stays taken until the host answers and the attempt is stopped there,
// which the journal records. A run that ends before leaves it to the next
// run of the log dir (resumed or not), which stops it first thing; an
// attempt stopped once is not stopped again.
func TestUnreachedCancelIsCarriedOutLater(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0")
		dir := t.TempDir()

		// In the run: the host comes back while the run goes on.
		s := serve(t, inv, dir, false)
		s.submit(t, Batch{Text: "cutoff\nsleep 1ms\n"})
		waitFor(t, func() bool { return s.f.running() == 1 })
		s.c.Cancel(context.Background(), []string{"1"})
		waitFor(t, func() bool { return countKind(readJournal(t, dir), EventCancelled) == 1 })
		if n := len(s.f.startsOn("a")); n != 1 {
			t.Fatalf("%d jobs started while the cancelled attempt may run on a, want 1", n)
		}
		s.f.setDown("a", false)
		waitFor(t, func() bool { return countKind(readJournal(t, dir), EventFinished) == 1 })
		s.stop(t, false)
		s.f.check(t)
		events := readJournal(t, dir)
		var c Event
		for _, e := range events {
			if e.Event == EventCancelled {
				c = e
			}
		}
		if !c.Unstopped || c.Tag == "" || !c.ByUser {
			t.Errorf("cancelled event %+v: want by the user, unstopped, with its tag", c)
		}
		if got := kinds(events, "1"); !slices.Equal(got, []EventKind{EventQueued, EventPending, EventStarted, EventCancelled, EventStopped}) {
			t.Errorf("job 1: %v", got)
		}
		if !slices.Equal(s.f.reaps, []string{c.Tag}) {
			t.Errorf("reaped %v, want %s", s.f.reaps, c.Tag)
		}

		// Across runs: the host is still cut off as the run ends.
		s = serve(t, inv, dir, true)
		ids := s.submit(t, Batch{Text: "cutoff\n"}).IDs
		waitFor(t, func() bool { return s.f.running() == 1 })
		s.c.Cancel(context.Background(), ids)
		sum := s.stop(t, false)
		if sum.Counts[EventCancelled] != 1 {
			t.Errorf("summary %+v", sum)
		}
		events = readJournal(t, dir)
		last := events[len(events)-1]
		if last.Event != EventWarning || !strings.Contains(last.Error, "may still run there") {
			t.Errorf("the run ended without saying what is left on a: %+v", last)
		}
		// The next run stops it, resumed or not.
		s = serve(t, inv, dir, false)
		waitFor(t, func() bool { return countKind(readJournal(t, dir), EventStopped) == 2 })
		s.stop(t, false)
		if len(s.f.reaps) != 1 {
			t.Errorf("the next run reaped %v, want the one attempt left", s.f.reaps)
		}
		s = serve(t, inv, dir, true)
		s.stop(t, false)
		if len(s.f.reaps) != 0 {
			t.Errorf("a stopped attempt was stopped again: %v", s.f.reaps)
		}
	})
}
