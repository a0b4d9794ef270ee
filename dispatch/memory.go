package dispatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// GPU memory budgets. A job may declare the GPU memory it needs on each
// of its GPUs ([mem=20G], or its host's mem:). A GPU then takes such jobs
// while the memory they declare fits its budget: its memory (nvidia-smi's,
// or the host's memory_mb:) less reserve_mb, and, with SkipBusy, less what
// others used on it when it was asked. Memory alone limits how many such
// jobs share a GPU (max_per_gpu caps them where set); they take no slot. A
// job that declares none takes a slot as before and needs the whole GPU:
// it never shares one with jobs that declare memory. Declared budgets, not
// samples: a job that has not allocated its memory yet still counts.
//
// A host's GPUs' memory is asked of nvidia-smi once a job that declares
// memory arrives (askMemory), unless memory_mb: says it; until it is
// known, such jobs do not go there. A job whose memory fits no GPU it may
// use, once every such GPU's is known, is rejected. The oldest waiting job
// that declares memory holds the GPUs it will need (holdMemory): no new job
// starts there until it fits, so a large job is not starved by small ones.

// memAsk is where a host's GPU memory stands.
type memAsk int

const (
	memUnasked memAsk = iota
	memAsking
	memKnown
)

// memOf is the memory j declares on h's GPUs (0: none; a Slurm cluster's
// GPUs are Slurm's).
func (h *hostSlots) memOf(j *Job) int {
	if h.cluster {
		return 0
	}
	if j.MemMB > 0 {
		return j.MemMB
	}
	return h.host.MemMB
}

// memWaits counts n more (or fewer) waiting jobs that declare mb MiB (0:
// their host's mem:, if it has one), and keeps minMem.
func (t *slotTable) memWaits(mb, n int) {
	t.waitingMem[mb] += n
	left := t.waitingMem[mb]
	if left <= 0 {
		delete(t.waitingMem, mb)
	}
	eff := mb
	if mb == 0 {
		eff = t.hostMinMem // 0: no host has a mem:, the jobs declare none
	}
	switch {
	case eff == 0:
	case n > 0 && (t.minMem == 0 || eff < t.minMem):
		t.setMinMem()
	case n < 0 && left <= 0 && eff <= t.minMem:
		t.setMinMem()
	}
}

// setMinMem finds the least memory a waiting job may declare, and counts
// freeSlots anew by it.
func (t *slotTable) setMinMem() {
	least := 0
	for mb := range t.waitingMem {
		if mb == 0 {
			mb = t.hostMinMem
		}
		if mb > 0 && (least == 0 || mb < least) {
			least = mb
		}
	}
	t.minMem = least
	t.freeSlots = 0
	for _, h := range t.hosts {
		t.freeSlots += t.hostContrib(h)
	}
}

// budget is the memory g gives jobs that declare theirs, or -1 while it is
// not known.
func (g *gpu) budget() int {
	total := g.host.host.MemoryMB
	if total == 0 || g.mig != "" {
		total = g.memTotal
	}
	if total == 0 {
		return -1
	}
	return max(total-g.host.host.ReserveMB-g.memOthers, 0)
}

// memRoom reports whether g has budget left for another job that declares
// memory.
func (g *gpu) memRoom() bool {
	return g.budget() > g.memUsed && (g.host.host.MaxPerGPU == 0 || g.memJobs < g.host.host.MaxPerGPU)
}

// takes reports whether g, open, can take a job that declares mem MiB (0:
// a slot) outside what is held.
func (t *slotTable) takes(g *gpu, mem int, hd held) bool {
	if g.host.unseen || g.others != "" && t.unseenUp > 0 {
		return false // what others use is not known yet here, or elsewhere
	}
	if mem == 0 {
		return t.free(g, hd) > 0 && g.memJobs == 0
	}
	return g.cap > 0 && g.used == 0 && hd[g] == 0 && g.memRoom() && g.memUsed+mem <= g.budget()
}

