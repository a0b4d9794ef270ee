package dispatch

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/inventory"
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

// Fair share, simulated: 2 to 5 runs (of one user or several) arrive at
// random times on one host and share its GPUs, each with jobs of random
// lengths, on virtual time, with the holders' shares said as lock.sh says
// them (fairShare), and each run moved back in the line by the GPU time
// it holds above its whole share as its locks change (as lock.sh's charge
// does). While every run has jobs waiting, each run's GPU time stays
// within one job's length on each GPU of its equal share rounded up (one,
// with more runs than GPUs) of an equal share (equal between users, then
// between a user's runs); and never does a GPU stand idle while a run has
// jobs waiting. "While every run waits" is from one job's length after
// the last arrival (nothing running is stopped for a share: until the
// jobs that ran as it came have ended, a run may hold more than its
// share) to the first run's last job start. Over 40 seeds of each case
// (6 here), the worst was 0.94 job lengths for runs of a share of one,
// more runs than GPUs included (4.4 when the line moved only at the
// holders' looks once a second, which come at jobs' ends here: a look
// charged what was held as it looked), and 1.43 for a share of three.
func TestFairShareSimulated(t *testing.T) {
	t.Parallel()
	for _, sc := range []struct {
		gpus  int
		users []string // one per run
	}{
		{4, []string{"ann", "ann"}},
		{4, []string{"ann", "bob"}},
		{4, []string{"ann", "ann", "bob"}},
		{4, []string{"ann", "bob", "cat", "dan"}},
		{4, []string{"ann", "ann", "bob", "bob"}},
		{10, []string{"ann", "bob", "cat", "dan", "eve"}},
		// Shares that leave GPUs over: those go round.
		{4, []string{"ann", "bob", "cat"}},
		{4, []string{"ann", "ann", "ann"}},
		{6, []string{"ann", "ann", "bob"}},
		{5, []string{"ann", "bob"}},
		{8, []string{"ann", "bob", "cat"}},
		// More runs than GPUs: the GPUs go round too.
		{4, []string{"ann", "bob", "cat", "dan", "eve"}},
		{2, []string{"ann", "ann", "bob"}},
	} {
		for seed := range 6 {
			name := fmt.Sprintf("%d GPUs, runs of %s, seed %d", sc.gpus, strings.Join(sc.users, ","), seed)
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				simulateShare(t, sc.gpus, sc.users, uint64(seed))
			})
		}
	}
}

// simulateShare runs the simulation of TestFairShareSimulated.
func simulateShare(t *testing.T, gpus int, users []string, seed uint64) {
	const shortest, longest = 5, 40 // ms
	jobs := 15 * gpus
	rng := rand.New(rand.NewPCG(seed, uint64(len(users))))
	ids := make([]string, gpus)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	inv := lab("a:" + strings.Join(ids, ","))
	synctest.Test(t, func(t *testing.T) {
		locks := newFakeLocks()
		locks.fair = map[string]int{"a": gpus}
		fakes := make([]*fakeExec, len(users))
		arrive := make([]time.Time, len(users))
		begin := time.Now()
		var wg sync.WaitGroup
		at := time.Duration(0)
		for i := range users {
			at += time.Duration(1+rng.IntN(50)) * time.Millisecond
			var input strings.Builder
			for range jobs {
				fmt.Fprintf(&input, "sleep %dms\n", shortest+rng.IntN(longest-shortest+1))
			}
			f := newFakeExec(inv)
			f.locks, f.user, fakes[i] = locks, users[i], f
			arrive[i] = begin.Add(at)
			wg.Go(func() {
				time.Sleep(time.Until(arrive[i]))
				s, err := Run(context.Background(), Options{Inventory: inv, Executor: f, LogDir: t.TempDir(), Recheck: time.Minute}, []Input{{R: strings.NewReader(input.String())}})
				if err != nil {
					t.Error(err)
					return
				}
				if s.Counts[EventFinished] != jobs {
					t.Errorf("run %d: %+v", i, s.Counts)
				}
			})
		}
		wg.Wait()
		for _, f := range fakes {
			f.check(t)
		}
		if locks.collisions != 0 {
			t.Fatalf("%d times two runs had jobs on one GPU", locks.collisions)
		}
		// Each run's spans; its queue is empty once its last job started.
		lastStart := make([]time.Time, len(users))
		for i, f := range fakes {
			for _, s := range f.spans {
				if s.start.After(lastStart[i]) {
					lastStart[i] = s.start
				}
			}
		}
		longestJob := time.Duration(longest) * time.Millisecond
		from, to := slices.MaxFunc(arrive, time.Time.Compare).Add(longestJob), slices.MinFunc(lastStart, time.Time.Compare)
		if to.Sub(from) < 4*longestJob {
			t.Fatalf("the runs all waited together for %v only: the simulation proves little", to.Sub(from))
		}
		// GPU time in [from, to], by run, against the equal share.
		nruns := map[string]int{}
		for _, u := range users {
			nruns[u]++
		}
		got := make([]time.Duration, len(users))
		var total time.Duration
		for i, f := range fakes {
			for _, s := range f.spans {
				a, b := later(s.start, from), earlier(s.end, to)
				if b.After(a) {
					got[i] += b.Sub(a) * time.Duration(len(s.slots))
					total += b.Sub(a) * time.Duration(len(s.slots))
				}
			}
		}
		for i, u := range users {
			frac := 1 / float64(len(nruns)) / float64(nruns[u])
			want := time.Duration(frac * float64(total))
			share := int(math.Ceil(frac * float64(gpus)))
			switch d := got[i] - want; {
			case d.Abs() > time.Duration(share)*longestJob:
				t.Errorf("run %d (%s) had %v of GPU time while all waited, an equal share is %v (of %v): off by more than one job's length on each of its %d GPUs", i, u, got[i], want, total, share)
			}
		}
		// Idle GPUs while a run had jobs waiting.
		idle := idleWhileWaiting(fakes, arrive, lastStart, gpus)
		if idle > 0 {
			t.Errorf("GPUs stood idle for %v in all while runs had jobs waiting", idle)
		}
	})
}

