package dispatch

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// memLab is one host with two 80 GB GPUs (81,920 MiB, as its nvidia-smi
// says), one slot each, the default reserve.
func memLab() *fakeExec {
	inv := lab("a:0,1")
	inv.Hosts[0].ReserveMB = 1024
	return newFakeExec(inv)
}

// peakDeclared is, per GPU, the most memory declared at once by the jobs
// running there, from the journal's start and end times, and the most of
// them at once.
func peakDeclared(t *testing.T, events []Event, mem map[string]int) (peakMB, peakJobs map[int]int) {
	t.Helper()
	type edge struct {
		at    time.Time
		gpu   int
		mb    int
		start int // +1 or -1
	}
	var edges []edge
	starts := map[string]Event{}
	for _, e := range events {
		switch {
		case e.Event == EventStarted:
			starts[e.Job] = e
		case e.JobState() != "" && Ended(e.JobState()) && e.End != nil:
			s := starts[e.Job]
			for _, g := range s.GPUs {
				edges = append(edges, edge{*s.Start, int(g), mem[e.Job], 1}, edge{*e.End, int(g), -mem[e.Job], -1})
			}
		}
	}
	// Ends before starts at the same instant: a slot freed is reused.
	sort.SliceStable(edges, func(a, b int) bool {
		if !edges[a].at.Equal(edges[b].at) {
			return edges[a].at.Before(edges[b].at)
		}
		return edges[a].start < edges[b].start
	})
	peakMB, peakJobs = map[int]int{}, map[int]int{}
	now, jobs := map[int]int{}, map[int]int{}
	for _, e := range edges {
		now[e.gpu] += e.mb
		jobs[e.gpu] += e.start
		peakMB[e.gpu] = max(peakMB[e.gpu], now[e.gpu])
		peakJobs[e.gpu] = max(peakJobs[e.gpu], jobs[e.gpu])
	}
	return peakMB, peakJobs
}

// On 80 GB GPUs, 19G jobs run four at a time per GPU though each GPU has
// one slot; a 50G job waits for room and is not starved by the small ones
// behind it; a 100G job is rejected with the largest GPU's budget; no
// moment has more memory declared on a GPU than its budget.
func TestMemoryBudgets(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := memLab()
		dir := t.TempDir()
		var b strings.Builder
		mem := map[string]int{}
		add := func(id, size string, mb int, cmd string) {
			b.WriteString("[name=" + id + " mem=" + size + "] " + cmd + "\n")
			mem[id] = mb
		}
		for _, id := range []string{"s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8"} {
			add(id, "19G", 19*1024, "sleep 400ms")
		}
		add("big", "50G", 50*1024, "sleep 10ms")
		for _, id := range []string{"t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8"} {
			add(id, "19G", 19*1024, "sleep 50ms")
		}
		add("huge", "100G", 100*1024, "exit 0")
		// A job that declares none needs a whole GPU (the fake counts a
		// violation when it shares one).
		b.WriteString("[name=plain] sleep 20ms\n")
		_, s := runJobsWith(t, f, Options{Inventory: f.inv, Executor: f, LogDir: dir}, b.String())
		if s.Counts[EventFinished] != 18 || s.Counts[EventRejected] != 1 {
			t.Errorf("counts %v; want 18 finished, huge rejected", s.Counts)
		}
		events := readJournal(t, dir)
		final, started := byJob(events)
		if e := final["huge"]; e.Error != "mem=100G: the largest GPU it may use gives jobs 79G (its memory less reserve_mb)" {
			t.Errorf("huge: %s %q", e.Event, e.Error)
		}
		peakMB, peakJobs := peakDeclared(t, events, mem)
		for g := range 2 {
			if peakMB[g] > 81920-1024 {
				t.Errorf("GPU %d had %d MiB declared at once; its budget is %d", g, peakMB[g], 81920-1024)
			}
			if peakJobs[g] != 4 {
				t.Errorf("GPU %d ran at most %d jobs at once; want 4 of 19G", g, peakJobs[g])
			}
		}
		// The big job went before the small ones queued behind it, but for at
		// most one GPU's worth that a GPU freed before the other took (under
		// load, the order of the passes varies): starved, it would start after
		// all eight.
		late := 0
		for _, id := range []string{"t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8"} {
			if started[id].Before(started["big"]) {
				late++
			}
		}
		if late > 4 {
			t.Errorf("%d of the jobs queued after the 50G one started before it: it was starved", late)
		}
		var declared string
		for _, st := range f.starts {
			for _, kv := range st.env {
				if strings.HasPrefix(kv, "GPUDISPATCH_MEM_MB=") {
					declared = kv
				}
			}
		}
		if declared == "" {
			t.Error("a job that declares memory is not told it (GPUDISPATCH_MEM_MB)")
		}
	})
}

