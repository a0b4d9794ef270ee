package dispatch

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// Others' use of the GPUs. What other people's work uses on each GPU of a
// host (memory over BusyMemoryMB, or a compute process) is known before a
// job is placed there: the run asks the host's nvidia-smi as the host
// becomes usable, and again every Recheck while the run lasts (watchUsage);
// until the first answer, the host's GPUs take no job (hostSlots.unseen).
// A GPU others use gets a job only when no idle GPU the job may use is
// free and no host is still being opened or first looked at (it may have
// an idle GPU for the job): better, slotTable.unseenUp. With SkipBusy it
// gets none (gpu.shunned), and the run says so once per GPU and reason;
// the check before each start (claim.go) still looks again, as others may
// have started since. A look that fails (an answer that cannot be read) or
// hangs is said once per host and reason; one that finds no nvidia-smi at
// all is not said (GPUs listed by hand, or pretend ones). Either leaves
// what others use unknown, and the GPUs usable as if idle. A GPU with a
// job of this run keeps what was known before the job: nvidia-smi cannot
// tell the job's use from others'.

// usageAnswer is what a host's nvidia-smi said of its GPUs.
type usageAnswer struct {
	h    *hostSlots
	gpus []executor.GPU
	err  error
}

// watchUsages starts the looks at the GPUs of every host that is opened
// and not watched yet.
func (r *run) watchUsages() {
	for _, h := range r.sched.table.hosts {
		if !h.opening && !h.removed {
			r.watchUsage(h)
		}
	}
}

// watchUsage starts the looks at h's GPUs, unless they run already: the
// GPUs take no job until the first answer.
func (r *run) watchUsage(h *hostSlots) {
	if h.cluster && !h.watched {
		r.gpuTypes(h)
		r.rejectUnsuited()
	}
	if h.cluster || h.watched {
		return
	}
	h.watched = true
	r.sched.table.setUnseen(h, true)
	name := h.host.Name
	kick := make(chan struct{}, 1)
	h.lookNow = kick
	go func() {
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-t.C:
			case <-kick:
				t.Stop()
			case <-r.bg.Done():
				return
			}
			gpus, err := r.opts.Executor.ProbeGPUs(r.bg, name)
			select {
			case r.mem.usages <- usageAnswer{h: h, gpus: gpus, err: err}:
			case <-r.bg.Done():
				return
			}
			t.Reset(r.opts.Recheck)
		}
	}()
}

// gpuTypes learns the GPU types a cluster h said it has as it was opened:
// a cluster's GPUs are Slurm's, and that is all it says of them (kind.go).
func (r *run) gpuTypes(h *hostSlots) {
	h.watched = true
	if typer, ok := r.opts.Executor.(executor.GPUTyper); ok {
		h.gres = typer.GPUTypes(h.host.Name)
	}
}

// lookAgain has h's GPUs looked at now (the host is back).
func (h *hostSlots) lookAgain() {
	select {
	case h.lookNow <- struct{}{}:
	default:
	}
}

// onUsage records what others use on h's GPUs.
func (r *run) onUsage(a usageAnswer) {
	h := a.h
	if unreachable(a.err) {
		r.hostDown(h, a.err) // looked at again once it is back
		return
	}
	switch {
	case a.err == nil:
		h.lookErr, h.looked = "", true
	case errors.Is(a.err, executor.ErrNoNvidiaSMI):
		// GPUs listed by hand (or pretend ones): nothing to say.
	case h.lookErr != a.err.Error():
		// Said once while it lasts: a look that hangs or fails again
		// says nothing new.
		h.lookErr = a.err.Error()
		r.record(r.hostWarning(h, fmt.Errorf("what others use on its GPUs is not known (asked again every %s): %w", r.opts.Recheck, a.err)))
	}
	seen, lost := byIndex(a.gpus)
	first := h.unseen
	r.sched.table.setUnseen(h, false)
	changed := a.err == nil && len(a.gpus) > 0 && r.absentGPUs(h, seen, lost)
	if a.err == nil && len(a.gpus) > 0 && r.sched.table.learnKinds(h, seen) {
		changed = true
	}
	if first || changed {
		// What its GPUs are is known now: a job that no GPU of the lab
		// suits, or pinned to one left out, may be known so too.
		r.rejectUnsuited()
	}
	for _, g := range h.gpus {
		r.sched.table.setBlocked(g, func() {
			if a.err != nil || g.jobs() > 0 {
				return // unknown now, or not others' alone: as it was
			}
			g.others = "" // a MIG instance's own use is not said
			if _, mig := g.id.MIG(); !mig {
				g.others = seen[int(g.id)].BusyWhy(r.opts.BusyMemoryMB)
			}
			g.shunned = r.opts.SkipBusy && g.others != ""
		})
		if g.shunned && g.reported != g.others {
			g.reported = g.others
			r.record(Event{Time: time.Now(), Event: EventBusy, Run: r.id, Host: h.host.Name, GPUs: []executor.GPUID{g.id},
				Error: fmt.Sprintf("GPU %s is busy with other work: %s", g.id, g.others)})
		}
	}
}