// A job over two hosts whose part needs more GPUs together than its
// run's share has its turn on each host: the other run, with a queue of
// jobs for longer than the test on both, takes no new job on GPUs it
// frees there, and the job starts once both hosts are drained (the
// longest of the other's jobs at most), before the other's queue is done.
// Without turns for parts it waited for the whole queue.
func TestPartTurnSimulated(t *testing.T) {
	t.Parallel()
	inv := lab("a:0,1 b:0,1")
	synctest.Test(t, func(t *testing.T) {
		inputs := []string{shortJobs(80), "[nodes=2 gpus=2] sleep 20ms\n" + repeat("sleep 20ms", 4)}
		fakes, arrive := sharedRuns(t, inv, map[string]int{"a": 2, "b": 2}, inputs)
		annLast := lastStartOf(fakes[0].spans)
		gang := partsStart(t, fakes[1].spans)
		// Ann's jobs are 40 ms at most, and a share is heard at once here.
		if wait := gang.Sub(arrive[1]); wait > 40*time.Millisecond || !gang.Before(annLast) {
			t.Errorf("bob's job over two hosts started %v after he came, Ann's last job %v after: want it within one of her jobs, before her queue's end", wait, annLast.Sub(arrive[1]))
		}
	})
}

// Two runs' jobs over the same two hosts both start before a third run's
// long queue there ends: each has its turn on both hosts, one after the
// other. (Which has it first goes by when each job began to wait, on
// both hosts alike, so that the two never hold one host each for the
// other: TestFairShareIsLockSh has lines in opposite orders.)
func TestPartTurnsOneAfterTheOther(t *testing.T) {
	t.Parallel()
	inv := lab("a:0,1 b:0,1")
	synctest.Test(t, func(t *testing.T) {
		inputs := []string{
			shortJobs(160),
			"[nodes=2 gpus=2] sleep 20ms\n",
			"[nodes=2 gpus=2] sleep 20ms\n",
		}
		fakes, _ := sharedRuns(t, inv, map[string]int{"a": 2, "b": 2}, inputs)
		annLast := lastStartOf(fakes[0].spans)
		for i, who := range []string{"bob", "cat"} {
			if gang := partsStart(t, fakes[i+1].spans); !gang.Before(annLast) {
				t.Errorf("%s's job over two hosts started at %v, Ann's last job at %v: want it before her queue's end", who, gang.Sub(annLast), annLast)
			}
		}
	})
}

