package dispatch

import (
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// Every slot gets used, all of them at once, and none ever runs more jobs
// than it has slots.
func TestEverySlotUsedNoneOverbooked(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0,1 b:0,0,1")
		inv.Hosts[0].SlotsPerGPU = 2 // a: 2 slots on each GPU
		f, s := runJobs(t, inv, repeat("sleep 15ms", 80), nil)
		if s.Counts[EventFinished] != 80 {
			t.Fatalf("summary %+v", s)
		}
		want := map[string]int{"a:0": 2, "a:1": 2, "b:0": 2, "b:1": 1}
		for slot, n := range want {
			if f.peak[slot] != n {
				t.Errorf("%s: at most %d jobs at once, want %d", slot, f.peak[slot], n)
			}
		}
		if f.peakTotal != 7 {
			t.Errorf("at most %d jobs at once, want all 7 slots busy", f.peakTotal)
		}
	})
}

func TestPinsAndMultiGPU(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0,1,2,3 b:0,1")
		input := repeat("@a:2 sleep 6ms", 5) + repeat("@b sleep 7ms", 5) + repeat("[gpus=3] sleep 5ms", 3) +
			repeat("[host=b gpus=2] sleep 4ms", 2) + repeat("sleep 5ms", 10)
		f, s := runJobs(t, inv, input, nil)
		if s.Counts[EventFinished] != 25 {
			t.Fatalf("summary %+v", s)
		}
		for _, st := range f.starts {
			if envValue(st.env, "GPUDISPATCH_HOST") != st.host {
				t.Errorf("GPUDISPATCH_HOST=%s on %s", envValue(st.env, "GPUDISPATCH_HOST"), st.host)
			}
			if envValue(st.env, "CUDA_DEVICE_ORDER") != "PCI_BUS_ID" {
				t.Errorf("CUDA_DEVICE_ORDER missing: %v", st.env)
			}
		}
		starts := f.starts
		for _, st := range starts {
			ids := strings.Split(st.gpus, ",")
			if len(ids) != len(slices.Compact(slices.Sorted(slices.Values(ids)))) {
				t.Errorf("job got the same GPU twice: %s", st.gpus)
			}
		}
		count := func(pred func(start) bool) int {
			c := 0
			for _, st := range starts {
				if pred(st) {
					c++
				}
			}
			return c
		}
		if c := count(func(st start) bool { return st.command == "sleep 6ms" && st.host == "a" && st.gpus == "2" }); c != 5 {
			t.Errorf("%d of the 5 jobs pinned to a:2 ran there", c)
		}
		if c := count(func(st start) bool { return st.command == "sleep 7ms" && st.host == "b" }); c != 5 {
			t.Errorf("%d of the 5 jobs pinned to b ran there", c)
		}
		if c := count(func(st start) bool { return len(strings.Split(st.gpus, ",")) == 3 && st.host == "a" }); c != 3 {
			t.Errorf("%d 3-GPU jobs on host a, want 3 (only a has 3 GPUs)", c)
		}
		if c := count(func(st start) bool {
			return st.command == "sleep 4ms" && st.host == "b" && len(strings.Split(st.gpus, ",")) == 2
		}); c != 2 {
			t.Errorf("%d 2-GPU jobs pinned to b ran there on 2 GPUs, want 2", c)
		}
	})
}

// The pinned prefix is stripped: check the commands the executor saw.
func TestPinnedJobsRunWherePinned(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0,1 b:0,1")
		f, _ := runJobs(t, inv, "@a:1 exit 0\n@b exit 0\n[host=a gpu=0] exit 0\n", nil)
		got := map[string]bool{}
		for _, st := range f.starts {
			got[st.host+":"+st.gpus] = true
		}
		if !got["a:1"] || !got["a:0"] || !(got["b:0"] || got["b:1"]) || len(f.starts) != 3 {
			t.Errorf("starts: %+v", f.starts)
		}
	})
}

