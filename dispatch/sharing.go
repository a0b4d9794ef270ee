package dispatch

import (
	"fmt"
	"time"
)

// sharing warns, once per GPU, that a job of this run lands on GPU g of h
// that others' work uses: more memory used than BusyMemoryMB as the run's
// lock holder on the host first looked (usedMB, -1 when unknown), before
// any job of the run was there. SkipBusy keeps jobs off such GPUs instead.
func (r *run) sharing(h *hostSlots, g *gpu, usedMB int) {
	if r.opts.SkipBusy || g.sharedSaid || usedMB <= r.opts.BusyMemoryMB {
		return
	}
	g.sharedSaid = true
	r.record(Event{Time: time.Now(), Event: EventWarning, Run: r.id, Host: h.host.Name, GPUs: []int{g.id},
		Error: fmt.Sprintf("GPU %d is used by others too (%d MiB used (more than %d)): this run's jobs there share it; --skip-busy keeps jobs off GPUs that others use", g.id, usedMB, r.opts.BusyMemoryMB)})
}