// What a run says it waits for on a host is not a part of a job over
// more hosts than are up for it: that part would hold the host's GPUs,
// through its turn, for hosts that are not there. The next job is said
// instead, and the part again, since the same time, once b is back.
func TestNeedSaysNoPartWhoseHostsAreDown(t *testing.T) {
	t.Parallel()
	s := &scheduler{table: newSlotTable(lab("a:0,1 b:0,1"))}
	s.add(&queued{job: &Job{Seq: 1, Nodes: 2, GPUs: 2}})
	s.add(&queued{job: &Job{Seq: 2, GPUs: 1}})
	a, b := s.table.byName["a"], s.table.byName["b"]
	first := s.needOn(a)
	if !first.Part || first.GPUs != 2 || first.Since.IsZero() {
		t.Fatalf("need on a with both hosts up: %+v, want the part of 2 GPUs, since when it waits", first)
	}
	b.down = true
	if n := s.needOn(a); n.Part || n.GPUs != 1 {
		t.Errorf("need on a with b down: %+v, want the next job's, 1 GPU", n)
	}
	b.down = false
	if n := s.needOn(a); n != first {
		t.Errorf("need on a with b back: %+v, want %+v again", n, first)
	}
}

// partsStart is when the two parts of the one job over two hosts among
// spans started (each part a span of two GPUs of its host).
func partsStart(t *testing.T, spans []span) time.Time {
	t.Helper()
	var parts []span
	for _, sp := range spans {
		if len(sp.slots) == 2 {
			parts = append(parts, sp)
		}
	}
	if len(parts) != 2 || !parts[0].start.Equal(parts[1].start) || parts[0].slots[0][:1] == parts[1].slots[0][:1] {
		t.Fatalf("spans %v: want the two parts of one job over two hosts, started together", spans)
	}
	return parts[0].start
}

// A run whose first job needs every GPU of the host has its turn when it
// is first in the line: the other run, which has a queue of jobs for
// longer than the test, takes no new job on a GPU it frees, the big job
// starts once the GPUs the other run had are free (the longest of its
// jobs at most), and the other run goes on after it. Without turns the
// big job waited until the other's queue was done.
func TestTurnSimulated(t *testing.T) {
	t.Parallel()
	inv := lab("a:0,1,2,3")
	synctest.Test(t, func(t *testing.T) {
		inputs := []string{shortJobs(60), "[gpus=4] sleep 20ms\n"}
		fakes, arrive := sharedRuns(t, inv, map[string]int{"a": 4}, inputs)
		annLast := lastStartOf(fakes[0].spans)
		if len(fakes[1].spans) != 1 {
			t.Fatalf("bob's spans: %v, want his one job", fakes[1].spans)
		}
		big := fakes[1].spans[0]
		// Ann's jobs are 40 ms at most, and a share is heard at once here.
		if wait := big.start.Sub(arrive[1]); wait > 40*time.Millisecond || !big.start.Before(annLast) {
			t.Errorf("bob's job of four GPUs started %v after he came, Ann's last job %v after: want it within one of her jobs, before her queue's end", wait, annLast.Sub(arrive[1]))
		}
	})
}

// Turns alternate: Bob's eight jobs of four GPUs each have their turn in
// Ann's stream of small jobs, all before her queue's end, and while both
// wait Bob has about his equal share of the GPU time (the drains before
// each turn idle the rest): 840 ms against Ann's 1.14 s of 2.4 GPU-s here.
func TestTurnsAlternate(t *testing.T) {
	t.Parallel()
	inv := lab("a:0,1,2,3")
	synctest.Test(t, func(t *testing.T) {
		fakes, arrive := sharedRuns(t, inv, map[string]int{"a": 4}, []string{shortJobs(200), repeat("[gpus=4] sleep 30ms", 8)})
		annLast, bobLast := lastStartOf(fakes[0].spans), lastStartOf(fakes[1].spans)
		if !bobLast.Before(annLast) {
			t.Fatalf("Bob's last job of four GPUs started %v after he came, after Ann's last (%v): his jobs waited for her queue", bobLast.Sub(arrive[1]), annLast.Sub(arrive[1]))
		}
		got := make([]time.Duration, 2)
		for i, f := range fakes {
			for _, s := range f.spans {
				if a, b := later(s.start, arrive[1]), earlier(s.end, bobLast); b.After(a) {
					got[i] += b.Sub(a) * time.Duration(len(s.slots))
				}
			}
		}
		if total := 4 * bobLast.Sub(arrive[1]); got[1] < total/4 || got[0] < total/4 {
			t.Errorf("GPU time while both waited, of %v: Ann %v, Bob %v; want each a quarter at least (half is an equal share)", total, got[0], got[1])
		}
	})
}

