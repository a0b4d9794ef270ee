package dispatch

import (
	"context"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// Two runs started at once on the same hosts never put jobs on one GPU at
// the same time: each job runs on a GPU whose lock its run holds, a job
// that finds a GPU locked waits without using an attempt, and both runs
// finish everything.
func TestTwoRunsNeverShareAGPU(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0,1 b:0,1")
		locks := newFakeLocks()
		var wg sync.WaitGroup
		fakes := make([]*fakeExec, 2)
		summaries := make([]*Summary, 2)
		dirs := []string{t.TempDir(), t.TempDir()}
		for i := range fakes {
			fakes[i] = newFakeExec(inv)
			fakes[i].locks = locks
			opts := Options{Inventory: inv, Executor: fakes[i], LogDir: dirs[i], Recheck: 5 * time.Millisecond}
			wg.Go(func() {
				s, err := Run(context.Background(), opts, []Input{{R: strings.NewReader(repeat("sleep 3ms", 40))}})
				if err != nil {
					t.Error(err)
				}
				summaries[i] = s
			})
		}
		wg.Wait()
		for i, f := range fakes {
			f.check(t)
			if summaries[i] == nil || summaries[i].Counts[EventFinished] != 40 {
				t.Errorf("run %d: %+v", i, summaries[i])
			}
		}
		if locks.collisions != 0 {
			t.Errorf("%d times two runs had jobs on one GPU", locks.collisions)
		}
		if locks.denied == 0 {
			t.Error("the runs never contended for a GPU: the test proves nothing")
		}
		if len(locks.holder) != 0 {
			t.Errorf("locks left after both runs: %v", locks.holder)
		}
		busy := 0
		for _, dir := range dirs {
			for _, e := range readJournal(t, dir) {
				switch {
				case e.Event == EventBusy:
					busy++
					if !strings.Contains(e.Error, "locked by another gpudispatch run") {
						t.Errorf("busy event %+v", e)
					}
				case e.Event == EventStarted && e.Attempt != 1:
					t.Errorf("a job that found its GPU locked used an attempt: %+v", e)
				}
			}
		}
		if busy == 0 {
			t.Error("no gpu_busy event says why jobs waited")
		}
	})
}

// Under SkipBusy a GPU with other people's memory on it gets no job, says
// so once, and is used again once it is free; a job pinned to it waits.
func TestSkipBusy(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0,1")
		f := newFakeExec(inv)
		f.setUsage("a", map[int]int{0: 2000})
		dir := t.TempDir()
		opts := Options{Inventory: inv, Executor: f, LogDir: dir, SkipBusy: true, BusyMemoryMB: 500, Recheck: 5 * time.Millisecond}
		w, done := startRun(t, opts)
		io.WriteString(w, "@a:0 sleep 1ms\n"+repeat("sleep 2ms", 6))
		waitFor(t, func() bool { return countKind(readJournal(t, dir), EventFinished) == 6 })
		f.mu.Lock()
		for _, s := range f.starts {
			if s.gpus != "1" {
				t.Errorf("%s started on GPU %s, which was busy", s.command, s.gpus)
			}
		}
		f.mu.Unlock()
		f.setUsage("a", map[int]int{0: 100})
		w.Close()
		s := <-done
		f.check(t)
		if s.Counts[EventFinished] != 7 {
			t.Fatalf("summary %+v", s)
		}
		var busy []Event
		for _, e := range readJournal(t, dir) {
			if e.Event == EventBusy {
				busy = append(busy, e)
			}
		}
		if len(busy) != 1 || busy[0].Host != "a" || busy[0].GPUs[0] != 0 || !strings.Contains(busy[0].Error, "2000 MiB used (more than 500)") {
			t.Errorf("gpu_busy events %+v, want one for a:0 with its memory", busy)
		}
		if last := f.starts[len(f.starts)-1]; last.command != "sleep 1ms" || last.gpus != "0" {
			t.Errorf("the job pinned to the busy GPU: %+v, want it last, on GPU 0", last)
		}
	})
}

// Under SkipBusy nvidia-smi is asked only before a job goes where no job of
// this run is: a GPU with slots_per_gpu 2 is checked for its first job.
func TestSkipBusyChecksOnlyEmptyGPUs(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0")
		inv.Hosts[0].SlotsPerGPU = 2
		f := newFakeExec(inv)
		opts := Options{Inventory: inv, Executor: f, LogDir: t.TempDir(), SkipBusy: true, BusyMemoryMB: 500, Recheck: time.Hour}
		_, s := runJobsWith(t, f, opts, repeat("sleep 20ms", 2))
		if s.Counts[EventFinished] != 2 || f.peak["a:0"] != 2 {
			t.Fatalf("summary %+v, peak %v", s, f.peak)
		}
		if f.probes != 2 {
			t.Errorf("%d probes (%d asked), want 2: the host's first look, and the check before the first job (the second joins this run's job)", f.probes, f.asked)
		}
	})
}

// A lock whose holder dies is taken again before the next job on its GPU.
func TestLostLockTakenAgain(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0")
		f := newFakeExec(inv)
		dir := t.TempDir()
		w, done := startRun(t, Options{Inventory: inv, Executor: f, LogDir: dir})
		io.WriteString(w, "sleep 30ms\n")
		waitFor(t, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.starts) == 1 })
		f.locks.mu.Lock()
		first := f.locks.handed[0]
		f.locks.mu.Unlock()
		first.Release() // its holder on the host is gone
		waitFor(t, func() bool { return countKind(readJournal(t, dir), EventFinished) == 1 })
		io.WriteString(w, "sleep 1ms\n")
		w.Close()
		<-done
		f.check(t)
		if f.locks.taken != 2 {
			t.Errorf("%d locks taken, want 2 (the lost one taken again)", f.locks.taken)
		}
	})
}

// A host that cannot lock (no flock) still runs jobs, with one warning.
func TestNoFlockWarnsOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0,1")
		f := newFakeExec(inv)
		f.locks.noFlock["a"] = true
		dir := t.TempDir()
		_, s := runJobsWith(t, f, Options{Inventory: inv, Executor: f, LogDir: dir}, repeat("sleep 1ms", 5))
		if s.Counts[EventFinished] != 5 {
			t.Fatalf("summary %+v", s)
		}
		if n := countKind(readJournal(t, dir), EventWarning); n != 1 {
			t.Errorf("%d warnings, want 1", n)
		}
	})
}

// Without SkipBusy a job may land on a GPU that others use: the run says
// so once per such GPU (not for one that others leave alone), and starts
// its jobs there all the same.
func TestSharedGPUWarnedOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		f := newFakeExec(lab("a:0,1"))
		f.setUsage("a", map[int]int{1: 40000})
		w, done := startRun(t, Options{Inventory: lab("a:0,1"), Executor: f, LogDir: dir, BusyMemoryMB: 1000})
		io.WriteString(w, repeat("sleep 50ms", 6))
		w.Close()
		s := <-done
		if s.Counts[EventFinished] != 6 {
			t.Fatalf("summary %+v", s)
		}
		var warned []string
		for _, e := range readJournal(t, dir) {
			if e.Event == EventWarning {
				warned = append(warned, e.Error)
			}
		}
		if len(warned) != 1 || !strings.Contains(warned[0], "GPU 1 is used by others too (40000 MiB used (more than 1000))") || !strings.Contains(warned[0], "--skip-busy") {
			t.Errorf("warnings %q; want one, for GPU 1, naming --skip-busy", warned)
		}
		if got := f.startsOn("a"); len(got) != 6 || !slices.Contains(got, "sleep 50ms") {
			t.Errorf("started %v", got)
		}
	})
}
