package dispatch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// --resume follows an attempt an earlier run left in a Slurm cluster or on
// a host (started, no outcome) rather than run its job again: the
// attempt's slot is taken, its log completed from where it stopped, and its
// outcome recorded as this run's, once. An attempt of which its host keeps
// nothing (the host was started again) is lost, and its job runs again.
func TestResumeAdoptsOpenAttempt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		inv := lab("a:0,1")
		inv.Hosts = append(inv.Hosts, clusterInventory(2).Hosts...)
		start := time.Now().Add(-time.Hour)
		out := filepath.Join(dir, "1.out")
		os.WriteFile(out, []byte("before\n"), 0o600)
		os.WriteFile(filepath.Join(dir, "1.err"), nil, 0o600)
		writeJournalIn(t, dir, []Event{
			{Event: EventStarted, Run: "old", Job: "1", Seq: 1, Text: "@hpc exit 0", Occurrence: 1, Command: "exit 0",
				Host: "hpc", Attempt: 1, Start: &start, Stdout: out, Stderr: filepath.Join(dir, "1.err"), Tag: "old-1-1"},
			{Event: EventStarted, Run: "old", Job: "2", Seq: 2, Text: "@a sleep 1ms", Occurrence: 1, Command: "sleep 1ms",
				Host: "a", GPUs: []executor.GPUID{0}, Attempt: 1, Start: &start, Stdout: filepath.Join(dir, "2.out"), Stderr: filepath.Join(dir, "2.err"), Tag: "old-2-1"},
			{Event: EventStarted, Run: "old", Job: "3", Seq: 3, Text: "@a sleep 3ms", Occurrence: 1, Command: "sleep 3ms",
				Host: "a", GPUs: []executor.GPUID{1}, Attempt: 1, Start: &start, Stdout: filepath.Join(dir, "3.out"), Stderr: filepath.Join(dir, "3.err"), Tag: "old-3-1"},
		}, "")
		f := newFakeExec(inv)
		f.detached = map[string]detached{"old-1-1": {out: "before\nafter\n", code: 0}, "old-2-1": {code: 0}}
		s, err := Run(context.Background(), Options{Inventory: inv, Executor: f, LogDir: dir, Resume: true, Retries: 1},
			[]Input{{R: strings.NewReader("@hpc exit 0\n@a sleep 1ms\n@a sleep 3ms\n@a sleep 4ms\n")}})
		if err != nil {
			t.Fatal(err)
		}
		if s.Counts[EventFinished] != 4 {
			t.Errorf("summary %+v, want 4 finished: %+v", s.Counts, s.Unsuccessful)
		}
		var ran []string
		for _, st := range f.starts {
			ran = append(ran, st.command)
		}
		slices.Sort(ran) // two GPUs: they start in either order
		if strings.Join(ran, ",") != "sleep 3ms,sleep 4ms" {
			t.Errorf("jobs started %v, want job 3 (its host kept nothing of it) and job 4, not jobs 1 and 2", ran)
		}
		if b, _ := os.ReadFile(out); string(b) != "before\nafter\n" {
			t.Errorf("job 1's log %q, want it completed from where it stopped", b)
		}
		events := readJournal(t, dir)
		var story []string
		for _, e := range events[2:] {
			if e.Job == "1" {
				story = append(story, string(e.Event))
				if e.Event == EventStarted && (!strings.HasPrefix(e.Message, "re-adopted") || e.Tag != "old-1-1" || !e.Start.Equal(start)) {
					t.Errorf("adopted start: %+v", e)
				}
			}
		}
		if strings.Join(story, ",") != "started,finished" {
			t.Errorf("job 1's story in this run: %v, want started (re-adopted), finished", story)
		}
		if n := countKind(events, EventLost); n != 1 {
			t.Errorf("%d lost events, want job 3's", n)
		}
	})
}

// --resume follows every part of a job over several hosts that an earlier
// run left running, and tells each to go (it may wait for that word);
// one whose part's log cannot be opened is not followed, with a warning,
// and runs again.
func TestResumeAdoptsEveryPart(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		inv := lab("a:0,1 b:0,1")
		start := time.Now().Add(-time.Hour)
		logs := func(id string) (string, string) {
			return filepath.Join(dir, id+".out"), filepath.Join(dir, id+".err")
		}
		var events []Event
		for i, rank1 := range []string{"1.rank1", "nodir/2.rank1"} {
			id := fmt.Sprint(i + 1)
			out, errs := logs(id)
			rout, rerr := logs(rank1)
			events = append(events, Event{Event: EventStarted, Run: "old", Job: id, Seq: i + 1, Text: "[nodes=2] sleep 1ms #" + id, Occurrence: 1, Command: "sleep 1ms #" + id,
				Host: "a", GPUs: []executor.GPUID{executor.GPUID(i)}, Attempt: 1, Start: &start, Stdout: out, Stderr: errs, Tag: "old-" + id + "-1",
				Parts: []Part{{Rank: 1, Host: "b", GPUs: []executor.GPUID{executor.GPUID(i)}, Stdout: rout, Stderr: rerr, Tag: "old-" + id + "-1.rank1"}}})
		}
		writeJournalIn(t, dir, events, "")
		f := newFakeExec(inv)
		f.detached = map[string]detached{"old-1-1": {out: "zero\n"}, "old-1-1.rank1": {out: "one\n"}, "old-2-1": {}, "old-2-1.rank1": {}}
		s, err := Run(context.Background(), Options{Inventory: inv, Executor: f, LogDir: dir, Resume: true},
			[]Input{{R: strings.NewReader("[nodes=2] sleep 1ms #1\n[nodes=2] sleep 1ms #2\n")}})
		if err != nil {
			t.Fatal(err)
		}
		if s.Counts[EventFinished] != 2 {
			t.Errorf("summary %+v", s)
		}
		for _, want := range [][2]string{{"1.out", "zero\n"}, {"1.rank1.out", "one\n"}} {
			if b, _ := os.ReadFile(filepath.Join(dir, want[0])); string(b) != want[1] {
				t.Errorf("%s: %q, want %q", want[0], b, want[1])
			}
		}
		var ran []string
		for _, st := range f.starts {
			ran = append(ran, st.command)
		}
		if strings.Join(ran, ",") != "sleep 1ms #2,sleep 1ms #2" {
			t.Errorf("parts started %v, want job 2's two (its part's log could not be opened), not job 1's", ran)
		}
		warned := false
		for _, e := range readJournal(t, dir) {
			warned = warned || e.Event == EventWarning && strings.Contains(e.Error, "cannot follow attempt 1, which may still run on a:1+b:1")
		}
		if !warned {
			t.Error("no warning that job 2's attempt could not be followed")
		}
		// A started job's parts were all set up: each is told to go again,
		// for one the last coordinator died before it could tell.
		synctest.Wait()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, tag := range []string{"old-1-1", "old-1-1.rank1"} {
			select {
			case <-f.gates[tag]:
			default:
				t.Errorf("part %s was not told to go", tag)
			}
		}
	})
}