// shortJobs is n jobs of 10 to 40 ms, in turn: as they end apart, a run
// that drains them leaves GPUs idle.
func shortJobs(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "sleep %dms\n", 10+i%4*10)
	}
	return b.String()
}

// lastStartOf is when the last of spans started.
func lastStartOf(spans []span) time.Time {
	var last time.Time
	for _, sp := range spans {
		last = later(last, sp.start)
	}
	return last
}

// sharedRuns runs inputs[i] as the run of Ann, Bob, then Cat, from 1 ms,
// 31 ms and 61 ms on, on inv, whose holders say shares of fair GPUs by
// host (in a synctest bubble); it checks that each ran every job, with no
// GPU shared, and returns their executors and when they came.
func sharedRuns(t *testing.T, inv *inventory.Inventory, fair map[string]int, inputs []string) ([]*fakeExec, []time.Time) {
	t.Helper()
	locks := newFakeLocks()
	locks.fair = fair
	fakes := make([]*fakeExec, len(inputs))
	arrive := make([]time.Time, len(inputs))
	begin := time.Now()
	var wg sync.WaitGroup
	for i, user := range []string{"ann", "bob", "cat"}[:len(inputs)] {
		f := newFakeExec(inv)
		f.locks, f.user, fakes[i] = locks, user, f
		arrive[i] = begin.Add(time.Duration(1+30*i) * time.Millisecond)
		wg.Go(func() {
			time.Sleep(time.Until(arrive[i]))
			s, err := Run(context.Background(), Options{Inventory: inv, Executor: f, LogDir: t.TempDir(), Recheck: time.Minute}, []Input{{R: strings.NewReader(inputs[i])}})
			if err != nil || s.Counts[EventFinished] != strings.Count(inputs[i], "\n") {
				t.Errorf("run %d: %v %+v", i, err, s)
			}
		})
	}
	wg.Wait()
	for _, f := range fakes {
		f.check(t)
	}
	return fakes, arrive
}

// later and earlier are the later and the earlier of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// idleWhileWaiting is the GPU time, over the runs' spans, during which
// fewer than gpus GPUs ran a job while a run had jobs waiting (from its
// arrival to its last job's start).
func idleWhileWaiting(fakes []*fakeExec, arrive, lastStart []time.Time, gpus int) time.Duration {
	type edge struct {
		at    time.Time
		busy  int // GPUs that start (+) or stop (-) running a job
		waits int // runs that start (+) or stop (-) waiting
	}
	var edges []edge
	for i, f := range fakes {
		edges = append(edges, edge{at: arrive[i], waits: 1}, edge{at: lastStart[i], waits: -1})
		for _, s := range f.spans {
			edges = append(edges, edge{at: s.start, busy: len(s.slots)}, edge{at: s.end, busy: -len(s.slots)})
		}
	}
	slices.SortStableFunc(edges, func(a, b edge) int { return a.at.Compare(b.at) })
	var idle time.Duration
	busy, waits := 0, 0
	for i, e := range edges {
		if i > 0 && waits > 0 && busy < gpus {
			idle += e.at.Sub(edges[i-1].at) * time.Duration(gpus-busy)
		}
		busy += e.busy
		waits += e.waits
	}
	return idle
}

// A share that changes is taken up at once, not when the run's next job
// on the host ends (hours away, with long jobs): a run held to one of two
// GPUs while its long job runs takes the second for its next job as soon
// as the share is lifted.
func TestShareChangeTakenUpAtOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0,1")
		f := newFakeExec(inv)
		start := time.Now()
		// No share as the first wave starts (one job on each GPU), a share
		// of one from 0.5 s (the short job's GPU goes as it ends, at 1 s),
		// none from 2 s.
		go f.locks.shareAt(start, "a", shareChange{500 * time.Millisecond, 1}, shareChange{2 * time.Second, -1})
		runJobsWith(t, f, Options{Inventory: inv, Executor: f, LogDir: t.TempDir()}, "sleep 10s\nsleep 1s\nsleep 1s\n")
		starts := make([]time.Duration, 0, 3)
		for _, s := range f.spans {
			starts = append(starts, s.start.Sub(start))
		}
		slices.Sort(starts)
		if want := []time.Duration{0, 0, 2 * time.Second}; !slices.Equal(starts, want) {
			t.Errorf("jobs started at %v, want %v (the third as the share is lifted)", starts, want)
		}
	})
}