// holdMemory holds for j, the oldest waiting job, when it declares memory,
// the GPUs where it is closest to fitting, and reports whether it did.
func (t *slotTable) holdMemory(j *Job, hd held) bool {
	var target []*gpu
	room := -1
	for _, h := range t.candidates(j) {
		mem := h.memOf(j)
		if mem == 0 || !h.usable(j) || !h.fits(j) {
			continue
		}
		var gs []*gpu
		for _, g := range h.gpus {
			if g.cap > 0 && g.budget() >= mem && g.mayRun(j) {
				gs = append(gs, g)
			}
		}
		if len(gs) < h.need(j) {
			continue
		}
		// The GPUs with the most budget left.
		slices.SortFunc(gs, func(a, b *gpu) int { return (b.budget() - b.memUsed) - (a.budget() - a.memUsed) })
		gs = gs[:h.need(j)]
		if left := gs[len(gs)-1].budget() - gs[len(gs)-1].memUsed; left > room {
			target, room = gs, left
		}
	}
	for _, g := range target {
		hd[g]++
	}
	return room >= 0
}

// checkMemory says why j's declared memory fits no place it may use
// (GPUs of one host, as many as it asks for), once their memory is known,
// or nil.
func (t *slotTable) checkMemory(j *Job) error {
	largest, mem, mute := -1, 0, 0
	for _, h := range t.candidates(j) {
		if h.removed || !h.fits(j) || !h.tagged(j) {
			continue
		}
		m := h.memOf(j)
		if m == 0 {
			return nil // a cluster, or a host where it declares none
		}
		mem = m
		if h.memNever && h.host.MemoryMB == 0 {
			mute++ // never a place for it
			continue
		}
		var budgets []int
		for _, g := range h.gpus {
			if g.cap == 0 || !g.mayRun(j) {
				continue
			}
			if g.budget() < 0 && g.memUnknown {
				continue // never known: nvidia-smi gives no figure
			}
			if g.budget() < 0 {
				return nil // not known yet
			}
			budgets = append(budgets, g.budget())
		}
		if len(budgets) >= h.need(j) {
			slices.Sort(budgets)
			largest = max(largest, budgets[len(budgets)-h.need(j)])
		} else if h.memErr != "" {
			mute++ // its GPUs' memory is not given
		}
	}
	switch {
	case mem > 0 && largest < 0 && mute > 0:
		return fmt.Errorf("mem=%s: no host it may use can tell its GPUs' memory: set memory_mb: in their inventory entries", MemWords(mem))
	case mem == 0 || largest < 0 || mem <= largest:
		return nil
	}
	return fmt.Errorf("mem=%s: the largest GPU it may use gives jobs %s (its memory less reserve_mb)", MemWords(mem), MemWords(largest))
}

// MemWords says MiB in the unit people use for GPU memory: "19G", "1.5G",
// "512M".
func MemWords(mb int) string {
	if mb >= 1024 && mb%1024 == 0 {
		return fmt.Sprintf("%dG", mb/1024)
	}
	if mb >= 1024 {
		return fmt.Sprintf("%.1fG", float64(mb)/1024)
	}
	return fmt.Sprintf("%dM", mb)
}

// memWatch keeps what the run asks of hosts' GPUs. wanted is set once a
// job may declare GPU memory: hosts' GPU memory is then asked (askMemory)
// and answered on answers; look is set when a host may have become one to
// ask (up, added, its last look failed), so that the hosts are not looked
// over at every event. usages brings the looks at what others use on the
// GPUs (usage.go).
type memWatch struct {
	wanted, look bool
	answers      chan memAnswer
	usages       chan usageAnswer
}

// memAnswer is what a host's nvidia-smi said of its GPUs' memory; again
// is set instead when it is time to ask a host whose nvidia-smi did not
// answer in time once more.
type memAnswer struct {
	h     *hostSlots
	gpus  []executor.GPU
	err   error
	again bool
}

// askMemory asks nvidia-smi, on each host that is up, whose GPUs' memory
// is not known and that a waiting job declaring memory may use, for it.
func (r *run) askMemory() {
	if !r.mem.wanted || !r.mem.look {
		return
	}
	r.mem.look = false
	for _, h := range r.sched.table.hosts {
		if h.cluster || h.down || h.removed || h.memAsk != memUnasked || h.host.MemoryMB > 0 {
			continue
		}
		h.memAsk = memAsking
		name := h.host.Name
		go func() {
			ctx, cancel := context.WithTimeout(r.bg, probeLimit)
			defer cancel()
			gpus, err := r.opts.Executor.ProbeGPUs(ctx, name)
			select {
			case r.mem.answers <- memAnswer{h: h, gpus: gpus, err: err}:
			case <-r.bg.Done():
			}
		}()
	}
}

// probeLimit bounds a look at a host's GPUs' memory: a hung nvidia-smi is
// asked again later.
const probeLimit = 2 * time.Minute

