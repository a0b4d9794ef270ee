package dispatch

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// A run whose share of a host's GPUs the host's holder says (another run
// waits for them) keeps at most that many busy once it holds their locks:
// a GPU it frees past that is let go of, not given its next job; a run no
// one waits for uses every GPU. Nine jobs of 10 ms on three GPUs: at most
// a first wave on all three (nothing is known before a lock is held), then
// the share at most: in virtual time, the run's length says it (30 ms
// with no share; at least 10 + 60 ms with a share of one, 10 + 30 with
// two).
func TestShareCapsBusyGPUs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		share int // -1: no run waits
		least time.Duration
	}{
		{"no run waits", -1, 30 * time.Millisecond},
		{"another run waits, a share of one", 1, 70 * time.Millisecond},
		{"another run waits, a share of two", 2, 40 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				inv := lab("a:0,1,2")
				f := newFakeExec(inv)
				if tt.share >= 0 {
					f.locks.shares["a"] = tt.share
				}
				start := time.Now()
				_, s := runJobsWith(t, f, Options{Inventory: inv, Executor: f, LogDir: t.TempDir()}, repeat("sleep 10ms", 9))
				if s.Counts[EventFinished] != 9 {
					t.Fatalf("summary %+v", s)
				}
				took := time.Since(start)
				if took < tt.least || tt.share < 0 && took != tt.least {
					t.Errorf("the run took %v, want %v (at least, with a share)", took, tt.least)
				}
			})
		})
	}
}

// --max-gpus: a run keeps at most that many GPUs busy over all its hosts,
// whatever slots are free; two slots on one GPU still take two jobs.
func TestMaxGPUs(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0,1,2 b:0,1")
		inv.Hosts[1].SlotsPerGPU = 2
		f := newFakeExec(inv)
		_, s := runJobsWith(t, f, Options{Inventory: inv, Executor: f, LogDir: t.TempDir(), MaxGPUs: 2}, repeat("sleep 10ms", 12))
		if s.Counts[EventFinished] != 12 {
			t.Fatalf("summary %+v", s)
		}
		if f.peakGPUs != 2 {
			t.Errorf("at most %d GPUs busy at once, want 2", f.peakGPUs)
		}
	})
}

// A job held back by the share or by --max-gpus is said to wait for that.
func TestWhyCapped(t *testing.T) {
	t.Parallel()
	table := newSlotTable(lab("a:0,1"))
	j := &Job{GPU: -1, GPUs: 1}
	if why := table.whyWaiting(j, 1); why != "waits for a free slot; 1 job ahead of it" {
		t.Errorf("uncapped: %q", why)
	}
	h := table.byName["a"]
	p, _ := table.place(j, held{})
	table.take(p)
	h.share = 1
	if why := table.whyWaiting(j, 1); why != "fair share: on a, another run waits with less than its share of its 2 GPUs; this run keeps its share, 1; 1 job ahead of it" {
		t.Errorf("share: %q", why)
	}
	h.share, table.maxGPUs = -1, 1
	if why := table.whyWaiting(j, 0); why != "--max-gpus 1: the run keeps 1 GPU busy; first in line: slots are held for it as they free up" {
		t.Errorf("max: %q", why)
	}
}

// A run that another run's lock kept from a GPU of a host tells the host
// once no job of its queue could run there any more, and only then: the
// record of its waiting goes, and the run that gave up GPUs for it keeps
// them. A run never kept from a GPU says nothing. Host a has one GPU free
// (the other is another run's all along), host b one.
func TestStopWaiting(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		input string
		// told is whether host a is told, and between how many jobs
		// started it is told last: once the queue is empty (the last two jobs are placed
		// on the two GPUs as the jobs before them end), or once only jobs
		// for host b wait (three on a, one on b, at most one more).
		told            bool
		atLeast, atMost int
	}{
		{"the queue empties", repeat("sleep 10ms", 6), true, 4, 6},
		{"the rest is for another host", repeat("[host=a] sleep 10ms", 3) + repeat("[host=b] sleep 30ms", 6), true, 3, 5},
		{"never kept from a GPU", repeat("[host=b] sleep 10ms", 4), false, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				inv := lab("a:0,1 b:0")
				f := newFakeExec(inv)
				f.locks.holder["a:1"] = "other" // another run's, all along
				s, err := Run(context.Background(), Options{Inventory: inv, Executor: f, LogDir: t.TempDir()}, []Input{{R: strings.NewReader(tt.input)}})
				if err != nil {
					t.Fatal(err)
				}
				f.check(t)
				if jobs := strings.Count(tt.input, "\n"); s.Counts[EventFinished] != jobs {
					t.Fatalf("summary %+v, want %d jobs finished", s, jobs)
				}
				// A queue empty for a moment as the jobs are read is said
				// too (the next refusal makes the record again): the last
				// word is what counts.
				switch last := len(f.stopped) - 1; {
				case !tt.told && last >= 0:
					t.Errorf("told %+v, want nothing", f.stopped)
				case !tt.told:
				case last < 0:
					t.Error("host a never told")
				case f.stopped[last].host != "a" || f.stopped[last].run == "" || f.stopped[last].started < tt.atLeast || f.stopped[last].started > tt.atMost:
					t.Errorf("told %+v last, want host a once %d to %d jobs started", f.stopped[last], tt.atLeast, tt.atMost)
				}
			})
		})
	}
}