// The fake holders' fairShare says what lock.sh's share_of says, for the
// same records: a table of cases and random ones, share_of run by bash
// with find(1) answering the records (owner uid, time and name) of the
// case, with records of MIG instances of GPUs the runs hold (a share
// counts GPUs).
func TestFairShareIsLockSh(t *testing.T) {
	t.Parallel()
	code, err := os.ReadFile(filepath.Join("..", "hosts", "gpulock", "lock.sh"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(code)
	var shareOf string
	for _, fn := range []string{"older", "share_of", "split"} {
		begin := strings.Index(text, "\n"+fn+"() {\n")
		if begin < 0 {
			t.Fatalf("no %s in lock.sh", fn)
		}
		end := strings.Index(text[begin+1:], "\n}\n")
		shareOf += text[begin+1 : begin+1+end+3]
	}
	type tcase struct {
		all  int
		runs map[string]fairRun // "me" is the run asked about
	}
	// at is a time of waiting (seconds after a moment); never, none.
	at := func(sec int) time.Time { return time.Unix(1764400000+int64(sec), 0) }
	never := time.Time{}
	cases := []tcase{
		{4, map[string]fairRun{"me": {"ann", 4, never, 1, false, never, false}, "r2": {"ann", 0, at(1), 1, false, never, false}}},
		{4, map[string]fairRun{"me": {"ann", 3, never, 1, false, never, false}, "r2": {"bob", 1, at(1), 1, false, never, false}}},
		{4, map[string]fairRun{"me": {"ann", 2, at(3), 1, false, never, false}, "r2": {"ann", 1, at(1), 1, false, never, false}, "r3": {"bob", 1, at(2), 1, false, never, false}}},
		{4, map[string]fairRun{"me": {"ann", 2, at(1), 1, false, never, false}, "r2": {"ann", 1, at(2), 1, false, never, false}, "r3": {"bob", 1, at(3), 1, false, never, false}}},
		{4, map[string]fairRun{"me": {"ann", 2, at(1), 1, false, never, false}, "r2": {"ann", 1, at(1), 1, false, never, false}, "r3": {"bob", 1, at(1), 1, false, never, false}}},
		{4, map[string]fairRun{"me": {"ann", 2, never, 1, false, never, false}, "r2": {"bob", 2, at(1), 1, false, never, false}}},
		{2, map[string]fairRun{"me": {"ann", 2, never, 1, false, never, false}, "r2": {"bob", 0, at(1), 1, false, never, false}, "r3": {"cat", 0, at(2), 1, false, never, false}, "r4": {"dan", 0, at(3), 1, false, never, false}}},
		{8, map[string]fairRun{"me": {"bob", 5, never, 1, false, never, false}, "r2": {"ann", 1, at(1), 1, false, never, false}, "r3": {"ann", 1, at(2), 1, false, never, false}, "r4": {"ann", 1, at(3), 1, false, never, false}}},
		// A run whose first job needs more than its share waits with none.
		{4, map[string]fairRun{"me": {"ann", 2, at(1), 1, false, never, false}, "r2": {"bob", 0, at(2), 4, false, never, false}}},
		{4, map[string]fairRun{"me": {"ann", 2, never, 1, false, never, false}, "r2": {"bob", 0, at(1), 3, false, never, false}, "r3": {"cat", 0, at(2), 1, false, never, false}}},
		{4, map[string]fairRun{"me": {"ann", 2, at(2), 2, false, never, false}, "r2": {"bob", 2, at(1), 2, false, never, false}}},
		// Unless it is the first in the line: its turn, the others share
		// the rest (a part of a job over several hosts too); not for more
		// GPUs than the host has.
		{4, map[string]fairRun{"me": {"ann", 4, never, 1, false, never, false}, "r2": {"bob", 0, at(1), 4, false, never, false}}},
		{4, map[string]fairRun{"me": {"ann", 4, never, 1, false, never, false}, "r2": {"bob", 0, at(1), 4, true, never, false}}},
		{4, map[string]fairRun{"me": {"ann", 2, at(2), 1, false, never, false}, "r2": {"bob", 0, at(1), 3, false, never, false}, "r3": {"cat", 1, never, 1, false, never, false}}},
		{4, map[string]fairRun{"me": {"ann", 2, at(2), 1, false, never, false}, "r2": {"bob", 2, at(1), 1, false, never, false}, "r3": {"cat", 0, at(3), 4, false, never, false}}},
		{2, map[string]fairRun{"me": {"ann", 2, never, 1, false, never, false}, "r2": {"bob", 0, at(1), 3, false, never, false}}},
		{4, map[string]fairRun{"me": {"ann", 1, at(1), 4, false, never, false}, "r2": {"bob", 3, at(2), 1, false, never, false}}},
		// Between parts of jobs over several hosts, the turn is the one
		// whose job began to wait first, wherever it is in the line: the
		// same on two hosts whose lines are in opposite orders.
		{4, map[string]fairRun{"me": {"ann", 4, never, 1, false, never, false}, "r2": {"bob", 0, at(1), 4, true, at(5), false}, "r3": {"cat", 0, at(2), 4, true, at(3), false}}},
		{4, map[string]fairRun{"me": {"ann", 4, never, 1, false, never, false}, "r2": {"bob", 0, at(2), 4, true, at(5), false}, "r3": {"cat", 0, at(1), 4, true, at(3), false}}},
		{4, map[string]fairRun{"me": {"ann", 4, never, 1, false, never, false}, "r2": {"bob", 0, at(1), 4, true, at(3), false}, "r3": {"cat", 0, at(2), 4, true, at(3), false}}},
		// A parked part keeps its GPUs, out of the line: the next turn
		// is had on the others.
		{8, map[string]fairRun{"me": {"ann", 4, at(3), 1, false, never, false}, "r2": {"bob", 4, at(1), 4, true, at(2), true}, "r3": {"cat", 0, at(2), 4, true, at(5), false}}},
		{8, map[string]fairRun{"me": {"ann", 4, at(3), 1, false, never, false}, "r2": {"bob", 4, at(1), 4, true, at(2), true}}},
		// It gives them up for a part whose job waits longer and needs
		// them; not for one whose job waits less.
		{8, map[string]fairRun{"me": {"ann", 2, never, 1, false, never, false}, "r2": {"bob", 4, at(1), 4, true, at(5), true}, "r3": {"cat", 0, at(2), 8, true, at(3), false}}},
		{8, map[string]fairRun{"me": {"ann", 2, never, 1, false, never, false}, "r2": {"bob", 4, at(1), 4, true, at(1), true}, "r3": {"cat", 0, at(2), 8, true, at(3), false}}},
		{8, map[string]fairRun{"me": {"ann", 2, never, 1, false, never, false}, "r2": {"bob", 4, at(1), 4, true, at(5), true}, "r3": {"cat", 0, at(2), 4, true, at(3), false}}},
		// A first in the line whose job parked parts leave too few GPUs
		// lets a part have the turn, for which they give them up.
		{6, map[string]fairRun{"me": {"ann", 2, never, 1, false, never, false}, "r2": {"bob", 4, at(1), 4, true, at(5), true}, "r3": {"cat", 0, at(1), 3, false, never, false}, "r4": {"dan", 0, at(2), 4, true, at(3), false}}},
	}
	rng := rand.New(rand.NewPCG(7, 7))
	users := []string{"ann", "bob", "cat"}
	for range 120 {
		c := tcase{all: 1 + rng.IntN(8), runs: map[string]fairRun{}}
		left := c.all
		for i := range 1 + rng.IntN(4) {
			name := "me"
			if i > 0 {
				name = fmt.Sprint("r", i+1)
			}
			holds := rng.IntN(left + 1)
			if name == "me" {
				holds = max(holds, 1) // a holder looks only while it holds a lock
			}
			left -= holds
			r := fairRun{users[rng.IntN(len(users))], holds, never, 1, false, never, false}
			if rng.IntN(2) == 0 {
				r.since = at(rng.IntN(3)) // ties too
				r.need = 1 + rng.IntN(4)
				r.part = rng.IntN(4) == 0
				if r.part {
					r.key = at(rng.IntN(3))
					r.parked = rng.IntN(2) == 0 && r.holds >= r.need
				}
			}
			if r.holds > 0 || !r.since.IsZero() { // else it has no record: no run
				c.runs[name] = r
			}
		}
		if c.runs["me"].holds > 0 {
			cases = append(cases, c)
		}
	}
	for _, c := range cases {
		// Owners as uids: the user of "me" is this process's; the others
		// get uids of their own.
		uid := map[string]string{c.runs["me"].user: strconv.Itoa(os.Geteuid())}
		for _, k := range slices.Sorted(maps.Keys(c.runs)) {
			if _, ok := uid[c.runs[k].user]; !ok {
				uid[c.runs[k].user] = strconv.Itoa(50000 + len(uid))
			}
		}
		var keys, recs []string
		key := 0
		others := false
		for _, k := range slices.Sorted(maps.Keys(c.runs)) {
			r := c.runs[k]
			for i := range r.holds {
				keys = append(keys, fmt.Sprint("GPU-", key))
				held := fmt.Sprintf("%s 1764300000.0000000000 gpudispatch-held-GPU-%d", uid[r.user], key)
				recs = append(recs, fmt.Sprintf("%s~$$~%s~%s@lab", held, k, r.user))
				if i == 0 && key%2 == 0 {
					// Two MIG instances of a GPU it holds: still that GPU.
					recs = append(recs, fmt.Sprintf("%s-mig1~$$~%s~%s@lab", held, k, r.user), fmt.Sprintf("%s-mig2~$$~%s~%s@lab", held, k, r.user))
				}
				key++
			}
			if !r.since.IsZero() {
				others = others || k != "me"
				want := fmt.Sprintf("%s %d.0000000000 gpudispatch-want-host~$$~%s~%s@lab", uid[r.user], r.since.Unix(), k, r.user)
				if r.need > 1 || k == "r2" || r.part {
					want += fmt.Sprint("~", r.need) // without: 1, as an older holder's
				}
				if r.part {
					want += fmt.Sprint("p~", r.key.UnixMicro())
				}
				if r.parked {
					want += "~parked"
				}
				recs = append(recs, want)
			}
		}
		for ; key < c.all; key++ {
			keys = append(keys, fmt.Sprint("GPU-", key))
		}
		// Here the records are what the locks say: a parked part's user
		// holds its GPUs (lock.sh's locked_for looks at its locks).
		script := "declare -A keys=() kowners=() barred=()\nfor k in " + strings.Join(keys, " ") + "; do keys[$k]=1; done\n" +
			"locked_for() { :; }\n" +
			"keyless='' here=host run=me pdir=/nonexistent why=''\n" +
			"find() { printf '%s\\n' " + strings.Join(quoteAll(recs), " ") + "; }\n" +
			shareOf + "share_of\nprintf '%s\\n%s\\n' \"$share\" \"$why\"\n"
		out, err := exec.Command("bash", "-c", script).CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		wantN, wantWho, _ := fairShare(c.all, c.runs, "me")
		if !others {
			wantN, wantWho = -1, "" // a holder looks only when another run's record of waiting is there
		}
		got, gotWho, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		if got == "-" {
			got, gotWho = "-1", ""
		}
		if got != strconv.Itoa(wantN) || waiters(gotWho) != waiters(wantWho) {
			t.Errorf("%d GPUs, runs %+v: lock.sh says share %s, %q waits; fairShare %d, %q", c.all, c.runs, got, gotWho, wantN, wantWho)
		}
	}
}

// waiters is who waits, as a holder says it, in order and without the
// users' names (lock.sh says user@host): each run, the GPUs it holds,
// and whether it is the run whose turn it is.
func waiters(why string) string {
	runs := strings.Split(regexp.MustCompile(`run (\S+) of \S+ waits`).ReplaceAllString(why, "run $1 waits"), ", ")
	slices.Sort(runs)
	return strings.Join(runs, ", ")
}

// quoteAll quotes each of s for bash, keeping $$ expanded.
func quoteAll(s []string) []string {
	q := make([]string, len(s))
	for i, x := range s {
		q[i] = `"` + x + `"`
	}
	return q
}

// A share counts GPUs, whatever the run has on them: MIG instances of one
// GPU count once, as jobs packed on one GPU do; held to its share, a run
// still starts jobs on instances of the GPUs it uses, never on another GPU.
func TestShareCountsGPUsNotInstances(t *testing.T) {
	t.Parallel()
	mig := func(g, d int) *gpu { return &gpu{id: executor.MIGID(g, d), cap: 1} }
	for _, tt := range []struct {
		name  string
		share int
		gpus  []*gpu
		busy  []int // indexes of gpus with a job
		over  bool
		takes []int // indexes of the GPUs a new job may go to when over
	}{
		{"two instances of GPU 0 busy, a share of one", 1, []*gpu{mig(0, 1), mig(0, 2), mig(0, 3), {id: 1, cap: 1}}, []int{0, 1}, true, []int{2}},
		{"two instances of GPU 0 busy, a share of two", 2, []*gpu{mig(0, 1), mig(0, 2), mig(0, 3), {id: 1, cap: 1}}, []int{0, 1}, false, nil},
		{"an instance of each GPU busy, a share of two", 2, []*gpu{mig(0, 1), mig(1, 1), mig(1, 2), {id: 2, cap: 1}}, []int{0, 1}, true, []int{2}},
		{"whole GPUs, a share of one", 1, []*gpu{{id: 0, cap: 1}, {id: 1, cap: 1}}, []int{0}, true, nil},
	} {
		h := &hostSlots{share: tt.share, gpus: tt.gpus}
		for _, i := range tt.busy {
			tt.gpus[i].used = 1
		}
		if got := h.overShare(); got != tt.over {
			t.Errorf("%s: over its share %v, want %v", tt.name, got, tt.over)
		}
		if !tt.over {
			continue
		}
		var takes []int
		for i, g := range tt.gpus {
			if g.used == 0 && h.inUse(g, nil) {
				takes = append(takes, i)
			}
		}
		if !slices.Equal(takes, tt.takes) {
			t.Errorf("%s: a new job may go to %v, want %v", tt.name, takes, tt.takes)
		}
	}
}

// A share of none (more runs than GPUs, and others first in the line)
// holds the run off a host, also once it holds no lock there; the host's
// holder still tells it its share, and when it changes, so that the run
// takes its turn.
func TestShareOfNone(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0")
		f := newFakeExec(inv)
		start := time.Now()
		go f.locks.shareAt(start, "a", shareChange{500 * time.Millisecond, 0}, shareChange{3 * time.Second, -1})
		// A minute (of virtual time) at most: a run that never hears the
		// share lifted would wait for ever.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s, err := Run(ctx, Options{Inventory: inv, Executor: f, LogDir: t.TempDir()}, []Input{{R: strings.NewReader("sleep 1s\nsleep 1s\n")}})
		if err != nil {
			t.Fatal(err)
		}
		var starts []time.Duration
		for _, s := range f.spans {
			starts = append(starts, s.start.Sub(start))
		}
		slices.Sort(starts)
		if want := []time.Duration{0, 3 * time.Second}; s.Counts[EventFinished] != 2 || !slices.Equal(starts, want) {
			t.Errorf("jobs started at %v (%d finished), want %v (the second once the share of none is lifted)", starts, s.Counts[EventFinished], want)
		}
	})
}