// A 2-GPU job behind a stream of 1-GPU jobs is not starved: once it is the
// oldest waiting job, GPUs are held for it as they free up, so no job that
// came after it starts before it.
func TestNoStarvationOfMultiGPUJob(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0,1")
		input := "sleep 30ms\nsleep 60ms\n[name=big gpus=2] sleep 5ms\n" + repeat("sleep 10ms", 30)
		f, s := runJobs(t, inv, input, nil)
		if s.Counts[EventFinished] != 33 {
			t.Fatalf("summary %+v", s)
		}
		bigAt := -1
		for i, st := range f.starts {
			if st.command == "sleep 5ms" {
				bigAt = i
			}
		}
		if bigAt != 2 {
			t.Fatalf("the 2-GPU job started as start #%d, want #2 (right after the two jobs before it)", bigAt)
		}
	})
}

// A job pinned to a busy host does not block jobs behind it that can run
// elsewhere, and is not starved by them.
func TestPinnedJobNeitherBlocksNorStarves(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0 b:0")
		// Job 1 must outlast the reading of the input, even on a loaded machine.
		input := "@a sleep 1s\n@a exit 0\n" + repeat("sleep 10ms", 10)
		f, _ := runJobs(t, inv, input, nil)
		var order []string
		for _, st := range f.starts {
			order = append(order, st.host+" "+st.command)
		}
		// Job 2 waits for a; jobs 3.. run on b meanwhile; no later job takes a
		// before job 2. The first two start together (each locks its GPU first),
		// in either order.
		if first := []string{order[0], order[1]}; !slices.Contains(first, "a sleep 1s") || !slices.Contains(first, "b sleep 10ms") {
			t.Fatalf("order: %q", order)
		}
		for _, o := range order {
			if o == "a exit 0" {
				break
			}
			if strings.HasPrefix(o, "a sleep 10ms") {
				t.Fatalf("a later job took host a before the pinned one: %q", order)
			}
		}
	})
}

func TestRejectsImpossibleJobs(t *testing.T) {
	t.Parallel()
	inv := lab("a:0,1 b:0")
	f, s := runJobs(t, inv, "@c exit 0\n@a:5 exit 0\n[gpus=3] exit 0\n[host=b gpus=2] exit 0\n[gpu=0] exit 0\nexit 0\n", nil)
	if s.Counts[EventRejected] != 5 || s.Counts[EventFinished] != 1 || len(f.starts) != 1 {
		t.Fatalf("summary %+v, starts %d", s, len(f.starts))
	}
	var msgs []string
	for _, e := range s.Unsuccessful {
		msgs = append(msgs, fmt.Sprintf("%s: %s", e.Source, e.Error))
	}
	want := []string{
		`jobs:1: unknown host "c" (hosts: a, b)`,
		`jobs:2: host a has no GPU 5 (its GPUs: 0,1)`,
		`jobs:3: gpus=3: no host has that many GPUs (the most is 2)`,
		`jobs:4: gpus=2: host b has only 1 GPUs`,
		`jobs:5: gpu=0 without a host: say which host too (@HOST:0)`,
	}
	if !slices.Equal(msgs, want) {
		t.Errorf("rejections:\n got %q\nwant %q", msgs, want)
	}
}

// freeSlots stays exactly the number of slots a job could be given, through
// any mix of starts, ends, hosts going down and up, GPUs set aside, looks
// at what others use, and inventory edits.
func TestFreeSlotsStaysExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	invs := []*inventory.Inventory{lab("a:0,1,1 b:0,1 c:3"), lab("a:0,1 b:0,1,2 d:0"), lab("b:0 c:3,4")}
	table := newSlotTable(invs[0])
	var running []placement
	exact := func() int {
		n := 0
		for _, h := range table.hosts {
			for _, g := range h.gpus {
				if !h.down && g.open() && !h.unseen && (g.others == "" || table.unseenUp == 0) {
					n += max(g.cap-g.used, 0)
				}
			}
		}
		return n
	}
	for step := range 20000 {
		h := table.hosts[rng.IntN(len(table.hosts))]
		switch op := rng.IntN(8); {
		case op == 0 || op == 1:
			if p, ok := table.place(&Job{GPU: -1, GPUs: 1 + rng.IntN(2)}, held{}); ok {
				table.take(p)
				running = append(running, p)
			}
		case op == 2 && len(running) > 0:
			i := rng.IntN(len(running))
			table.release(running[i])
			running = append(running[:i], running[i+1:]...)
		case op == 3:
			if h.down {
				table.setUp(h)
			} else {
				table.setDown(h, "gone", time.Now())
			}
		case op == 4 && len(h.gpus) > 0:
			g := h.gpus[rng.IntN(len(h.gpus))]
			table.setBlocked(g, func() { g.claiming = !g.claiming })
		case op == 5 && rng.IntN(20) == 0:
			table.update(invs[rng.IntN(len(invs))])
		case op == 6:
			table.setUnseen(h, !h.unseen)
		case op == 7 && len(h.gpus) > 0:
			// Others' work comes and goes (usage.go).
			g := h.gpus[rng.IntN(len(h.gpus))]
			table.setBlocked(g, func() {
				g.others = ""
				if rng.IntN(2) == 0 {
					g.others = "busy"
				}
			})
		}
		if got, want := table.freeSlots, exact(); got != want {
			t.Fatalf("step %d: freeSlots %d, want %d", step, got, want)
		}
	}
}

