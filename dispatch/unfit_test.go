package dispatch

import (
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// A host that cannot set up a job's environment runs nothing of it and
// says so once: its jobs go to the hosts that can, a job with an env no
// host has fails at once with each host's reason, and no attempt is used
// nor log left by the answers.
func TestUnfitHost(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		inv := lab("a:0 b:0,1")
		f := newFakeExec(inv)
		f.unfit = map[string]map[string]string{
			"a": {"*": "workdir /home/u/proj does not exist", "gone": "conda env gone not found; this host has: base"},
			"b": {"gone": "conda env gone not found; this host has: base, torch"},
		}
		_, s := runJobsWith(t, f, Options{Inventory: inv, Executor: f, LogDir: dir, Retries: 2, Recheck: time.Hour},
			repeat("sleep 1ms", 12)+"[conda=gone] python t.py\n")
		if got := f.startsOn("a"); len(got) != 0 {
			t.Errorf("started on the unfit host: %v", got)
		}
		if got := f.startsOn("b"); len(got) != 12 {
			t.Errorf("started on b: %d jobs, want 12", len(got))
		}
		if s.Counts[EventFinished] != 12 || s.Counts[EventFailed] != 1 {
			t.Fatalf("summary %+v", s.Counts)
		}
		failed := s.Unsuccessful[0]
		want := "no host can set up its environment (a: conda env gone not found; this host has: base; b: conda env gone not found; this host has: base, torch)"
		if failed.Job != "13" || failed.Error != want || failed.Exit != nil {
			t.Errorf("failed job %s: %q, want job 13: %q", failed.Job, failed.Error, want)
		}
		events := readJournal(t, dir)
		var warnings []string
		for _, e := range events {
			if e.Event == EventWarning {
				warnings = append(warnings, e.Host+": "+e.Error)
			}
			if e.Event == EventFinished && e.Attempt != 1 {
				t.Errorf("job %s finished in attempt %d: an unfit answer used one", e.Job, e.Attempt)
			}
		}
		slices.Sort(warnings)
		wantWarnings := []string{
			"a: cannot set up its jobs, which go to other hosts: workdir /home/u/proj does not exist",
			"a: cannot set up jobs with conda=gone, which go to other hosts: conda env gone not found; this host has: base",
			"b: cannot set up jobs with conda=gone, which go to other hosts: conda env gone not found; this host has: base, torch",
		}
		if !slices.Equal(warnings, wantWarnings) {
			t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(warnings, "\n"), strings.Join(wantWarnings, "\n"))
		}
		if f.unfitTries > 4 {
			t.Errorf("the unfit hosts were tried %d times, want each env once per host (until Recheck)", f.unfitTries)
		}
	})
}

// An unfit host shows so in the run's overview (the page), and is tried
// again after Recheck: once fixed, it takes jobs.
func TestUnfitHostTriedAgain(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0 b:0")
		f := newFakeExec(inv)
		const why = "setup failed with exit status 1: no such file"
		f.unfit = map[string]map[string]string{"a": {"*": why}}
		c := NewControl()
		w, done := startRun(t, Options{Inventory: inv, Executor: f, LogDir: t.TempDir(), Recheck: time.Second, Control: c})
		w.Write([]byte(repeat("sleep 20ms", 4)))
		// The run hears of the host's answer after the fake gave it: the
		// overview says so once the run has taken it in.
		var o *Overview
		waitFor(t, func() bool {
			var err error
			o, err = c.Overview(t.Context(), 10)
			return err == nil && o.Hosts[0].Unfit != ""
		})
		if o.Hosts[0].Name != "a" || o.Hosts[0].Unfit != why || o.Hosts[1].Unfit != "" {
			t.Errorf("overview: %+v", o.Hosts)
		}
		f.mu.Lock()
		f.unfit = nil
		f.mu.Unlock()
		w.Write([]byte(repeat("sleep 30ms", 100))) // 3 s on b alone
		waitFor(t, func() bool { return len(f.startsOn("a")) > 0 })
		w.Close()
		if s := <-done; !s.Succeeded() || s.Counts[EventFinished] != 104 {
			t.Fatalf("summary %+v", s.Counts)
		}
	})
}
