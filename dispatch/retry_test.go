package dispatch

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// A job that fails (exits non-zero) or times out runs again up to its
// retries= (else the run's RetryFailed) more times, each attempt with its
// own logs and a retried event that says why; the outcome is its last
// attempt's, and a job that waits for it waits for that one.
func TestRetryFailed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, input string
		runWide     int
		// story is each job's events, by name; finished and failed
		// count the final outcomes.
		story            map[string][]string
		finished, failed int
		why              string
		// after, when set, is the job whose last end "next" starts after.
		after string
	}{
		{name: "fails once, then succeeds", input: "[name=j retries=2] flaky 1\n",
			story:    map[string][]string{"j": {"queued", "pending", "started", "failed", "retried", "pending", "started", "finished"}},
			finished: 1, why: "attempt 1 failed: it exited 3; retry 1 of 2 (retries=2)"},
		{name: "always fails", input: "[name=j retries=1] exit 5\n",
			story:  map[string][]string{"j": {"queued", "pending", "started", "failed", "retried", "pending", "started", "failed"}},
			failed: 1, why: "attempt 1 failed: it exited 5; retry 1 of 1 (retries=1)"},
		{name: "the run's retries", input: "[name=j] exit 5\n", runWide: 1,
			story:  map[string][]string{"j": {"queued", "pending", "started", "failed", "retried", "pending", "started", "failed"}},
			failed: 1},
		{name: "a line's 0 wins", input: "[name=j retries=0] exit 5\n", runWide: 3,
			story:  map[string][]string{"j": {"queued", "pending", "started", "failed"}},
			failed: 1},
		{name: "a timeout", input: "[name=j retries=1 timeout=1s] hang\n",
			story:  map[string][]string{"j": {"queued", "pending", "started", "timeout", "retried", "pending", "started", "timeout"}},
			failed: 1, why: "attempt 1 failed: it timed out; retry 1 of 1 (retries=1)"},
		{name: "a dependent waits for the last attempt", input: "[name=dep retries=1] flaky 1\n[name=next after=dep] exit 0\n",
			story:    map[string][]string{"dep": {"queued", "pending", "started", "failed", "retried", "pending", "started", "finished"}},
			finished: 2, after: "dep"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			inv := lab("a:0")
			f := newFakeExec(inv)
			dir := t.TempDir()
			_, s := runJobsWith(t, f, Options{Inventory: inv, Executor: f, LogDir: dir, RetryFailed: tt.runWide, Recheck: time.Hour}, tt.input)
			if s.Counts[EventFinished] != tt.finished || len(s.Unsuccessful) != tt.failed {
				t.Errorf("summary %+v, want %d finished and %d unsuccessful", s, tt.finished, tt.failed)
			}
			story, logs := map[string][]string{}, map[string][]string{}
			depEnded := false
			for _, e := range readJournal(t, dir) {
				if e.Job == "" {
					continue
				}
				if tt.after != "" && e.Job == tt.after && Ended(e.JobState()) {
					depEnded = e.Event == EventFinished // its failed attempt is no end
				}
				if tt.after != "" && e.Job == "next" && e.Event == EventStarted && !depEnded {
					t.Errorf("next started before %s's last attempt finished", tt.after)
				}
				story[e.Job] = append(story[e.Job], string(e.Event))
				if e.Event == EventRetried && tt.why != "" && e.Message != tt.why {
					t.Errorf("retried: %q, want %q", e.Message, tt.why)
				}
				if e.Event == EventStarted {
					logs[e.Job] = append(logs[e.Job], filepath.Base(e.Stdout))
				}
			}
			for job, want := range tt.story {
				if !slices.Equal(story[job], want) {
					t.Errorf("job %s: %v, want %v", job, story[job], want)
				}
			}
			// Each attempt has logs of its own: j.out, then j.2.out.
			if got := logs["j"]; len(got) == 2 && (got[0] != "j.out" || got[1] != "j.2.out") {
				t.Errorf("attempts' logs %v", got)
			}
			for _, name := range logs["j"] {
				if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !strings.HasPrefix(string(b), "a 0") {
					t.Errorf("%s: %q, %v", name, b, err)
				}
			}
		})
	}
}

// --resume counts the attempts that failed in earlier runs: a job that
// used up its retries= there runs once more, and no more.
func TestRetryFailedResumeCounts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		journal := `{"event":"queued","run":"r0","job":"j","text":"[name=j retries=2] exit 5","occurrence":1}
	{"event":"failed","run":"r0","job":"j","text":"[name=j retries=2] exit 5","occurrence":1,"attempt":1,"exit":5}
	{"event":"retried","run":"r0","job":"j","text":"[name=j retries=2] exit 5","occurrence":1,"attempt":1}
	{"event":"failed","run":"r0","job":"j","text":"[name=j retries=2] exit 5","occurrence":1,"attempt":2,"exit":5}
	`
		if err := os.WriteFile(filepath.Join(dir, JournalName), []byte(journal), 0o600); err != nil {
			t.Fatal(err)
		}
		inv := lab("a:0")
		f := newFakeExec(inv)
		runJobsWith(t, f, Options{Inventory: inv, Executor: f, LogDir: dir, Resume: true, Recheck: time.Hour}, "[name=j retries=2] exit 5\n")
		if n := f.started(); n != 1 {
			t.Errorf("%d attempts in the resumed run, want 1: two of its retries were used before", n)
		}
	})
}