// A job of higher priority overtakes the jobs waiting before it; equal
// priorities keep their arrival order.
func TestPriorityOvertakes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0")
		// Job 1 holds the only slot while the rest waits (all of the input is
		// read before it ends: the time of the run is virtual).
		input := "[priority=9] sleep 300ms\n" + repeat("exit 0", 5) + "[priority=1 name=p1] exit 1\n[priority=2 name=p2] exit 2\n[priority=-1 name=low] exit 3\n[priority=1 name=p1b] exit 4\n"
		f, s := runJobs(t, inv, input, nil)
		if s.Counts[EventFinished]+s.Counts[EventFailed] != 10 {
			t.Fatalf("summary %+v", s)
		}
		var order []string
		for _, st := range f.starts {
			order = append(order, st.command)
		}
		want := []string{"sleep 300ms", "exit 2", "exit 1", "exit 4", "exit 0", "exit 0", "exit 0", "exit 0", "exit 0", "exit 3"}
		if !slices.Equal(order, want) {
			t.Errorf("start order:\n got %q\nwant %q", order, want)
		}
	})
}

// prefer= places a job where it asks when that place is free, else
// anywhere; a preference for a place that does not exist is rejected.
func TestPrefer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0,1 b:0,1")
		f := newFakeExec(inv)
		w, done := startRun(t, Options{Inventory: inv, Executor: f, LogDir: t.TempDir()})
		// Once a job ran on each host, both hosts' GPUs are known.
		io.WriteString(w, "@b:1 sleep 300ms\n@a:1 exit 0\n")
		synctest.Wait() // no time passes: the run waits for input, job 1 for its end
		if n := f.started(); n != 2 {
			t.Fatalf("%d of the first two jobs started", n)
		}
		io.WriteString(w, "[prefer=a:1] sleep 100ms\n[prefer=b:1] exit 0\n[prefer=b] exit 0\n[prefer=c] exit 0\n[prefer=a:7] exit 0\n@a [prefer=b] exit 0\n")
		w.Close()
		s := <-done
		got := map[string]string{}
		for _, st := range f.starts {
			got[envValue(st.env, "GPUDISPATCH_JOB_ID")] = st.host + ":" + st.gpus
		}
		if got["3"] != "a:1" {
			t.Errorf("job 3 preferring a:1 (free) ran on %s", got["3"])
		}
		if got["4"] == "b:1" || got["4"] == "" {
			t.Errorf("job 4 preferring b:1 (busy) ran on %q, want elsewhere at once", got["4"])
		}
		if got["5"] != "b:0" {
			t.Errorf("job 5 preferring b (b:0 free) ran on %s", got["5"])
		}
		var msgs []string
		for _, e := range s.Unsuccessful {
			msgs = append(msgs, e.Source+": "+e.Error)
		}
		want := []string{
			`line 6: prefer=c: unknown host (hosts: a, b)`,
			`line 7: prefer=a:7: host a has no GPU 7 (its GPUs: 0,1)`,
			`line 8: prefer=b: the job is pinned to host a`,
		}
		if !slices.Equal(msgs, want) {
			t.Errorf("rejections:\n got %q\nwant %q", msgs, want)
		}
	})
}