// onMemory records a host's GPUs' memory, then rejects the waiting jobs
// whose memory now fits no GPU they may use.
func (r *run) onMemory(a memAnswer) {
	h := a.h
	switch {
	case a.again:
		h.memAsk, r.mem.look = memUnasked, true
		return
	case unreachable(a.err):
		// Down: asked again once it is back.
		h.memAsk = memUnasked
		r.hostDown(h, a.err)
		return
	case a.err != nil && !errors.Is(a.err, executor.ErrNoNvidiaSMI):
		// Sick (nvidia-smi hangs or fails), perhaps for a while: asked
		// again after the recheck time.
		h.memAsk = memKnown
		if h.memErr == "" {
			r.record(r.hostWarning(h, fmt.Errorf("jobs that declare their GPU memory (mem=) do not go there until its nvidia-smi answers (asked again every %s): %w", r.opts.Recheck, a.err)))
		}
		h.memErr = a.err.Error()
		time.AfterFunc(r.opts.Recheck, func() {
			select {
			case r.mem.answers <- memAnswer{h: h, again: true}:
			case <-r.bg.Done():
			}
		})
		return
	case a.err != nil:
		// No nvidia-smi there: it will never say.
		h.memAsk, h.memErr, h.memNever = memKnown, a.err.Error(), true
		r.record(r.hostWarning(h, fmt.Errorf("cannot tell its GPUs' memory, so jobs that declare theirs (mem=) do not go there; set memory_mb: in its inventory entry: %w", a.err)))
	default:
		unknown := r.sched.table.learnMemory(h, a.gpus, r.opts.SkipBusy)
		if len(unknown) > 0 {
			// No figure ([N/A] on GB10/Grace-class GPUs, or one that
			// cannot be true): said, never taken for 0.
			h.memErr = fmt.Sprintf("nvidia-smi gives no memory figure for GPU %s", strings.Join(unknown, ","))
			r.record(r.hostWarning(h, fmt.Errorf("%s, so jobs that declare their GPU memory (mem=) do not go there; set memory_mb: in its inventory entry", h.memErr)))
		}
	}
	why := map[*queued]error{}
	for _, q := range r.sched.dropIf(func(q *queued) bool {
		why[q] = r.sched.table.checkMemory(q.job)
		return why[q] != nil
	}) {
		e := r.event(EventRejected, q.job, q.attempts)
		e.Error = why[q].Error()
		r.final(e)
	}
}

// learnMemory records the memory nvidia-smi said h's GPUs have (gpus), and
// with skipBusy what others use of it; it returns the GPUs it gave no
// figure for where the inventory gives none either.
func (t *slotTable) learnMemory(h *hostSlots, gpus []executor.GPU, skipBusy bool) (unknown []string) {
	h.memAsk, h.memErr = memKnown, ""
	for _, info := range gpus {
		g := h.byID[executor.GPUID(info.Index)]
		if g == nil || info.Error != "" || g.split {
			continue // a MIG instance's memory is its profile's (mig.go)
		}
		if info.MemoryTotalMB <= 0 && h.host.MemoryMB == 0 && g.listed > 0 {
			unknown = append(unknown, g.id.String())
		}
		t.setBlocked(g, func() {
			g.memTotal, g.memUnknown = max(info.MemoryTotalMB, 0), info.MemoryTotalMB <= 0
			if skipBusy {
				g.memOthers = max(info.MemoryUsedMB, 0)
			}
		})
	}
	return unknown
}

// whyMemory says why j, which declares memory on some host it may use,
// waits, or "" when it declares none.
func (t *slotTable) whyMemory(j *Job) string {
	mem, most := 0, -1
	for _, h := range t.candidates(j) {
		m := h.memOf(j)
		if m == 0 || h.removed {
			continue
		}
		mem = m
		switch {
		case h.host.MemoryMB > 0:
		case h.memErr != "":
			return "waits: host " + h.host.Name + " cannot tell its GPUs' memory (" + h.memErr + ")"
		case h.memAsk != memKnown:
			return "waits for the GPU memory of host " + h.host.Name + " to be known (nvidia-smi)"
		}
		for _, g := range h.gpus {
			if g.cap > 0 && g.budget() >= 0 {
				most = max(most, g.budget()-g.memUsed)
			}
		}
	}
	if mem == 0 {
		return ""
	}
	return fmt.Sprintf("waits for %s of GPU memory (the most left on a GPU it may use: %s)", MemWords(mem), MemWords(max(most, 0)))
}
