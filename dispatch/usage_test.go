package dispatch

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// Idle GPUs first: what others use is known before a job is placed, so
// jobs go to the idle host's GPUs while the busy host's wait; only when
// no idle GPU is free does a job go to a busy one, and the run says so
// once for that GPU. With SkipBusy, the busy GPUs get none at all.
func TestIdleGPUsFirst(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		jobs     int
		skipBusy bool
		wantOnA  int
		warnings int
	}{
		{name: "as many jobs as idle GPUs", jobs: 2, wantOnA: 0},
		{name: "more jobs than idle GPUs", jobs: 4, wantOnA: 2, warnings: 2},
		{name: "skip busy", jobs: 4, skipBusy: true, wantOnA: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				inv := lab("a:0,1 b:0,1")
				f := newFakeExec(inv)
				f.setUsage("a", map[int]int{0: 40000, 1: 40000})
				dir := t.TempDir()
				opts := Options{Inventory: inv, Executor: f, LogDir: dir, SkipBusy: tt.skipBusy, BusyMemoryMB: 500, Recheck: time.Hour}
				_, s := runJobsWith(t, f, opts, repeat("sleep 100ms", tt.jobs))
				if !s.Succeeded() {
					t.Fatalf("summary %+v", s)
				}
				onA := 0
				for _, st := range f.starts {
					if st.host == "a" {
						onA++
					}
				}
				// Jobs 1 and 2 always go to b: a's GPUs are known busy.
				for _, st := range f.starts {
					if id := envValue(st.env, "GPUDISPATCH_JOB_ID"); (id == "1" || id == "2") && st.host != "b" {
						t.Errorf("job %s went to the busy host: %+v", id, f.starts)
					}
				}
				warned := 0
				for _, e := range readJournal(t, dir) {
					if e.Event == EventWarning && strings.Contains(e.Error, "is used by others too (40000 MiB used") {
						warned++
					}
				}
				if onA != tt.wantOnA || warned != tt.warnings {
					t.Errorf("%d jobs on the busy host, %d warnings; want %d and %d", onA, warned, tt.wantOnA, tt.warnings)
				}
			})
		})
	}
}

// With SkipBusy, a job pinned to a host whose GPUs others use waits, and
// says why with the usage; it runs once a look finds a GPU free.
func TestPinnedToBusyHostSaysWhy(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0,1 b:0")
		f := newFakeExec(inv)
		f.setUsage("a", map[int]int{0: 40000, 1: 30000})
		c := NewControl()
		dir := t.TempDir()
		w, done := startRun(t, Options{Inventory: inv, Executor: f, LogDir: dir, SkipBusy: true, BusyMemoryMB: 500, Recheck: 50 * time.Millisecond, Control: c})
		w.Write([]byte("@a exit 0\n"))
		want := "waits: every GPU of host a it may use is busy with other work (GPU 0: 40000 MiB used (more than 500); GPU 1: 30000 MiB used (more than 500))"
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			st, err := c.Status(context.Background(), dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Jobs) == 1 && strings.HasPrefix(st.Jobs[0].Why, want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("status %+v, want the job waiting with %q", st.Jobs, want)
			}
		}
		f.setUsage("a", map[int]int{0: 40000, 1: 0})
		w.Close()
		s := <-done
		if !s.Succeeded() || len(f.starts) != 1 || f.starts[0].gpus != "1" {
			t.Fatalf("summary %+v, starts %+v: want the job on a:1 once it is free", s, f.starts)
		}
		busy := 0
		for _, e := range readJournal(t, dir) {
			if e.Event == EventBusy && e.Host == "a" {
				busy++
			}
		}
		if busy != 2 {
			t.Errorf("%d gpu_busy events for a, want one per busy GPU", busy)
		}
	})
}

// A GPU of the inventory that the host's nvidia-smi does not list is left
// out with a warning naming the GPUs it has; a job pinned to it is
// rejected with that reason, and no job gets it.
func TestGPUTheHostLacks(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0,1,5")
		f := newFakeExec(inv)
		f.usage["a"] = []executor.GPU{{Index: 0, MemoryTotalMB: 81920}, {Index: 1, MemoryTotalMB: 81920}}
		dir := t.TempDir()
		_, s := runJobsWith(t, f, Options{Inventory: inv, Executor: f, LogDir: dir, Recheck: time.Hour}, "@a:5 exit 0\n"+repeat("sleep 20ms", 6))
		if s.Counts[EventFinished] != 6 || s.Counts[EventRejected] != 1 {
			t.Fatalf("summary %+v", s)
		}
		for _, st := range f.starts {
			if st.gpus == "5" {
				t.Errorf("a job ran on the GPU the host lacks: %+v", st)
			}
		}
		if got, want := s.Unsuccessful[0].Error, "host a has no GPU 5: nvidia-smi there does not list it (its GPUs: 0,1)"; got != want {
			t.Errorf("rejected with %q, want %q", got, want)
		}
		warned := false
		for _, e := range readJournal(t, dir) {
			warned = warned || e.Event == EventWarning && e.Host == "a" && strings.Contains(e.Error, "GPU 5 is in the inventory, but nvidia-smi there does not list it (it lists GPUs 0,1)")
		}
		if !warned {
			t.Error("no warning names the GPU and the GPUs the host has")
		}
	})
}

// A GPU whose memory nvidia-smi gives no figure for ([N/A] on GB10-class
// GPUs) is never taken for 0: the run names the host, the GPU and the key
// that gives the figure, and a job that declares its memory with nowhere
// else to go is rejected with that reason rather than waiting in silence.
func TestUnknownMemoryIsSaid(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0")
		f := newFakeExec(inv)
		f.usage["a"] = []executor.GPU{{Index: 0, MemoryTotalMB: -1, MemoryUsedMB: -1, Utilization: 0}}
		dir := t.TempDir()
		_, s := runJobsWith(t, f, Options{Inventory: inv, Executor: f, LogDir: dir, Recheck: time.Hour}, "[mem=10G] exit 0\nexit 0\n")
		if s.Counts[EventRejected] != 1 || s.Counts[EventFinished] != 1 {
			t.Fatalf("summary %+v", s)
		}
		if got := s.Unsuccessful[0].Error; !strings.Contains(got, "set memory_mb: in") {
			t.Errorf("the mem= job was rejected with %q, want the key that gives the figure", got)
		}
		warned := false
		for _, e := range readJournal(t, dir) {
			warned = warned || e.Event == EventWarning && e.Host == "a" && strings.Contains(e.Error, "nvidia-smi gives no memory figure for GPU 0") && strings.Contains(e.Error, "memory_mb:")
		}
		if !warned {
			t.Error("no warning names the host, the GPU and memory_mb:")
		}
	})
}