// shareChange is a share a test's holders say from a time on (-1: none).
type shareChange struct {
	at time.Duration
	n  int
}

// shareAt has host's holders say each change's share from its time on,
// counted from start (shares).
func (l *fakeLocks) shareAt(start time.Time, host string, changes ...shareChange) {
	for _, c := range changes {
		time.Sleep(time.Until(start.Add(c.at)))
		l.mu.Lock()
		if c.n < 0 {
			delete(l.shares, host)
		} else {
			l.shares[host] = c.n
		}
		l.touch(host)
		l.mu.Unlock()
	}
}

// --max-gpus counts GPUs, whatever the run has on them: the MIG instances
// of one GPU count once, so a cap of two GPUs runs a job on each of GPU
// 0's four instances and one on another GPU, never on all three GPUs.
func TestMaxGPUsCountsGPUs(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0,1,2")
		f := newFakeExec(inv)
		f.usage["a"] = append(h100MIG(), executor.GPU{Index: 2, UUID: "GPU-2", Name: "NVIDIA H100 80GB HBM3", MemoryTotalMB: 81559})
		_, s := runJobsWith(t, f, Options{Inventory: inv, Executor: f, LogDir: t.TempDir(), MaxGPUs: 2, Recheck: time.Hour}, repeat("sleep 10ms", 30))
		if s.Counts[EventFinished] != 30 {
			t.Fatalf("summary %+v", s)
		}
		// At each job's start, the GPUs with a job.
		for _, a := range f.spans {
			busy := map[string]bool{}
			for _, b := range f.spans {
				if !b.start.After(a.start) && b.end.After(a.start) {
					for _, slot := range b.slots {
						_, id, _ := strings.Cut(slot, ":")
						gpu, _, _ := strings.Cut(id, ":")
						busy[gpu] = true
					}
				}
			}
			if len(busy) > 2 {
				t.Fatalf("GPUs %v busy at once, past --max-gpus 2", slices.Sorted(maps.Keys(busy)))
			}
		}
		if f.peakTotal < 3 {
			t.Errorf("at most %d jobs at once: the instances of one GPU were counted as GPUs", f.peakTotal)
		}
	})
}
