package dispatch

import (
	"context"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

func kinds(events []Event, job string) []EventKind {
	var out []EventKind
	for _, e := range events {
		if e.Job == job && e.Event != EventRun {
			out = append(out, e.Event)
		}
	}
	return out
}

func TestJournalRecordsEveryStep(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		_, s := runJobs(t, lab("a:0"), "exit 0\nexit 3\n@nowhere exit 0\n[name=named] exit 0\n", func(o *Options) { o.LogDir = dir })
		events := readJournal(t, dir)
		for job, want := range map[string][]EventKind{
			"1":     {EventQueued, EventPending, EventStarted, EventFinished},
			"2":     {EventQueued, EventPending, EventStarted, EventFailed},
			"3":     {EventRejected},
			"named": {EventQueued, EventPending, EventStarted, EventFinished},
		} {
			if got := kinds(events, job); !slices.Equal(got, want) {
				t.Errorf("job %s: events %v, want %v", job, got, want)
			}
		}
		for _, e := range events {
			if e.Event == EventFailed {
				if e.Exit == nil || *e.Exit != 3 || e.Host != "a" || !slices.Equal(e.GPUs, []executor.GPUID{0}) || e.Start == nil || e.End == nil {
					t.Errorf("failed event lacks details: %+v", e)
				}
				out, _ := os.ReadFile(e.Stdout)
				if string(out) != "a 0\n" {
					t.Errorf("stdout log %s holds %q", e.Stdout, out)
				}
			}
		}
		if s.Succeeded() {
			t.Errorf("the run succeeded: %+v", s)
		}
	})
}

// --resume runs exactly the jobs that did not succeed, matched by their text
// and occurrence, not by position; earlier logs stay.
func TestResume(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		first := "echo a\nexit 1\necho a\n[name=n] exit 2\nexit 0\n"
		f, s := runJobs(t, lab("a:0,1"), strings.ReplaceAll(first, "echo a", "exit 0"), func(o *Options) { o.LogDir = dir })
		if s.Counts[EventFinished] != 3 || len(f.starts) != 5 {
			t.Fatalf("first run: %+v", s)
		}
		// Reordered, one line added, the failing ones now succeed.
		second := "exit 0\nexit 0\nexit 1\n[name=n] exit 2\nexit 0\nexit 0\n"
		f, s = runJobs(t, lab("a:0,1"), second, func(o *Options) { o.LogDir = dir; o.Resume = true })
		var ran []string
		for _, st := range f.starts {
			ran = append(ran, st.command)
		}
		slices.Sort(ran)
		// "exit 0" occurs 4 times now, 3 of which succeeded before; exit 1 and
		// the named job failed before.
		if want := []string{"exit 0", "exit 1", "exit 2"}; !slices.Equal(ran, want) {
			t.Errorf("resumed run ran %q, want %q", ran, want)
		}
		if s.Skipped != 3 {
			t.Errorf("skipped %d, want 3", s.Skipped)
		}
		// The named job's first logs are kept; its second attempt has its own.
		for _, name := range []string{"n.out", "n.err", "n.2.out", "n.2.err"} {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				t.Errorf("log %s: %v", name, err)
			}
		}
	})
}