// FuzzNoJobWaitsForever drives the scheduler with jobs of every kind (pins,
// several GPUs, priorities, preferences, memory, GPU models and sizes,
// tags) arriving between random ends of running jobs, on hosts some of
// whose GPU 0 is split into MIG instances, and that go down and come back.
// Whatever the order, a pass that leaves jobs waiting while nothing runs
// and every host is up is a job waiting forever; no job lands on a host
// that is down or on a GPU it did not ask for; once input ends every job
// must have started.
func FuzzNoJobWaitsForever(f *testing.F) {
	for _, seed := range []uint64{1, 2, 3, 42, 1234, 99999} {
		f.Add(seed, uint8(40))
	}
	f.Fuzz(func(t *testing.T, seed uint64, n uint8) {
		rng := rand.New(rand.NewPCG(seed, seed>>7))
		var spec []string
		for h := range 1 + rng.IntN(3) {
			var ids []string
			for g := range 1 + rng.IntN(4) {
				ids = append(ids, strconv.Itoa(g))
			}
			spec = append(spec, fmt.Sprintf("h%d:%s", h, strings.Join(ids, ",")))
		}
		inv := lab(strings.Join(spec, " "))
		for i := range inv.Hosts {
			inv.Hosts[i].SlotsPerGPU = 1 + rng.IntN(2)
			// GPU memory budgets: some hosts cap the jobs per GPU.
			inv.Hosts[i].MemoryMB = 8192 * (1 + rng.IntN(10))
			inv.Hosts[i].ReserveMB = 1024
			inv.Hosts[i].MaxPerGPU = rng.IntN(3)
		}
		models := []string{"NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090"}
		tags := []string{"nvlink", "ib"}
		for i := range inv.Hosts {
			if rng.IntN(2) == 0 {
				inv.Hosts[i].Tags = []string{tags[rng.IntN(len(tags))]}
			}
		}
		s := &scheduler{table: newSlotTable(inv)}
		// What the looks say of each GPU (kind.go): mixed models and sizes.
		for _, h := range s.table.hosts {
			h.looked = true
			for _, g := range h.gpus {
				g.setKind(models[rng.IntN(len(models))], []int{24576, 81920}[rng.IntN(2)])
			}
			// Some hosts' GPU 0 is split into MIG instances (mig.go).
			if rng.IntN(3) == 0 {
				seen := map[int]executor.GPU{}
				for _, g := range h.gpus {
					seen[int(g.id)] = executor.GPU{Index: int(g.id), Name: g.model, MemoryTotalMB: g.vramMB}
				}
				for d := range 1 + rng.IntN(4) {
					gb := []int{10, 20, 40}[rng.IntN(3)]
					seen[0] = executor.GPU{Index: 0, Name: seen[0].Name, MemoryTotalMB: seen[0].MemoryTotalMB,
						MIG: append(seen[0].MIG, executor.MIGInstance{Device: d, Profile: fmt.Sprintf("%dg.%dgb", 1+d, gb), UUID: fmt.Sprintf("MIG-%s-%d", h.host.Name, d), MemoryMB: gb * 1024})}
				}
				s.table.migSlots(h, seen)
			}
		}
		var running []assignment
		started := map[int]bool{}
		admitted := 0
		pick := func() (string, int) {
			h := inv.Hosts[rng.IntN(len(inv.Hosts))]
			return h.Name, h.GPUs[rng.IntN(len(h.GPUs))]
		}
		// Hosts come and go while jobs arrive; all are up once the input
		// ends (the run's host-down timeout is not modelled here).
		allUp := func() {
			for _, h := range s.table.hosts {
				s.table.setUp(h)
			}
		}
		for seq := 1; seq <= int(n) || len(s.waiting) > 0 || len(running) > 0; {
			if seq <= int(n) && rng.IntN(8) == 0 {
				h := s.table.hosts[rng.IntN(len(s.table.hosts))]
				if h.down {
					s.table.setUp(h)
				} else {
					s.table.setDown(h, "fuzz", time.Time{})
				}
			}
			if seq > int(n) {
				allUp()
			}
			if seq <= int(n) && (rng.IntN(2) == 0 || len(running) == 0) {
				j := &Job{Seq: seq, GPU: -1, GPUs: 1 + rng.IntN(3), PreferGPU: -1, Priority: rng.IntN(3) - 1}
				switch rng.IntN(4) {
				case 0:
					j.Host, j.GPU = pick()
					j.GPUs = 1
				case 1:
					j.Host, _ = pick()
				}
				if rng.IntN(3) == 0 {
					j.Prefer, j.PreferGPU = pick()
				}
				if rng.IntN(3) == 0 {
					j.MemMB = 1024 * (1 + rng.IntN(40))
				}
				if j.Host == "" && rng.IntN(5) == 0 {
					// A job over several hosts.
					j.Nodes, j.Prefer, j.PreferGPU, j.MemMB = 2+rng.IntN(2), "", -1, 0
				}
				switch rng.IntN(6) {
				case 0:
					j.Models = []string{[]string{"a100", "H100", "4090", "H200", "1g.", "MIG"}[rng.IntN(6)]}
				case 1:
					j.VRAMMB = []int{16384, 40960, 90000}[rng.IntN(3)]
				case 2:
					j.Tags = []string{[]string{"nvlink", "ib", "fast"}[rng.IntN(3)]}
				}
				seq++
				if s.table.check(j) != nil || s.table.checkPrefer(j) != nil || s.table.checkMemory(j) != nil {
					continue // rejected as it arrives
				}
				if _, err := s.table.checkKind(j); err != nil {
					continue // no GPU of the lab is of its kind
				}
				s.add(&queued{job: j})
				admitted++
			} else if len(running) > 0 {
				i := rng.IntN(len(running))
				s.table.release(running[i].p)
				running = slices.Delete(running, i, i+1)
			}
			for _, a := range s.next() {
				if started[a.q.job.Seq] {
					t.Fatalf("job %d started twice", a.q.job.Seq)
				}
				if a.p.host.down {
					t.Fatalf("job %+v placed on %s, which is down", *a.q.job, a.p.host.host.Name)
				}
				parts := a.p.parts()
				if n := max(a.q.job.Nodes, 1); len(parts) != n {
					t.Fatalf("job %+v placed on %s: %d hosts, want %d", *a.q.job, a.p, len(parts), n)
				}
				for i, pt := range parts {
					if pt.host.down || slices.ContainsFunc(parts[:i], func(o placement) bool { return o.host == pt.host }) {
						t.Fatalf("job %+v placed on %s: %s is down or has two parts", *a.q.job, a.p, pt.host.host.Name)
					}
					for _, g := range pt.gpus {
						if !g.mayRun(a.q.job) || !pt.host.tagged(a.q.job) || g.split || g.mig != "" && len(pt.gpus) > 1 || len(pt.gpus) != pt.host.need(a.q.job) {
							t.Fatalf("job %+v placed on %s:%s of %d, a %s of %d MiB with tags %v", *a.q.job, pt.host.host.Name, g.id, len(pt.gpus), g.model, g.vramMB, pt.host.host.Tags)
						}
					}
				}
				started[a.q.job.Seq] = true
				running = append(running, a)
			}
			if len(running) == 0 && len(s.waiting) > 0 {
				if slices.ContainsFunc(s.table.hosts, func(h *hostSlots) bool { return h.down }) {
					allUp() // they wait for the hosts that are down
					continue
				}
				t.Fatalf("nothing runs and %d jobs wait, the first %+v, on %v", len(s.waiting), *s.waiting[0].job, spec)
			}
			for _, h := range s.table.hosts {
				for _, g := range h.gpus {
					if g.memUsed > g.budget() || g.used > 0 && g.memJobs > 0 || h.host.MaxPerGPU > 0 && g.memJobs > h.host.MaxPerGPU {
						t.Fatalf("%s:%s: %d MiB declared of %d, %d jobs in slots and %d declaring memory (max %d)", h.host.Name, g.id, g.memUsed, g.budget(), g.used, g.memJobs, h.host.MaxPerGPU)
					}
				}
			}
		}
		if len(started) != admitted {
			t.Fatalf("%d of %d jobs started", len(started), admitted)
		}
	})
}
