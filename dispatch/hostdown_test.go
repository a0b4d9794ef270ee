package dispatch

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// startsOn lists the commands started on host, in order.
func (f *fakeExec) startsOn(host string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, s := range f.starts {
		if s.host == host {
			out = append(out, s.command)
		}
	}
	return out
}

// A host that dies mid-run gets no more jobs: its lost job and the jobs that
// follow run on the other host; jobs pinned to it fail once it has been down
// for the host-down timeout, naming the host and the reason.
func TestHostDownTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		inv := lab("a:0 b:0")
		f, s := runJobs(t, inv, "@b die\n"+repeat("sleep 2ms", 20)+"@b sleep 1ms\n", func(o *Options) {
			o.LogDir = dir
			o.HostDownTimeout = 50 * time.Millisecond
		})
		if got := f.startsOn("b"); !slices.Equal(got, []string{"die"}) {
			t.Errorf("started on b: %v, want only the job that took it down", got)
		}
		if s.Counts[EventFinished] != 20 || s.Counts[EventFailed] != 2 || s.Succeeded() {
			t.Fatalf("summary %+v", s)
		}
		for _, e := range s.Unsuccessful {
			if !strings.Contains(e.Error, "--host-down-timeout 50ms") || !strings.Contains(e.Error, "b down since") || !strings.Contains(e.Error, "connection lost") {
				t.Errorf("job %s: reason %q does not say what happened", e.Job, e.Error)
			}
		}
		events := readJournal(t, dir)
		if got, want := kinds(events, "1"), []EventKind{EventQueued, EventPending, EventStarted, EventLost, EventRetried, EventFailed}; !slices.Equal(got, want) {
			t.Errorf("job 1: %v, want %v", got, want)
		}
		// Its lost attempt may run on there: the run says so as it ends.
		if got := kinds(events, ""); !slices.Equal(got, []EventKind{EventHostDown, EventWarning}) {
			t.Errorf("host events: %v, want one host_down, then a warning", got)
		} else if w := events[len(events)-1]; !strings.Contains(w.Error, "attempt 1 of job 1 may still run there") || !strings.Contains(w.Error, "--resume") {
			t.Errorf("warning %q does not say what is left on b and what stops it", w.Error)
		}
	})
}

// Jobs pinned to a down host wait for it; unpinned ones go elsewhere; when
// the host is back it gets jobs again.
func TestHostComesBack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0 b:0")
		f := newFakeExec(inv)
		dir := t.TempDir()
		w, done := startRun(t, Options{Inventory: inv, Executor: f, LogDir: dir, Retries: 2})
		io.WriteString(w, "@b die\n@b sleep 1ms\n"+repeat("sleep 1ms", 10))
		waitFor(t, func() bool { return len(f.startsOn("a")) == 10 })
		if got := f.startsOn("b"); len(got) != 1 {
			t.Fatalf("started on b while it was down: %v", got)
		}
		f.setDown("b", false)
		waitFor(t, func() bool { return len(f.startsOn("b")) == 3 })
		io.WriteString(w, "sleep 1ms\nsleep 1ms\n")
		w.Close()
		s := <-done
		f.check(t)
		if s.Counts[EventFinished] != 14 || !s.Succeeded() {
			t.Fatalf("summary %+v", s)
		}
		if got := kinds(readJournal(t, dir), ""); !slices.Equal(got, []EventKind{EventHostDown, EventHostUp}) {
			t.Errorf("host events: %v", got)
		}
	})
}

// The slot of a lost job is not given out again until the Executor confirms
// the job's processes are gone (the fake counts the lost job as running
// until Reap, so an early reuse shows as an overbooked slot).
func TestLostSlotWaitsForReap(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0")
		f := newFakeExec(inv)
		f.reapGate = make(chan struct{})
		dir := t.TempDir()
		w, done := startRun(t, Options{Inventory: inv, Executor: f, LogDir: dir, Retries: 1})
		io.WriteString(w, "lose 1\nsleep 1ms\n")
		w.Close()
		waitFor(t, func() bool { return len(kinds(readJournal(t, dir), "1")) >= 4 }) // lost, retried
		time.Sleep(20 * time.Millisecond)
		if n := len(f.startsOn("a")); n != 1 {
			t.Fatalf("%d starts before the lost job was reaped, want 1", n)
		}
		close(f.reapGate)
		s := <-done
		f.check(t)
		if s.Counts[EventFinished] != 2 || len(f.reaps) != 1 || !strings.HasSuffix(f.reaps[0], "-1-1") {
			t.Fatalf("summary %+v, reaps %v", s, f.reaps)
		}
	})
}