// A job's id holds for the life of its log dir: --resume keeps the ids of
// the jobs it matches (whatever lines were added before them), new lines
// and runs without --resume take ids never used there, and so ID.N.out is
// always attempt N of one job.
func TestIDsStableInLogDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ids := func(events []Event, run string) map[string]string { // id -> command, queued or rejected in run
		m := map[string]string{}
		for _, e := range events {
			if e.Run == run && (e.Event == EventQueued || e.Event == EventRejected) {
				m[e.Job] = e.Command
			}
		}
		return m
	}
	runs := func() []string {
		var out []string
		for _, e := range readJournal(t, dir) {
			if e.Event == EventRun {
				out = append(out, e.Run)
			}
		}
		return out
	}
	for _, step := range []struct {
		name   string
		input  string
		resume bool
		want   map[string]string
		logs   []string
	}{
		{"first run", "sleep 0s #one\nsleep 0s #two\n@nowhere x\nexit 1\n", false,
			map[string]string{"1": "sleep 0s #one", "2": "sleep 0s #two", "3": "x", "4": "exit 1"}, []string{"1.out", "4.err"}},
		{"a line added on top, resumed", "sleep 0s #zero\nsleep 0s #one\nsleep 0s #two\n@nowhere x\nexit 1\n", true,
			map[string]string{"5": "sleep 0s #zero", "3": "x", "4": "exit 1"}, []string{"5.out", "4.2.err"}},
		{"the same file again, afresh", "sleep 0s #one\n", false,
			map[string]string{"6": "sleep 0s #one"}, []string{"6.out"}},
	} {
		runJobs(t, lab("a:0"), step.input, func(o *Options) { o.LogDir = dir; o.Resume = step.resume; o.Retries = 0 })
		r := runs()
		if got := ids(readJournal(t, dir), r[len(r)-1]); !maps.Equal(got, step.want) {
			t.Errorf("%s: ids %v, want %v", step.name, got, step.want)
		}
		for _, name := range step.logs {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				t.Errorf("%s: %v", step.name, err)
			}
		}
	}
}

func TestLostJobsAreRetriedThenGiveUp(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		_, s := runJobs(t, lab("a:0 b:0"), "lose 1\nlose 5\n", func(o *Options) { o.LogDir = dir; o.Retries = 2 })
		events := readJournal(t, dir)
		// Each lost attempt is stopped on its host once it answers (at once
		// here), in its own time: the retry may start elsewhere before.
		story := func(job string) (got []EventKind, stopped int) {
			for _, k := range kinds(events, job) {
				if k == EventStopped {
					stopped++
				} else {
					got = append(got, k)
				}
			}
			return got, stopped
		}
		if got, stopped := story("1"); !slices.Equal(got, []EventKind{EventQueued, EventPending, EventStarted, EventLost, EventRetried, EventPending, EventStarted, EventFinished}) || stopped != 1 {
			t.Errorf("job 1: %v and %d stopped, want 1 lost and stopped, then finished", got, stopped)
		}
		want := []EventKind{EventQueued, EventPending, EventStarted, EventLost, EventRetried, EventPending, EventStarted, EventLost, EventRetried, EventPending, EventStarted, EventLost}
		if got, stopped := story("2"); !slices.Equal(got, want) || stopped != 3 {
			t.Errorf("job 2: %v and %d stopped, want %v and 3 stopped", got, stopped, want)
		}
		if s.Counts[EventLost] != 1 || s.Counts[EventFinished] != 1 || s.Succeeded() {
			t.Errorf("summary %+v", s)
		}
	})
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		_, s := runJobs(t, lab("a:0,1"), "[timeout=50ms] hang\nsleep 1ms\n", func(o *Options) { o.LogDir = dir; o.Timeout = time.Hour })
		if got := kinds(readJournal(t, dir), "1"); !slices.Equal(got, []EventKind{EventQueued, EventPending, EventStarted, EventTimeout}) {
			t.Errorf("job 1: %v", got)
		}
		if s.Counts[EventTimeout] != 1 || s.Succeeded() {
			t.Errorf("summary %+v", s)
		}
	})
}

// pipeInput feeds lines to a run as a user typing into a pipe would.
func startRun(t *testing.T, opts Options) (w *io.PipeWriter, done chan *Summary) {
	t.Helper()
	r, w := io.Pipe()
	done = make(chan *Summary, 1)
	go func() {
		s, err := Run(context.Background(), opts, []Input{{R: r}})
		if err != nil {
			t.Error(err)
		}
		done <- s
	}()
	return w, done
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (f *fakeExec) running() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.total
}

