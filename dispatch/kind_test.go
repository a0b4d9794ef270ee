package dispatch

import (
	"slices"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// model=, vram= and tags= place a job only on a GPU of the kind it needs,
// known from the looks at the hosts; a job no GPU of the lab suits is
// rejected, once every host has answered, with what the lab has.
func TestGPUKind(t *testing.T) {
	t.Parallel()
	inv := lab("a:0,1 b:0")
	inv.Hosts[1].Tags = []string{"fast"}
	f := newFakeExec(inv)
	f.usage["a"] = []executor.GPU{{Index: 0, Name: "NVIDIA A100-SXM4-80GB", MemoryTotalMB: 81920}, {Index: 1, Name: "NVIDIA A100-SXM4-80GB", MemoryTotalMB: 81920}}
	f.usage["b"] = []executor.GPU{{Index: 0, Name: "NVIDIA GeForce RTX 4090", MemoryTotalMB: 24564}}
	input := "[name=rtx model=4090] sleep 10ms\n[name=datacenter model=a100|H100] sleep 10ms\n[name=big vram=40G] sleep 10ms\n" +
		"[name=tagged tags=fast] sleep 10ms\n[name=h200 model=H200] sleep 10ms\n[name=nvlink tags=nvlink] sleep 10ms\n" +
		"[name=small vram=20G gpus=2] sleep 10ms\n"
	_, s := runJobsWith(t, f, Options{Inventory: inv, Executor: f, LogDir: t.TempDir(), Recheck: time.Hour}, input)
	where := map[string]string{}
	for _, st := range f.starts {
		where[envValue(st.env, "GPUDISPATCH_JOB_ID")] = st.host
	}
	for job, host := range map[string]string{"rtx": "b", "datacenter": "a", "big": "a", "tagged": "b", "small": "a"} {
		if where[job] != host {
			t.Errorf("job %s ran on %q, want %s", job, where[job], host)
		}
	}
	rejected := map[string]string{}
	for _, e := range s.Unsuccessful {
		rejected[e.Job] = e.Error
	}
	lab := "(the lab has: a: 2× NVIDIA A100-SXM4-80GB (81920 MiB); b: 1× NVIDIA GeForce RTX 4090 (24564 MiB), tags fast)"
	for job, want := range map[string]string{
		"h200":   "model=H200: no GPU of the lab is one " + lab,
		"nvlink": "tags=nvlink: no GPU of the lab is one " + lab,
	} {
		if rejected[job] != want {
			t.Errorf("job %s: %q, want %q", job, rejected[job], want)
		}
	}
	if len(rejected) != 2 || s.Counts[EventFinished] != 5 {
		t.Errorf("summary %+v", s)
	}
}

// A job that only a host still being opened could suit waits for it, and
// runs there once it is; it is not rejected while a host may yet suit it.
func TestGPUKindWaitsForHostsBeingOpened(t *testing.T) {
	t.Parallel()
	inv := lab("a:0 b:0")
	f := newFakeExec(inv)
	f.usage["a"] = []executor.GPU{{Index: 0, Name: "Tesla V100", MemoryTotalMB: 16384}}
	f.usage["b"] = []executor.GPU{{Index: 0, Name: "NVIDIA H100 80GB HBM3", MemoryTotalMB: 81559}}
	updates := make(chan Update)
	w, done := startRun(t, Options{Inventory: inv, Executor: f, LogDir: t.TempDir(), Updates: updates, Opening: []string{"b"}, Recheck: time.Hour})
	w.Write([]byte("[model=H100] sleep 1ms\nsleep 1ms\n"))
	waitFor(t, func() bool { return len(f.startsOn("a")) == 1 })
	updates <- Update{Inventory: inv, Opened: []string{"b"}}
	w.Close()
	s := <-done
	if !s.Succeeded() || !slices.Equal(f.startsOn("b"), []string{"sleep 1ms"}) {
		t.Errorf("summary %+v, on b %+v: want the H100 job run there once b was opened", s, f.startsOn("b"))
	}
}
