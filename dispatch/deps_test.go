package dispatch

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// byJob is each job's final event and its start, from a journal.
func byJob(events []Event) (final map[string]Event, started map[string]time.Time) {
	final, started = map[string]Event{}, map[string]time.Time{}
	for _, e := range events {
		switch {
		case e.Event == EventPending && e.SettingUp:
			// Placed and launched: the order the scheduler chose (its
			// started event comes from the job's own goroutine).
			started[e.Job] = e.Time
		case e.Event == EventStarted && e.Start != nil && started[e.Job].IsZero():
			started[e.Job] = *e.Start
		case e.JobState() != "" && Ended(e.JobState()):
			final[e.Job] = e
		}
	}
	return final, started
}

// A chain runs in order across hosts; a glob waits for every job it
// names; a failed job cancels its dependents, and theirs, with the reason,
// while after_any runs whatever the outcome.
func TestDependencies(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		input := `[name=train_1 host=a] sleep 60ms
	[name=train_2 host=b] sleep 30ms
	[name=eval after=train_1] sleep 20ms
	[name=report after=eval,train_*] exit 0
	[name=bad] exit 1
	[name=needs_bad after=bad] exit 0
	[name=needs_that after=needs_bad] exit 0
	[name=anyway after_any=bad,needs_bad] exit 0
	[name=t_o timeout=10ms] sleep 1s
	[after=t_o] exit 0
	`
		_, s := runJobs(t, lab("a:0 b:0"), input, func(o *Options) { o.LogDir = dir })
		final, started := byJob(readJournal(t, dir))
		for _, id := range []string{"train_1", "train_2", "eval", "report", "anyway"} {
			if final[id].Event != EventFinished {
				t.Errorf("job %s: %s %s", id, final[id].Event, final[id].Error)
			}
		}
		order := func(before, after string) {
			t.Helper()
			if end := final[before].End; end == nil || started[after].Before(*end) {
				t.Errorf("job %s started at %v, before %s ended (%v)", after, started[after], before, end)
			}
		}
		order("train_1", "eval")
		order("eval", "report")
		order("train_2", "report")
		order("bad", "anyway")
		for id, why := range map[string]string{
			"needs_bad":  "dependency bad failed",
			"needs_that": "dependency needs_bad was cancelled",
			"10":         "dependency t_o timed out",
		} {
			if e := final[id]; e.Event != EventCancelled || e.Error != why {
				t.Errorf("job %s: %s %q; want cancelled, %q", id, e.Event, e.Error, why)
			}
			if _, ran := started[id]; ran {
				t.Errorf("job %s started", id)
			}
		}
		if s.Counts[EventCancelled] != 3 {
			t.Errorf("counts %v", s.Counts)
		}
	})
}

// Unknown jobs, a job's own name, a later job and a glob that matches
// nothing reject the line with its number; the other jobs run.
func TestDependenciesRejected(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		input := "[name=a] exit 0\n[after=nope] exit 0\n[name=self after=self] exit 0\n[after=5] exit 0\n[after=x_*] exit 0\n[after=a] exit 0\n[after=a,,b] x\n"
		_, s := runJobs(t, lab("a:0"), input, func(o *Options) { o.LogDir = dir })
		want := map[string]string{
			"2":    "after=nope: no job nope before this one (a job waits for jobs queued before it)",
			"self": "after=self: a job cannot wait for itself",
			"4":    "after=5: no job 5 before this one (a job waits for jobs queued before it)",
			"5":    "after=x_*: no job queued so far has a name that matches",
			"7":    "[after=a,,b]: want job numbers, names or globs over names (train_*), separated by commas",
		}
		final, _ := byJob(readJournal(t, dir))
		for id, why := range want {
			if e := final[id]; e.Event != EventRejected || e.Error != why {
				t.Errorf("job %s: %s %q; want rejected, %q", id, e.Event, e.Error, why)
			}
		}
		if s.Counts[EventFinished] != 2 || s.Counts[EventRejected] != 5 {
			t.Errorf("counts %v", s.Counts)
		}
	})
}

// A job that waits holds no slot and blocks no job behind it: with two
// GPUs, one busy with a long job, 50 jobs queued after a job that waits
// for the long one all start before the long one ends.
func TestDependentBlocksNothing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		input := "[name=long] sleep 2s\n[name=after_long after=long] exit 0\n" + repeat("sleep 1ms", 50)
		runJobs(t, lab("a:0,1"), input, func(o *Options) { o.LogDir = dir })
		final, started := byJob(readJournal(t, dir))
		end := final["long"].End
		early := 0
		for i := 3; i <= 52; i++ {
			if st, ok := started[fmt.Sprint(i)]; ok && st.Before(*end) {
				early++
			}
		}
		if early != 50 {
			t.Errorf("%d of the 50 independent jobs started before the long job ended; want all", early)
		}
		if started["after_long"].Before(*end) {
			t.Errorf("the dependent started before its dependency ended")
		}
	})
}

// --resume counts a dependency that succeeded in the earlier run as done.
func TestDependencyResumed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		runJobs(t, lab("a:0"), "[name=prep] exit 0\n", func(o *Options) { o.LogDir = dir })
		f, s := runJobs(t, lab("a:0"), "[name=prep] exit 0\n[name=use after=prep] exit 0\n", func(o *Options) { o.LogDir, o.Resume = dir, true })
		if s.Skipped != 1 || s.Counts[EventFinished] != 1 || len(f.starts) != 1 || !strings.Contains(f.starts[0].command, "exit 0") {
			t.Errorf("resumed: skipped %d, counts %v, starts %v", s.Skipped, s.Counts, f.starts)
		}
	})
}

// A dependent cancelled because its dependency was lost waits for it again
// when both are retried: it runs once the dependency succeeded.
func TestRetryDependent(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		s := serve(t, lab("a:0"), dir, false)
		s.submit(t, Batch{Text: "[name=train] lose 1\n[name=eval after=train] exit 0\n"})
		if ended := s.wait(t, "train", "eval"); ended["eval"].Event != EventCancelled || ended["eval"].Error != "dependency train was lost" {
			t.Fatalf("eval: %+v", ended["eval"])
		}
		as, err := s.c.Retry(context.Background(), []string{"train", "eval"})
		if err != nil || as[0].Err != "" || as[1].Message != "queued again, after the jobs it waits for" {
			t.Fatalf("retry: %+v %v", as, err)
		}
		ended := s.wait(t, "train", "eval")
		if ended["train"].Event != EventFinished || ended["eval"].Event != EventFinished {
			t.Fatalf("after retry: train %s, eval %s %s", ended["train"].Event, ended["eval"].Event, ended["eval"].Error)
		}
		if ended["eval"].Start.Before(*ended["train"].End) {
			t.Errorf("eval started at %v, before train ended at %v", ended["eval"].Start, ended["train"].End)
		}
		s.stop(t, false)
	})
}

// A number names the job with that number, whether or not it has a name:
// after=1 waits for job 1 named train.
func TestDependencyByNumber(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		input := "[name=train] sleep 30ms\n[name=eval after=1] exit 0\n"
		runJobs(t, lab("a:0 b:0"), input, func(o *Options) { o.LogDir = dir })
		final, started := byJob(readJournal(t, dir))
		if final["eval"].Event != EventFinished {
			t.Fatalf("eval: %s %s", final["eval"].Event, final["eval"].Error)
		}
		if end := final["train"].End; end == nil || started["eval"].Before(*end) {
			t.Errorf("eval started at %v, before train ended (%v)", started["eval"], end)
		}
	})
}