// Jobs start as their lines arrive; a drain lets running jobs finish,
// cancels the waiting ones, stops reading input and says it was interrupted.
func TestStreamingAndDrain(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0")
		f := newFakeExec(inv)
		drain := make(chan struct{})
		dir := t.TempDir()
		w, done := startRun(t, Options{Inventory: inv, Executor: f, LogDir: dir, Drain: drain})
		io.WriteString(w, "sleep 200ms\n")
		waitFor(t, func() bool { return f.running() == 1 }) // started before the input ended
		io.WriteString(w, "sleep 1ms\n")
		waitFor(t, func() bool { return len(kinds(readJournal(t, dir), "2")) == 1 })
		close(drain)
		s := <-done
		w.Close()
		if s.Counts[EventFinished] != 1 || s.Counts[EventCancelled] != 1 || !s.Interrupted {
			t.Errorf("summary %+v", s)
		}
		if got := kinds(readJournal(t, dir), "2"); !slices.Equal(got, []EventKind{EventQueued, EventCancelled}) {
			t.Errorf("job 2: %v", got)
		}
	})
}

// Cancelling the context stops running jobs too.
func TestCancelStopsRunningJobs(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0,1")
		f := newFakeExec(inv)
		ctx, cancel := context.WithCancel(context.Background())
		dir := t.TempDir()
		r, w := io.Pipe()
		done := make(chan *Summary, 1)
		go func() {
			s, _ := Run(ctx, Options{Inventory: inv, Executor: f, LogDir: dir}, []Input{{R: r}})
			done <- s
		}()
		io.WriteString(w, "hang\nhang\nhang\n")
		waitFor(t, func() bool { return f.running() == 2 })
		cancel()
		s := <-done
		w.Close()
		if s.Counts[EventCancelled] != 3 || !s.Interrupted || f.running() != 0 {
			t.Errorf("summary %+v, still running %d", s, f.running())
		}
	})
}

func TestLogDirUnusable(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		os.WriteFile(file, nil, 0o644)
		_, err := Run(context.Background(), Options{Inventory: lab("a:0"), Executor: newFakeExec(lab("a:0")), LogDir: filepath.Join(file, "logs")}, nil)
		var se *SetupError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), "log dir") {
			t.Fatalf("err = %v", err)
		}
	})
}

// A job whose log files cannot be created fails with the reason; the others
// run. (A name longer than the file system allows makes creation fail even
// for root.)
func TestLogFileUncreatable(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		long := strings.Repeat("x", 300)
		_, s := runJobs(t, lab("a:0"), "[name="+long+"] exit 0\nexit 0\n", func(o *Options) { o.LogDir = dir })
		if s.Counts[EventFinished] != 1 || s.Counts[EventFailed] != 1 {
			t.Fatalf("summary %+v", s)
		}
		if e := s.Unsuccessful[0]; !strings.Contains(e.Error, "file name too long") || e.Job != long {
			t.Errorf("failure does not say why: %+v", e)
		}
		if got := kinds(readJournal(t, dir), long); !slices.Equal(got, []EventKind{EventQueued, EventFailed}) {
			t.Errorf("journal: %v", got)
		}
	})
}

// A finished run leaves no goroutine behind.
func TestRunLeavesNoGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()
	for i := 0; i < 3; i++ {
		runJobs(t, lab("a:0,1 b:0"), repeat("sleep 1ms", 20)+"lose 1\n[timeout=10ms] hang\n", nil)
	}
	waitFor(t, func() bool { return runtime.NumGoroutine() <= before })
}

// Resume recognises jobs whose lines JSON cannot spell as they are: invalid
// UTF-8 (two lines that differ only there stay apart), and long lines of
// control bytes, which JSON writes six bytes each.
func TestResumeOddBytes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		controls := "exit 0 #" + strings.Repeat("\x01", MaxJobBytes-10)
		first := "exit 0 #\xff\n" + controls + "\n"
		if _, s := runJobs(t, lab("a:0"), first, func(o *Options) { o.LogDir = dir }); s.Counts[EventFinished] != 2 {
			t.Fatalf("first run: %+v", s)
		}
		f, s := runJobs(t, lab("a:0"), first+"exit 0 #\xfe\n", func(o *Options) { o.LogDir = dir; o.Resume = true })
		if s.Skipped != 2 || len(f.starts) != 1 || f.starts[0].command != "exit 0 #\xfe" {
			t.Errorf("resumed run skipped %d and ran %d jobs, want 2 and only the new one", s.Skipped, len(f.starts))
		}
	})
}
