package dispatch

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// h100MIG is GPU 0 of a host as nvidia-smi says it in MIG mode, with the
// instances of c1_h100_mig.L.txt (hosts/nvidiasmi/testdata), and GPU 1 a
// whole H100.
func h100MIG() []executor.GPU {
	mig := []executor.MIGInstance{
		{Device: 0, Profile: "3g.40gb", UUID: "MIG-00000000-0000-0000-0000-000000000000", MemoryMB: 40960},
		{Device: 1, Profile: "2g.20gb", UUID: "MIG-00000001-0000-0000-0000-000000000001", MemoryMB: 20480},
		{Device: 2, Profile: "1g.10gb", UUID: "MIG-00000002-0000-0000-0000-000000000002", MemoryMB: 10240},
		{Device: 3, Profile: "1g.10gb", UUID: "MIG-00000003-0000-0000-0000-000000000003", MemoryMB: 10240},
	}
	return []executor.GPU{
		{Index: 0, UUID: "GPU-00000000-0000-0000-0000-000000000000", Name: "NVIDIA H100 80GB HBM3", MemoryTotalMB: 81559, MemoryUsedMB: 59, Utilization: -1, MIG: mig},
		{Index: 1, UUID: "GPU-11111111-0000-0000-0000-000000000000", Name: "NVIDIA H100 80GB HBM3", MemoryTotalMB: 81559, MemoryUsedMB: 0, Utilization: 0},
	}
}

// MIG instances are slots: each job gets one instance by its UUID, or the
// whole GPU 1, never GPU 0 as a whole; model= chooses instances by
// profile, mem= budgets each instance's own memory, a job of two GPUs has
// whole GPUs only, and a job pinned to GPU 0 gets one of its instances.
// Each instance is locked on its own.
func TestMIGInstancesAreSlots(t *testing.T) {
	t.Parallel()
	const (
		big   = "MIG-00000000-0000-0000-0000-000000000000"
		mid   = "MIG-00000001-0000-0000-0000-000000000001"
		small = "MIG-00000002-0000-0000-0000-000000000002,MIG-00000003-0000-0000-0000-000000000003"
		all   = big + "," + mid + "," + small + ",1"
	)
	tests := []struct {
		name, inv, input string
		// where the jobs may run (CUDA_VISIBLE_DEVICES values), and
		// how many may run at once at most and at least.
		where              string
		most, least        int
		rejected           int
		rejectedWhy, locks string
	}{
		{name: "five jobs, five slots", inv: "a:0,1", input: repeat("sleep 200ms", 5), where: all, most: 5, least: 5,
			locks: "a:0:0 a:0:1 a:0:2 a:0:3 a:1"},
		{name: "a profile", inv: "a:0,1", input: repeat("[model=1g.10gb] sleep 200ms", 3), where: small, most: 2, least: 2},
		{name: "the GPU's name", inv: "a:0,1", input: repeat("[model=H100] sleep 200ms", 5), where: all, most: 5, least: 5},
		{name: "memory of an instance", inv: "a:0", input: repeat("[vram=20G] sleep 200ms", 3), where: big + "," + mid, most: 2, least: 2},
		{name: "declared memory", inv: "a:0", input: repeat("[mem=15G] sleep 200ms", 4), where: big + "," + mid, most: 3, least: 3},
		{name: "pinned to the GPU", inv: "a:0,1", input: repeat("@a:0 sleep 200ms", 4), where: big + "," + mid + "," + small, most: 4, least: 4},
		{name: "two GPUs: whole ones", inv: "a:0,1,2", input: "[gpus=2] exit 0\n", where: "1,2", most: 1, least: 1},
		{name: "two GPUs, one whole", inv: "a:0,1", input: "[gpus=2] exit 0\n", rejected: 1, rejectedWhy: "gpus=2: no host has that many GPUs (the most is 1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				inv := lab(tt.inv)
				f := newFakeExec(inv)
				gpus := h100MIG()
				if strings.HasSuffix(tt.inv, ",2") {
					gpus = append(gpus, executor.GPU{Index: 2, UUID: "GPU-2", Name: "NVIDIA H100 80GB HBM3", MemoryTotalMB: 81559})
				}
				if !strings.Contains(tt.inv, ",1") {
					gpus = gpus[:1]
				}
				f.usage["a"] = gpus
				dir := t.TempDir()
				_, s := runJobsWith(t, f, Options{Inventory: inv, Executor: f, LogDir: dir, BusyMemoryMB: 500, Recheck: time.Hour}, tt.input)
				if s.Counts[EventRejected] != tt.rejected || len(s.Unsuccessful) != tt.rejected {
					t.Fatalf("summary %+v, want %d rejected", s, tt.rejected)
				}
				for _, e := range readJournal(t, dir) {
					if e.Event == EventRejected && e.Error != tt.rejectedWhy {
						t.Errorf("rejected: %q, want %q", e.Error, tt.rejectedWhy)
					}
				}
				for _, st := range f.starts {
					if !strings.Contains(","+tt.where+",", ","+st.gpus+",") {
						t.Errorf("a job ran with CUDA_VISIBLE_DEVICES=%s, want one of %s", st.gpus, tt.where)
					}
				}
				if f.peakTotal > tt.most || f.peakTotal < tt.least {
					t.Errorf("%d jobs at once, want %d to %d", f.peakTotal, tt.least, tt.most)
				}
				if tt.locks != "" {
					var got []string
					for _, l := range f.locks.handed {
						got = append(got, l.slot)
					}
					if slices.Sort(got); fmt.Sprint(got) != fmt.Sprint(strings.Fields(tt.locks)) {
						t.Errorf("locks %v, want %v", got, tt.locks)
					}
				}
			})
		})
	}
}

// A GPU that is split into MIG instances during the run has its
// instances for slots from the next look on, and the whole GPU again once
// MIG is turned off.
func TestMIGTurnedOnAndOff(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0")
		f := newFakeExec(inv)
		whole := []executor.GPU{{Index: 0, UUID: "GPU-0", Name: "NVIDIA H100 80GB HBM3", MemoryTotalMB: 81559}}
		f.usage["a"] = whole
		w, done := startRun(t, Options{Inventory: inv, Executor: f, LogDir: t.TempDir(), BusyMemoryMB: 500, Recheck: 20 * time.Millisecond})
		ranOn := func(line, want string) {
			t.Helper()
			n := f.started()
			fmt.Fprintln(w, line)
			for deadline := time.Now().Add(5 * time.Second); f.started() == n; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%q never started", line)
				}
			}
			f.mu.Lock()
			got := f.starts[n].gpus
			f.mu.Unlock()
			if !strings.Contains(want, got) {
				t.Errorf("%q ran with CUDA_VISIBLE_DEVICES=%s, want %s", line, got, want)
			}
		}
		ranOn("exit 0", "0")
		f.mu.Lock()
		f.usage["a"] = h100MIG()[:1]
		f.mu.Unlock()
		time.Sleep(100 * time.Millisecond) // a look or two
		ranOn("[model=1g.10gb] exit 0", "MIG-00000002-0000-0000-0000-000000000002,MIG-00000003-0000-0000-0000-000000000003")
		f.mu.Lock()
		f.usage["a"] = whole
		f.mu.Unlock()
		time.Sleep(100 * time.Millisecond)
		ranOn("exit 0", "0")
		w.Close()
		if s := <-done; !s.Succeeded() {
			t.Errorf("summary %+v", s)
		}
	})
}
