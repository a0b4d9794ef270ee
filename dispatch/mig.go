package dispatch

import (
	"slices"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// MIG. A GPU in MIG mode is split into instances that CUDA uses apart: the
// run's looks at a host (usage.go) find them in nvidia-smi -L, and each
// becomes a slot of its own, with the GPU's slots (slots_per_gpu, repeats
// of its id), its own lock, its memory from its profile ("3g.40gb"), and
// a model that is its GPU's name and its profile, so that model=3g.40gb
// or model=H100 choose it. The GPU as a whole takes no job while it is
// split (CUDA would show it only its first instance); a job pinned to the
// GPU may have any of its instances. CUDA gives a process one MIG
// instance, so a job of several GPUs has whole GPUs only. nvidia-smi
// gives no figure per instance (a process is listed under its GPU): what
// others use on an instance is not seen, and only locks keep other
// gpudispatch runs off it. An instance that a look no longer lists (the
// GPU was split anew, or MIG turned off) is left out as a GPU that
// nvidia-smi does not list is; the run goes on with what is there.

// mayRun reports whether j may be given g: the GPU it is pinned to (or an
// instance of it), of the kind it needs (a cluster's kind is its host's:
// tagged), and a whole GPU for a job of several.
func (g *gpu) mayRun(j *Job) bool {
	return g.pinnedBy(j) && (g.host.cluster || g.suits(j)) && (j.GPUs <= 1 || g.mig == "")
}

// pinnedBy reports whether g is, or is an instance of, the GPU j is
// pinned to, if any.
func (g *gpu) pinnedBy(j *Job) bool { return j.GPU < 0 || g.id.GPU() == j.GPU }

// migSlots makes the MIG instances that the look seen lists on h's GPUs
// slots, and leaves out those it lists no longer; it reports whether any
// slot came or went.
func (t *slotTable) migSlots(h *hostSlots, seen map[int]executor.GPU) bool {
	changed := false
	for idx, info := range seen {
		parent := h.byID[executor.GPUID(idx)]
		if parent == nil || parent.listed == 0 {
			continue // not the inventory's
		}
		at := slices.Index(h.gpus, parent) + 1
		for _, m := range info.MIG {
			id := executor.MIGID(idx, m.Device)
			g := h.byID[id]
			if g == nil {
				g = &gpu{host: h, id: id, listed: parent.listed, absent: true}
				h.byID[id] = g
				h.gpus = slices.Insert(h.gpus, at, g)
			}
			at = slices.Index(h.gpus, g) + 1
			t.setBlocked(g, func() {
				g.mig, g.visible = m.Profile, m.UUID
				g.setKind(info.Name+" MIG "+m.Profile, max(m.MemoryMB, 0))
				g.memTotal, g.memUnknown = max(m.MemoryMB, 0), m.MemoryMB <= 0
			})
		}
	}
	for _, g := range h.gpus {
		info, listed := seen[g.id.GPU()]
		split := listed && len(info.MIG) > 0
		if dev, ok := g.id.MIG(); ok {
			listed = listed && slices.ContainsFunc(info.MIG, func(m executor.MIGInstance) bool { return m.Device == dev })
			if g.absent == !listed {
				continue
			}
			t.setBlocked(g, func() {
				g.absent = !listed
				g.cap = g.slots()
			})
			changed = true
			continue
		}
		if g.split != split {
			t.setBlocked(g, func() {
				g.split = split
				g.cap = g.slots()
			})
			changed = true
		}
	}
	return changed
}

// visible is what CUDA_VISIBLE_DEVICES says of p's GPUs: "0,1", or the
// MIG instance's UUID.
func (p placement) visible() string {
	if len(p.gpus) == 1 && p.gpus[0].visible != "" {
		return p.gpus[0].visible
	}
	return executor.GPUIDs(p.gpuIDs())
}