// A job that could not start because its host was down (the run had not
// noticed yet) goes back to the queue without using an attempt, and leaves
// no log files; the host gets nothing more while it is down. Here the run
// holds b's GPU lock already (job 1 just ended there), so it is Run that
// finds the host gone.
func TestNotStartedUsesNoAttempt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0 b:0")
		f := newFakeExec(inv)
		dir := t.TempDir()
		opts := Options{Inventory: inv, Executor: f, LogDir: dir, Retries: 0}
		w, done := startRun(t, opts)
		// Job 2 is queued long before job 1 ends, and takes b's slot (and
		// lock) straight after it.
		io.WriteString(w, "@b godown 100ms\n@b sleep 1ms\nsleep 1ms\n")
		w.Close()
		waitFor(t, func() bool { return len(kinds(readJournal(t, dir), "2")) >= 3 }) // queued, started, lost
		f.setDown("b", false)
		s := <-done
		if s.Counts[EventFinished] != 3 || !s.Succeeded() {
			t.Fatalf("summary %+v", s)
		}
		var downs, lost int
		for _, e := range readJournal(t, dir) {
			switch e.Event {
			case EventHostDown:
				downs++
			case EventLost:
				lost++
				if !strings.Contains(e.Error, "did not start") || e.Stdout != "" || e.Job != "2" {
					t.Errorf("lost event %+v", e)
				}
			}
		}
		if downs != 1 || lost != 1 {
			t.Errorf("%d host_down, %d lost events; want 1 each", downs, lost)
		}
		logs, _ := filepath.Glob(filepath.Join(dir, "*.out"))
		if len(logs) != 3 {
			t.Errorf("log files %v, want one per job", logs)
		}
		if _, err := os.Stat(filepath.Join(dir, "2.2.out")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a second log for a job that ran once: %v", err)
		}
	})
}

// A host found down when its GPU is to be locked: the job was never
// started, so there is no started or lost event and no log, only host_down;
// the jobs run elsewhere.
func TestDownWhenLocking(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0 b:0")
		f := newFakeExec(inv)
		f.setDown("b", true)
		dir := t.TempDir()
		opts := Options{Inventory: inv, Executor: f, LogDir: dir, Retries: 0}
		_, s := runJobsWith(t, f, opts, "sleep 1ms\nsleep 1ms\nsleep 1ms\n")
		if s.Counts[EventFinished] != 3 || !s.Succeeded() {
			t.Fatalf("summary %+v", s)
		}
		events := readJournal(t, dir)
		if count := len(events); countKind(events, EventHostDown) != 1 || countKind(events, EventLost) != 0 || countKind(events, EventStarted) != 3 {
			t.Errorf("%d events: want 1 host_down, no lost, 3 started: %+v", count, events)
		}
		for _, e := range events {
			if e.Host == "b" && e.Event != EventHostDown {
				t.Errorf("event on b, which was down: %+v", e)
			}
		}
	})
}

func countKind(events []Event, kind EventKind) int {
	n := 0
	for _, e := range events {
		if e.Event == kind {
			n++
		}
	}
	return n
}

// A host down at the start (Options.Down) gets no job until it is back;
// jobs pinned to it wait.
func TestHostDownAtStart(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0 b:0")
		f := newFakeExec(inv)
		f.setDown("b", true)
		dir := t.TempDir()
		w, done := startRun(t, Options{Inventory: inv, Executor: f, LogDir: dir,
			Down: map[string]error{"b": errors.New("connection refused")}})
		io.WriteString(w, "@b sleep 1ms\n"+repeat("sleep 1ms", 5))
		waitFor(t, func() bool { return len(f.startsOn("a")) == 5 })
		f.setDown("b", false)
		w.Close()
		s := <-done
		if got := f.startsOn("b"); !slices.Equal(got, []string{"sleep 1ms"}) || s.Counts[EventFinished] != 6 {
			t.Fatalf("on b: %v; summary %+v", got, s)
		}
		events := readJournal(t, dir)
		if events[0].Event != EventRun {
			t.Fatalf("first event %+v, want the run's", events[0])
		}
		events = events[1:]
		if events[0].Event != EventHostDown || events[0].Host != "b" || events[0].Error != "connection refused" {
			t.Errorf("first event %+v, want b's host_down", events[0])
		}
	})
}
