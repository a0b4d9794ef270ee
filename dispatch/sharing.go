package dispatch

import (
	"fmt"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// Without SkipBusy a job may land on a GPU that other people's work uses;
// the run then says so once per GPU. As it first places a job on a host,
// it asks the host's nvidia-smi (in the background: no job waits for it)
// and warns of each of the host's GPUs that has other processes on it, or
// more memory used than BusyMemoryMB, among those where no job of this run
// had started yet: a job of its own that has just started has no memory or
// process on the GPU yet (a program takes its time to reach CUDA).

// hostLook is what nvidia-smi said of h's GPUs, and which of them had no job
// of this run when it was asked.
type hostLook struct {
	h     *hostSlots
	fresh map[int]bool
	gpus  []executor.GPU
	err   error
}

// lookAtSharing asks h's nvidia-smi once per run, unless SkipBusy (which
// asks before each start) or h is a cluster; it is called as a job is placed
// on h, its slots taken.
func (r *run) lookAtSharing(h *hostSlots) {
	name := h.host.Name
	if r.opts.SkipBusy || h.cluster || h.noProbe || r.looked[name] {
		return
	}
	r.looked[name] = true
	fresh := map[int]bool{}
	for _, g := range h.gpus {
		// used counts the job being placed: 1 is that job alone.
		fresh[g.id] = g.used <= 1
	}
	go func() {
		gpus, err := r.opts.Executor.ProbeGPUs(r.bg, name)
		select {
		case r.looks <- hostLook{h: h, fresh: fresh, gpus: gpus, err: err}:
		case <-r.bg.Done():
		}
	}()
}

// sharing warns of each GPU of l that others use (see above). A host whose
// nvidia-smi cannot be asked says nothing here: its jobs go on.
func (r *run) sharing(l hostLook) {
	if l.err != nil {
		return
	}
	for _, info := range l.gpus {
		g := l.h.byID[info.Index]
		if g == nil || !l.fresh[g.id] || g.cap == 0 || info.Processes == 0 && info.MemoryUsedMB <= r.opts.BusyMemoryMB {
			continue
		}
		r.record(Event{Time: time.Now(), Event: EventWarning, Run: r.id, Host: l.h.host.Name, GPUs: []int{g.id},
			Error: fmt.Sprintf("GPU %d is used by others too (%s): this run's jobs there share it; --skip-busy keeps jobs off GPUs that others use", g.id, info.BusyWhy(r.opts.BusyMemoryMB))})
	}
}
