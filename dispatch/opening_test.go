package dispatch

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// A run does not wait for hosts still being opened: jobs run on the host
// that is up; a job pinned to a host being opened, or to a GPU of a
// `gpus: auto` one (unknown until it is opened), waits and runs there
// once it is; one that fits none of the hosts once all are opened is
// rejected then; a job pinned to a host that turns out left out is
// rejected with the host's reason; and no host event is made of it.
func TestOpeningHostsStallNothing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeExec(lab("a:0 b:0,1 c:0"))
		updates := make(chan Update)
		dir := t.TempDir()
		// b is `gpus: auto`: no GPU until it is opened.
		inv := lab("a:0 b:0 c:0")
		inv.Hosts[1].GPUs = nil
		w, done := startRun(t, Options{Inventory: inv, Executor: f, LogDir: dir, Updates: updates, Opening: []string{"b", "c"}})
		io.WriteString(w, "@b sleep 1ms\n@b:1 sleep 1ms\n[gpus=3] sleep 1ms\n@c sleep 1ms\n"+repeat("sleep 1ms", 4))
		waitFor(t, func() bool { return len(f.startsOn("a")) == 4 })
		if n := len(f.startsOn("b")) + len(f.startsOn("c")); n != 0 {
			t.Fatalf("%d jobs started on hosts being opened", n)
		}
		events := readJournal(t, dir)
		for _, job := range []string{"1", "2", "3", "4"} {
			if got := kinds(events, job); !slices.Equal(got, []EventKind{EventQueued}) {
				t.Errorf("job %s before its host is opened: %v, want only queued", job, got)
			}
		}
		opened := lab("a:0 b:0,1")
		updates <- Update{Inventory: opened, Opened: []string{"b"}}
		waitFor(t, func() bool { return len(f.startsOn("b")) == 2 })
		updates <- Update{Inventory: opened, Opened: []string{"c"}, LeftOut: map[string]error{"c": errors.New("host key changed")}}
		w.Close()
		s := <-done
		f.check(t)
		if s.Counts[EventFinished] != 6 || s.Counts[EventRejected] != 2 {
			t.Errorf("summary %+v", s)
		}
		events = readJournal(t, dir)
		for job, want := range map[string]string{"3": "gpus=3: no host has that many GPUs (the most is 2)", "4": "host c is left out of this run: host key changed"} {
			e := events[slices.IndexFunc(events, func(e Event) bool { return e.Job == job && e.Event == EventRejected })]
			if e.Error != want {
				t.Errorf("job %s rejected: %q, want %q", job, e.Error, want)
			}
		}
		if got := kinds(events, ""); slices.Contains(got, EventHostDown) || slices.Contains(got, EventReloaded) {
			t.Errorf("host events %v: a host being opened is not down, nor an edit", got)
		}
	})
}

// An attempt an earlier run left on a host still being opened (here a
// `gpus: auto` one, whose GPUs are unknown until then) is followed there
// once it is opened: it is not run again elsewhere meanwhile.
func TestResumeWaitsForTheAttemptsHost(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		f := newFakeExec(lab("a:0 b:0"))
		// The first run starts job 1 on b and goes away.
		c := NewControl()
		w, done := startRun(t, Options{Inventory: lab("b:0"), Executor: f, LogDir: dir, Control: c})
		io.WriteString(w, "sleep 10s\n")
		waitFor(t, func() bool { return f.running() == 1 })
		var tag string
		for _, e := range readJournal(t, dir) {
			if e.Event == EventStarted {
				tag = e.Tag
			}
		}
		f.mu.Lock()
		f.detached = map[string]detached{tag: {out: "b 0\nfollowed\n"}}
		f.mu.Unlock()
		if err := c.Detach(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-done
		w.Close() // its reader ends

		updates := make(chan Update)
		inv := lab("a:0 b:0")
		inv.Hosts[1].GPUs = nil
		w, done = startRun(t, Options{Inventory: inv, Executor: f, LogDir: dir, Resume: true, Updates: updates, Opening: []string{"b"}})
		io.WriteString(w, "sleep 10s\nsleep 1ms\n")
		waitFor(t, func() bool { return len(f.startsOn("a")) == 1 })
		time.Sleep(20 * time.Millisecond)
		updates <- Update{Inventory: lab("a:0 b:0"), Opened: []string{"b"}}
		w.Close()
		s := <-done
		if s.Counts[EventFinished] != 2 {
			t.Errorf("summary %+v", s)
		}
		if got := append(f.startsOn("a"), f.startsOn("b")...); !slices.Equal(got, []string{"sleep 1ms", "sleep 10s"}) {
			t.Errorf("started %v; want job 2 on a, and job 1 only by the first run on b (then followed)", got)
		}
		if got, _ := os.ReadFile(filepath.Join(dir, "1.out")); string(got) != "b 0\nfollowed\n" {
			t.Errorf("1.out %q: the attempt was not followed", got)
		}
	})
}
