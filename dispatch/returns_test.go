package dispatch

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// An attempt's files come back after it ends, on success and failure, from
// its own paths or its host's, into LOGDIR/ID/; the journal has the final
// event (with the paths) and then what came back, and a hook runs after.
// A fetch that failed is done again by --resume, for a job it skips.
func TestReturns(t *testing.T) {
	inv := lab("a:0 b:0")
	inv.Hosts[1].Return = []string{"host.txt"}
	input := "[name=ok host=a return=out/,none.csv] exit 0\n" +
		"[name=bad host=a return=out/] exit 3\n" +
		"[name=dflt host=b] exit 0\n" +
		"[name=plain host=a] exit 0\n"
	dir := t.TempDir()
	hookOut := filepath.Join(t.TempDir(), "hook")
	f, s := runJobs(t, inv, input, func(o *Options) {
		o.LogDir = dir
		o.Hooks.JobEnd = `ls "$GPUDISPATCH_RETURN_DIR" >>` + hookOut + ` 2>&1 || true`
	})
	if s.Counts[EventFinished] != 3 || s.Counts[EventFailed] != 1 {
		t.Errorf("counts %v", s.Counts)
	}
	for _, want := range []string{"ok/out", "bad/out", "dflt/host.txt"} {
		if b, err := os.ReadFile(filepath.Join(dir, want)); err != nil || len(b) == 0 {
			t.Errorf("%s: %q, %v", want, b, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "plain")); err == nil {
		t.Error("a job that returns nothing has a results directory")
	}
	if len(f.fetches) != 3 {
		t.Errorf("%d fetches; want 3", len(f.fetches))
	}
	events := readJournal(t, dir)
	for _, job := range []string{"ok", "bad", "dflt"} {
		k := kinds(events, job)
		if n := len(k); n < 2 || k[n-1] != EventReturned || (k[n-2] != EventFinished && k[n-2] != EventFailed) {
			t.Errorf("job %s: events %v; want its end, then returned", job, k)
		}
	}
	for _, e := range events {
		if e.Event == EventReturned && e.Job == "ok" && !slices.Equal(e.Missing, []string{"none.csv"}) {
			t.Errorf("ok's returned event: missing %q", e.Missing)
		}
	}
	if hook, _ := os.ReadFile(hookOut); strings.Count(string(hook), "out") != 2 || !strings.Contains(string(hook), "host.txt") {
		t.Errorf("the hooks saw %q; want the results there as they ran", hook)
	}

	// A fetch that fails is said; --resume fetches again, though the job
	// it skips succeeded.
	dir2 := t.TempDir()
	f2 := newFakeExec(inv)
	f2.fetchErr = errors.New("disk full")
	_, s2 := runJobsWith(t, f2, Options{Inventory: inv, Executor: f2, LogDir: dir2}, "[name=ok host=a return=out/] exit 0\n")
	if !s2.Succeeded() {
		t.Errorf("a failed fetch changed the job's outcome: %+v", s2)
	}
	if e := last(readJournal(t, dir2), EventReturned); e == nil || !strings.Contains(e.Error, "disk full") {
		t.Errorf("the failed fetch is not in the journal: %+v", e)
	}
	f3 := newFakeExec(inv)
	_, s3 := runJobsWith(t, f3, Options{Inventory: inv, Executor: f3, LogDir: dir2, Resume: true}, "[name=ok host=a return=out/] exit 0\n")
	if s3.Skipped != 1 || len(f3.fetches) != 1 {
		t.Errorf("--resume: skipped %d, fetched %d times; want 1, 1", s3.Skipped, len(f3.fetches))
	}
	if _, err := os.Stat(filepath.Join(dir2, "ok", "out")); err != nil {
		t.Errorf("--resume did not fetch the files: %v", err)
	}
	if e := last(readJournal(t, dir2), EventReturned); e == nil || e.Error != "" || len(e.Returned) != 1 {
		t.Errorf("--resume's fetch: %+v", e)
	}
	// Once they came, no later run fetches them.
	f4 := newFakeExec(inv)
	runJobsWith(t, f4, Options{Inventory: inv, Executor: f4, LogDir: dir2, Resume: true}, "[name=ok host=a return=out/] exit 0\n")
	if len(f4.fetches) != 0 {
		t.Errorf("a third run fetched again: %+v", f4.fetches)
	}
}

// last is the last event of kind in events, or nil.
func last(events []Event, kind EventKind) *Event {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Event == kind {
			return &events[i]
		}
	}
	return nil
}
