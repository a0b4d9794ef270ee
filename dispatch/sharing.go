package dispatch

import (
	"fmt"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// sharing warns, once per GPU, that a job of this run lands on GPU g of h
// that others' work uses: by the run's last look at the host's GPUs
// (g.others), or by the memory used as the run's lock holder on the host
// first looked (usedMB, -1 when unknown), before any job of the run was
// there. SkipBusy keeps jobs off such GPUs instead.
func (r *run) sharing(h *hostSlots, g *gpu, usedMB int) {
	why := g.others
	if why == "" && usedMB > r.opts.BusyMemoryMB {
		why = fmt.Sprintf("%d MiB used (more than %d)", usedMB, r.opts.BusyMemoryMB)
	}
	if r.opts.SkipBusy || g.sharedSaid || why == "" {
		return
	}
	g.sharedSaid = true
	e := r.warning(h.host.Name, "", fmt.Sprintf("GPU %s is used by others too (%s): this run's jobs there share it; --skip-busy keeps jobs off GPUs that others use", g.id, why))
	e.GPUs = []executor.GPUID{g.id}
	r.record(e)
}
