package dispatch

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// An edit of the inventory mid-run: an added host gets jobs; a dropped host
// finishes its running job and gets no new one, and a job pinned to it
// fails saying why; an edit that does not load is reported and changes
// nothing.
func TestReload(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0")
		f := newFakeExec(inv)
		updates := make(chan Update)
		dir := t.TempDir()
		w, done := startRun(t, Options{Inventory: inv, Executor: f, LogDir: dir, Updates: updates})
		io.WriteString(w, "sleep 1s\nsleep 1ms\n")
		// Job 1 runs (the fake has seen it start) before the edit.
		waitFor(t, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.starts) == 1 })

		bigger := lab("a:0 b:0,1")
		f.learn(bigger)
		updates <- Update{Inventory: bigger}
		// Job 2 was waiting for a; b takes it at once.
		waitFor(t, func() bool { return countKind(readJournal(t, dir), EventFinished) == 1 })

		// Job 3, pinned to a, waits for job 1 there.
		io.WriteString(w, "@a sleep 1ms\n")
		waitFor(t, func() bool { return len(kinds(readJournal(t, dir), "3")) == 1 })
		updates <- Update{Err: errors.New("lab.yaml:3: hosts[1].gpus: want a list")}
		smaller := lab("b:0,1")
		updates <- Update{Inventory: smaller}
		io.WriteString(w, "@a sleep 1ms\n"+repeat("sleep 1ms", 4))
		w.Close()
		s := <-done
		f.check(t)
		if s.Counts[EventFinished] != 6 || s.Counts[EventFailed] != 1 || s.Counts[EventRejected] != 1 {
			t.Errorf("summary %+v", s.Counts)
		}
		var reloadedAt time.Time
		for _, e := range readJournal(t, dir) {
			switch {
			case e.Event == EventReloaded && strings.Contains(e.Message, "removed host a"):
				reloadedAt = e.Time
			case e.Event == EventReloaded && !strings.Contains(e.Message, "added host b (GPUs 0,1)"):
				t.Errorf("reload event %+v", e)
			case e.Event == EventWarning && !strings.Contains(e.Error, "inventory edit ignored, the run goes on as it was: lab.yaml:3"):
				t.Errorf("warning %+v", e)
			case e.Event == EventStarted && e.Host == "a" && !reloadedAt.IsZero():
				t.Errorf("a job started on a after it was removed: %+v", e)
			case e.Event == EventFinished && e.Job == "1" && e.Host != "a":
				t.Errorf("job 1 %+v, want it to finish on a", e)
			case e.Event == EventFailed && (e.Job != "3" || e.Error != "the inventory changed: host a was removed from the inventory"):
				t.Errorf("failed %+v", e)
			case e.Event == EventRejected && (e.Job != "4" || e.Error != "host a was removed from the inventory"):
				t.Errorf("rejected %+v", e)
			}
		}
		if reloadedAt.IsZero() {
			t.Error("no event says host a was removed")
		}
		if n := countKind(readJournal(t, dir), EventWarning); n != 1 {
			t.Errorf("%d warnings, want 1 for the broken edit", n)
		}
	})
}

// An edit that adds GPUs to a host gives them jobs; one that takes a GPU
// away lets its job finish, and a job pinned to it later is rejected.
func TestReloadGPUs(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0")
		f := newFakeExec(inv)
		updates := make(chan Update)
		dir := t.TempDir()
		w, done := startRun(t, Options{Inventory: inv, Executor: f, LogDir: dir, Updates: updates})
		io.WriteString(w, "@a:0 sleep 200ms\n")
		// Job 1 runs (the fake has seen it start) before the edit.
		waitFor(t, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.starts) == 1 })
		more := lab("a:1,2")
		f.learn(more)
		updates <- Update{Inventory: more}
		io.WriteString(w, "@a:0 sleep 1ms\n"+repeat("sleep 50ms", 2))
		w.Close()
		s := <-done
		f.check(t)
		if s.Counts[EventFinished] != 3 || s.Counts[EventRejected] != 1 {
			t.Errorf("summary %+v", s.Counts)
		}
		if f.peak["a:1"] != 1 || f.peak["a:2"] != 1 {
			t.Errorf("the added GPUs were not used: %v", f.peak)
		}
		for _, e := range s.Unsuccessful {
			if !strings.Contains(e.Error, "host a has no GPU 0 (its GPUs: 1,2)") {
				t.Errorf("%+v", e)
			}
		}
	})
}

// An edit of the inventory while a lost job is being reaped and another is
// being claimed: the goroutines that do that do not read the slot table
// the loop rewrites (go test -race fails here otherwise).
func TestReloadWhileReapingAndClaiming(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0 b:0")
		f := newFakeExec(inv)
		f.reapGate = make(chan struct{})
		updates := make(chan Update)
		dir := t.TempDir()
		w, done := startRun(t, Options{Inventory: inv, Executor: f, LogDir: dir, Updates: updates, Retries: 1})
		io.WriteString(w, "@a lose 1\n")
		waitFor(t, func() bool { return countKind(readJournal(t, dir), EventRetried) == 1 })
		io.WriteString(w, "@b sleep 1ms\n")
		same := lab("a:0 b:0")
		updates <- Update{Inventory: same}
		close(f.reapGate)
		w.Close()
		if s := <-done; s.Counts[EventFinished] != 2 {
			t.Errorf("summary %+v", s.Counts)
		}
		f.check(t)
	})
}