// The host's mem: is the default of its jobs, max_per_gpu caps how many
// share a GPU, and memory_mb: stands for an nvidia-smi that cannot say.
func TestMemoryAndSlots(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := memLab()
		f.inv.Hosts[0].MemoryMB = 40 * 1024
		f.inv.Hosts[0].MaxPerGPU = 2
		f.inv.Hosts[0].MemMB = 5 * 1024
		f.probeErr = map[string]error{"a": fmt.Errorf("a: %w", executor.ErrNoNvidiaSMI)}
		dir := t.TempDir()
		input := strings.Repeat("sleep 30ms\n", 6) + "[gpus=2 mem=30G] sleep 1ms\n"
		_, s := runJobsWith(t, f, Options{Inventory: f.inv, Executor: f, LogDir: dir}, input)
		if !s.Succeeded() {
			t.Errorf("%+v", s)
		}
		_, peakJobs := peakDeclared(t, readJournal(t, dir), nil)
		if peakJobs[0] > 2 || peakJobs[1] > 2 {
			t.Errorf("at most %v jobs at once; max_per_gpu is 2", peakJobs)
		}
	})
}

// A host whose nvidia-smi cannot say takes no job that declares memory,
// says why once, and the job runs on a host that can.
func TestMemoryUnknown(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0 b:0")
		f := newFakeExec(inv)
		f.usage["a"] = nil
		f.probeErr = map[string]error{"a": fmt.Errorf("a: %w", executor.ErrNoNvidiaSMI)}
		dir := t.TempDir()
		_, s := runJobsWith(t, f, Options{Inventory: inv, Executor: f, LogDir: dir}, "[mem=1G] sleep 10ms\n[mem=1G] sleep 10ms\n")
		if !s.Succeeded() {
			t.Errorf("%+v", s)
		}
		for _, st := range f.starts {
			if st.host != "b" {
				t.Errorf("a job that declares memory ran on %s, whose memory is unknown", st.host)
			}
		}
		if warned := warnings(t, dir, "a", "set memory_mb:"); warned != 1 {
			t.Errorf("%d warnings about a's memory; want 1", warned)
		}
	})
}

// A host that does not answer when its GPUs' memory is asked is down, not
// asked again and again; once it is back, it is asked, and takes the jobs.
func TestMemoryHostDown(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := memLab()
		f.setDown("a", true)
		go func() {
			time.Sleep(200 * time.Millisecond)
			f.setDown("a", false)
		}()
		_, s := runJobsWith(t, f, Options{Inventory: f.inv, Executor: f, LogDir: t.TempDir()}, "[mem=10G] exit 0\n")
		if !s.Succeeded() {
			t.Errorf("%+v", s)
		}
		if f.asked > 5 {
			t.Errorf("nvidia-smi was asked %d times, most while the host was down", f.asked)
		}
	})
}

// A host whose nvidia-smi does not answer in time, or fails (a driver in
// a bad state), is asked again after the recheck time, and takes the job
// once it answers: only a host with no nvidia-smi at all never will.
func TestMemoryProbeTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		for _, sick := range []error{fmt.Errorf("a: %w", executor.ErrProbeTimeout), fmt.Errorf("nvidia-smi (exit status 255): Failed to initialize NVML: Unknown Error")} {
			f := memLab()
			f.mu.Lock()
			f.probeErr = map[string]error{"a": sick}
			f.mu.Unlock()
			time.AfterFunc(150*time.Millisecond, func() {
				f.mu.Lock()
				f.probeErr = nil
				f.mu.Unlock()
			})
			dir := t.TempDir()
			_, s := runJobsWith(t, f, Options{Inventory: f.inv, Executor: f, LogDir: dir, Recheck: 50 * time.Millisecond}, "[mem=10G] exit 0\n")
			if !s.Succeeded() {
				t.Errorf("%v: %+v", sick, s)
			}
			if warned := warnings(t, dir, "", "until its nvidia-smi answers"); warned != 1 {
				t.Errorf("%v: %d warnings of a's nvidia-smi; want 1", sick, warned)
			}
		}
	})
}

// A job that declares memory and may only go to hosts that can never tell
// their GPUs' memory is rejected, saying to set memory_mb:, rather than
// wait forever.
func TestMemoryNowhere(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := memLab()
		f.probeErr = map[string]error{"a": fmt.Errorf("a: %w", executor.ErrNoNvidiaSMI)}
		dir := t.TempDir()
		_, s := runJobsWith(t, f, Options{Inventory: f.inv, Executor: f, LogDir: dir}, "[name=m mem=1G] exit 0\n[name=plain] exit 0\n")
		final, _ := byJob(readJournal(t, dir))
		if e := final["m"]; e.Event != EventRejected || e.Error != "mem=1G: no host it may use can tell its GPUs' memory: set memory_mb: in their inventory entries" {
			t.Errorf("m: %s %q", e.Event, e.Error)
		}
		if s.Counts[EventFinished] != 1 {
			t.Errorf("counts %v", s.Counts)
		}
	})
}