// byIndex sorts what nvidia-smi said of GPUs by index: those it reads
// (seen), and the words of those it cannot reach (lost, fallen off the
// bus: not to be used).
func byIndex(gpus []executor.GPU) (seen map[int]executor.GPU, lost map[int]string) {
	seen, lost = map[int]executor.GPU{}, map[int]string{}
	for _, info := range gpus {
		if info.Error != "" {
			lost[info.Index] = info.Error
			continue
		}
		seen[info.Index] = info
	}
	return seen, lost
}

// learnKinds records what the look seen says h's GPUs are: their names and
// memory (kind.go) and their MIG instances (mig.go); it reports whether a
// slot came or went.
func (t *slotTable) learnKinds(h *hostSlots, seen map[int]executor.GPU) bool {
	for id, info := range seen {
		if g := h.byID[executor.GPUID(id)]; g != nil {
			g.setKind(info.Name, max(info.MemoryTotalMB, 0))
		}
	}
	return t.migSlots(h, seen)
}

// othersOnAll says why j, pinned to a host, waits when every GPU of the
// host it may use is kept from it by others' work, or "".
func (t *slotTable) othersOnAll(j *Job) string {
	h := t.byName[j.Host]
	if h == nil || h.cluster || h.down {
		return ""
	}
	var whys []string
	for _, g := range h.gpus {
		if g.cap == 0 || !g.mayRun(j) {
			continue
		}
		why := g.others
		if !g.shunned {
			why = strings.TrimPrefix(g.busy, h.host.Name+": ")
		}
		if why == "" {
			return ""
		}
		whys = append(whys, fmt.Sprintf("GPU %s: %s", g.id, why))
	}
	if len(whys) == 0 {
		return ""
	}
	sort.Strings(whys)
	return fmt.Sprintf("waits: every GPU of host %s it may use is busy with other work (%s)", h.host.Name, strings.Join(whys, "; "))
}

// setUnseen says whether h's first look is still to answer.
func (t *slotTable) setUnseen(h *hostSlots, unseen bool) {
	if h.unseen == unseen {
		return
	}
	t.freeSlots -= t.hostContrib(h)
	h.unseen = unseen
	t.freeSlots += t.hostContrib(h)
	t.countUnseen()
}

// countUnseen counts unseenUp anew; when it turns to or from none, GPUs
// that others use open or close, and freeSlots is counted anew.
func (t *slotTable) countUnseen() {
	n := t.unseenCount()
	if (n == 0) == (t.unseenUp == 0) {
		t.unseenUp = n
		return
	}
	t.unseenUp = n
	t.freeSlots = 0
	for _, h := range t.hosts {
		t.freeSlots += t.hostContrib(h)
	}
}

// unseenCount counts the hosts of the inventory still being opened, or up
// with their first look not answered.
func (t *slotTable) unseenCount() int {
	n := 0
	for _, h := range t.hosts {
		if (h.unseen && !h.down || h.opening) && !h.removed {
			n++
		}
	}
	return n
}

// absentGPUs leaves out the GPUs of h's inventory entry that its
// nvidia-smi does not list (seen), or cannot reach (lost, with its words),
// saying so once, and takes back those it lists again; it reports whether
// any changed.
func (r *run) absentGPUs(h *hostSlots, seen map[int]executor.GPU, lost map[int]string) bool {
	t := r.sched.table
	changed := false
	for _, g := range h.gpus {
		if _, mig := g.id.MIG(); mig {
			continue // migSlots' own
		}
		idx := int(g.id)
		_, listed := seen[idx]
		if g.absent == !listed || g.listed == 0 {
			continue
		}
		changed = true
		t.setBlocked(g, func() {
			g.absent = !listed
			g.cap = g.slots()
		})
		switch {
		case g.absent && lost[idx] != "":
			r.record(r.hostWarning(h, fmt.Errorf("GPU %d is left out, and jobs pinned to it are rejected: nvidia-smi says %q (its other GPUs stay: %s)", idx, lost[idx], h.listed(seen))))
		case g.absent:
			r.record(r.hostWarning(h, fmt.Errorf("GPU %d is in the inventory, but nvidia-smi there does not list it (it lists %s): it is left out, and jobs pinned to it are rejected", idx, h.listed(seen))))
		}
	}
	return changed
}

// rejectUnsuited rejects the waiting jobs that no host can now ever run,
// with the reason (a GPU left out, no GPU of the kind a job needs).
func (r *run) rejectUnsuited() {
	why := map[*queued]error{}
	for _, q := range r.sched.dropIf(func(q *queued) bool {
		final, err := r.admissible(q.job)
		why[q] = err
		return err != nil && final
	}) {
		e := r.event(EventRejected, q.job, q.attempts)
		e.Error = why[q].Error()
		r.final(e)
	}
}

// listed says which GPUs nvidia-smi lists on h: "GPUs 0,1".
func (h *hostSlots) listed(seen map[int]executor.GPU) string {
	ids := make([]executor.GPUID, 0, len(seen))
	for id := range seen {
		ids = append(ids, executor.GPUID(id))
	}
	slices.Sort(ids)
	return "GPUs " + executor.GPUIDs(ids)
}
