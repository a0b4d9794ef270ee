package dispatch

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// gpu is one GPU of one host and its slots.
type gpu struct {
	host *hostSlots
	// id is what its slots give a job: a GPU, or a MIG instance of one
	// (the run's looks find those: usage.go).
	id   executor.GPUID
	cap  int // slots: repeats of the id times slots_per_gpu
	used int
	// lastUsed is when a job last started here (a scheduler tick): the least
	// recently used GPU is picked first, which spreads jobs over all GPUs.
	lastUsed uint64
	// lock is this run's lock on the GPU, held from its first job
	// here to its last; unlocked is the Lost channel of the lock it last let
	// go of, so that a new lock waits for the old holder to be gone.
	lock     executor.GPULock
	unlocked <-chan struct{}
	// claiming is set while a job's locks or busy check for this GPU are
	// under way; busy says why the GPU takes no job until its recheck;
	// busyEpoch tells the latest recheck timer from older ones; reported is
	// the reason last told, so that a GPU busy for an hour says so once.
	claiming  bool
	busy      string
	busyEpoch int
	reported  string
	// lockedOut is set while it is busy because another run holds its
	// lock (sayWaiting).
	lockedOut bool
	// sharedSaid is set once the run said that others use the GPU.
	sharedSaid bool
	// What others use on the GPU (usage.go): others says why it is busy
	// with other work by the last look ("" for idle, or not known);
	// shunned is set while SkipBusy keeps jobs off it for that.
	others  string
	shunned bool
	// model and vramMB are what the looks say the GPU is (kind.go): its
	// name and its memory ("" and 0: not said); modelKey is its name in
	// lower case.
	model, modelKey string
	vramMB          int
	// listed is the slots the inventory gives the GPU (a MIG instance: its
	// GPU's); absent is set while the host's nvidia-smi does not list it:
	// it then has none (cap 0).
	listed int
	absent bool
	// MIG (mig.go): split is set while the GPU is in MIG mode, its
	// instances have its slots and it none; an instance has its profile
	// ("3g.40gb") in mig and the name CUDA_VISIBLE_DEVICES gives it
	// ("MIG-…") in visible.
	split   bool
	mig     string
	visible string
	// vetted is set once SkipBusy's check before a start found the GPU
	// free of others' work, while jobs of this run are there.
	vetted bool
	// Memory budgets (memory.go): memTotal and memOthers are what
	// nvidia-smi said of the GPU's memory and of others' use of it (0:
	// not asked yet); memUsed sums the memory its running jobs declare,
	// memJobs counts them (they take no slot).
	memTotal, memOthers int
	// memUnknown is set when nvidia-smi gives no figure for its memory.
	memUnknown       bool
	memUsed, memJobs int
}

// jobs counts the jobs of this run on g: those in its slots and those
// that declare memory.
func (g *gpu) jobs() int { return g.used + g.memJobs }

// open reports whether g may be given a job now (slots aside).
func (g *gpu) open() bool { return !g.claiming && g.busy == "" && !g.shunned }

// hostSlots is one host's GPUs in inventory order, and its health.
type hostSlots struct {
	host inventory.Host
	gpus []*gpu
	byID map[executor.GPUID]*gpu
	// down is set while the host cannot be reached: its slots are not given
	// out. since and why say when and why it went down; episode counts the
	// times it did, so that a late timer about an earlier one is ignored.
	down    bool
	since   time.Time
	why     string
	episode int
	// expired is set once the host has been down longer than the run's
	// host-down timeout: jobs that only it could run fail.
	expired bool
	// noLocks is why the host cannot lock GPUs (it has no flock); noProbe
	// is set once it was found that its nvidia-smi cannot be asked.
	noLocks error
	noProbe bool
	// share is how many of its GPUs this run may keep busy while another
	// run below its own fair share waits for them (executor.GPULock.Share,
	// read at each turn of the loop from the locks held there: shares);
	// -1 when none waits. waiting says who waits, as the holder said.
	share   int
	waiting string
	// shareWatch is the channel of the lock watched for the share's
	// changes (watchShare), shareLock that lock.
	shareWatch <-chan struct{}
	shareLock  executor.GPULock
	// asked is set while the host's lock holder keeps a record that the
	// run waits there (another run's lock kept a GPU from it, or it is held
	// to its share with jobs for the host: sayWaiting); told once it was
	// told that the run waits no more, until a job for the host waits
	// again. needSaid is what the first of those jobs needs there, as
	// said (0 GPUs: not said, and 1 for a record that a refused lock
	// made). said orders what the machine is told (say).
	asked, told bool
	needSaid    executor.Need
	said        struct {
		mu  sync.Mutex
		seq atomic.Int64
	}
	// opening is set while the host is still being opened: it is down
	// (why says so), with no host-down timeout and no host event.
	opening bool
	// removed is set once an edit of the inventory dropped the host: its
	// GPUs have no slots, its running jobs finish.
	removed bool
	// cluster is set for a Slurm cluster: its one pseudo-GPU (id 0) has
	// max_jobs slots, a job takes one whatever GPUs it asks for, and Slurm
	// gives the GPUs. limit, when set, is the fewer slots it has since it
	// refused a job for a limit, until one of its jobs ends. gres are the
	// types it names its GPUs by.
	cluster bool
	limit   int
	gres    []string
	// unfit says, by Prelude key, which environments the host cannot set
	// up (unfit.go); preludeKey is the key of the host's own (that of a job
	// of no conda env of its own).
	unfit      map[string]unfitMark
	preludeKey string
	// memAsk says whether its GPUs' memory was asked of nvidia-smi
	// (memory.go); memErr is why the answer did not come, and memNever
	// is set when it never will (no nvidia-smi there).
	memAsk   memAsk
	memErr   string
	memNever bool
	// watched is set once the run looks at what others use on its GPUs
	// (usage.go), or once a cluster's GPU types (gres) are known (kind.go);
	// unseen until the first look answered; looked once a
	// look answered; lookNow has the next look made at once; lookErr is
	// why the last look failed.
	watched bool
	unseen  bool
	looked  bool
	lookNow chan struct{}
	lookErr string
}

// fits reports whether j, by the number of GPUs it asks for, can ever run
// on h (a Slurm cluster: always, a job over several hosts as one batch
// job of that many nodes).
func (h *hostSlots) fits(j *Job) bool { return h.cluster || h.live() >= j.GPUs }

// hostsOf is how many of the hosts a job over several hosts needs h
// stands for: all of them on a Slurm cluster (its nodes), else one.
func (h *hostSlots) hostsOf(j *Job) int {
	if h.cluster {
		return max(j.Nodes, 1)
	}
	return 1
}

// slots is how many slots g has: those the inventory gives it, or none
// while nvidia-smi does not list it or it is split into MIG instances.
func (g *gpu) slots() int {
	if g.absent || g.split {
		return 0
	}
	return g.listed
}

// need is how many slots of h j takes.
func (h *hostSlots) need(j *Job) int {
	if h.cluster {
		return 1
	}
	return j.GPUs
}

// live counts the GPUs with slots (an inventory edit may have taken some
// away) that one job of h may have together: its whole GPUs, or one MIG
// instance (a CUDA process uses one).
func (h *hostSlots) live() int {
	n, mig := 0, 0
	for _, g := range h.gpus {
		switch {
		case g.cap == 0:
		case g.mig != "":
			mig = 1
		default:
			n++
		}
	}
	return max(n, mig)
}

// slotTable is every host:gpu slot of a run. It is owned by one goroutine.
type slotTable struct {
	hosts  []*hostSlots
	byName map[string]*hostSlots
	tick   uint64
	// freeSlots counts the slots a job could be given now: free, on an up
	// host, on a GPU that is open (not claiming, not set aside). A pass over
	// a long queue stops as soon as nothing is left to give. Every change to
	// a GPU's use, capacity or openness, or to a host's health, goes through
	// contrib so that the count stays exact.
	freeSlots int
	// unseenUp counts the hosts up whose GPUs' first look has not
	// answered: until none is left, GPUs that others use take no job (one
	// of those hosts may have an idle GPU for it).
	unseenUp int
	// waitingMem counts the waiting jobs by the memory they declare;
	// minMem is the least a waiting job may declare on some host (its own
	// or a host's mem:; 0: none does): a GPU shared by jobs that declare
	// memory adds to freeSlots only while that much is left (memory.go).
	waitingMem map[int]int
	minMem     int
	// hostMinMem is the least mem: of a host (0: none has one).
	hostMinMem int
	// busyGPUs counts the GPUs with a job of the run, all hosts (the MIG
	// instances of one GPU count once); with maxGPUs of them busy
	// (Options.MaxGPUs, 0: no cap), a job goes only to a GPU that has one
	// already, or to an instance of one.
	busyGPUs, maxGPUs int
}

func newSlotTable(inv *inventory.Inventory) *slotTable {
	t := &slotTable{byName: map[string]*hostSlots{}, waitingMem: map[int]int{}}
	t.update(inv)
	return t
}

// update makes inv's hosts and GPUs the table's: new hosts and
// GPUs get slots, a host or GPU that inv drops keeps its running jobs but
// gets no slot, and slots_per_gpu takes its new value. It returns what
// changed, for people: not a host being opened that gets its GPUs or is
// left out, which is no edit.
func (t *slotTable) update(inv *inventory.Inventory) []string {
	var changes []string
	in := map[string]bool{}
	for _, h := range inv.Hosts {
		in[h.Name] = true
		hs := t.byName[h.Name]
		switch {
		case hs == nil:
			hs = &hostSlots{byID: map[executor.GPUID]*gpu{}, share: -1}
			t.hosts = append(t.hosts, hs)
			t.byName[h.Name] = hs
			changes = append(changes, fmt.Sprintf("added host %s (GPUs %s)", h.Name, executor.GPUIDs(asIDs(h.GPUs))))
		case hs.removed:
			hs.removed = false
			changes = append(changes, fmt.Sprintf("host %s is back (GPUs %s)", h.Name, executor.GPUIDs(asIDs(h.GPUs))))
		}
		before := hs.ids()
		hs.host = h
		hs.preludeKey = HostPrelude(h).Key()
		hs.cluster = h.Slurm != nil
		caps := map[int]int{}
		gpus := h.GPUs
		if hs.cluster {
			gpus = []int{0}
			caps[0] = h.Slurm.MaxJobs
			if hs.limit > 0 {
				caps[0] = min(hs.limit, h.Slurm.MaxJobs)
			}
		}
		for _, idx := range gpus {
			if !hs.cluster {
				caps[idx] += h.SlotsPerGPU
			}
			if id := executor.GPUID(idx); hs.byID[id] == nil {
				g := &gpu{host: hs, id: id}
				hs.byID[id] = g
				hs.gpus = append(hs.gpus, g)
			}
		}
		for _, g := range hs.gpus {
			g.listed = caps[g.id.GPU()] // a MIG instance has its GPU's
			g.cap = g.slots()
		}
		if after := hs.ids(); before != "" && after != before && !hs.opening {
			changes = append(changes, fmt.Sprintf("host %s GPUs %s → %s", h.Name, before, after))
		}
	}
	for _, hs := range t.hosts {
		if !in[hs.host.Name] && !hs.removed {
			hs.removed = true
			for _, g := range hs.gpus {
				g.cap = 0
			}
			if !hs.opening {
				changes = append(changes, fmt.Sprintf("removed host %s (its running jobs finish)", hs.host.Name))
			}
		}
	}
	t.hostMinMem = 0
	for _, hs := range t.hosts {
		if m := hs.host.MemMB; m > 0 && !hs.removed && (t.hostMinMem == 0 || m < t.hostMinMem) {
			t.hostMinMem = m
		}
	}
	t.unseenUp = t.unseenCount()
	t.setMinMem()
	return changes
}

// contrib is what g adds to freeSlots: its free slots, or, on a GPU with
// jobs that declare memory, 1 while some of its budget is left.
func (t *slotTable) contrib(g *gpu) int {
	switch {
	case g.host.down || !g.open() || g.host.unseen || g.others != "" && t.unseenUp > 0:
		return 0
	case g.memJobs > 0 && t.minMem > 0 && g.memRoom() && g.budget()-g.memUsed >= t.minMem:
		return 1
	case g.memJobs > 0:
		return 0
	}
	return max(g.cap-g.used, 0)
}

// hostContrib is what h's GPUs add to freeSlots.
func (t *slotTable) hostContrib(h *hostSlots) int {
	n := 0
	for _, g := range h.gpus {
		n += t.contrib(g)
	}
	return n
}

// setBlocked runs f, which changes whether g is open (claiming, busy).
func (t *slotTable) setBlocked(g *gpu, f func()) {
	before := t.contrib(g)
	f()
	t.freeSlots += t.contrib(g) - before
}

// check says why j can never run here, or nil.
func (t *slotTable) check(j *Job) error {
	if j.Host != "" {
		h := t.byName[j.Host]
		switch {
		case h == nil:
			return fmt.Errorf("unknown host %q (hosts: %s)", j.Host, strings.Join(t.names(), ", "))
		case h.removed:
			return fmt.Errorf("host %s was removed from the inventory", j.Host)
		case h.cluster && j.GPU >= 0:
			return fmt.Errorf("@%s:%d: %s is a Slurm cluster, where Slurm chooses the GPUs: pin the cluster only (@%s)", j.Host, j.GPU, j.Host, j.Host)
		case j.GPU >= 0 && h.byID[executor.GPUID(j.GPU)] != nil && h.byID[executor.GPUID(j.GPU)].absent:
			return fmt.Errorf("host %s has no GPU %d: nvidia-smi there does not list it (its GPUs: %s)", j.Host, j.GPU, h.ids())
		case j.GPU >= 0 && !h.has(j.GPU):
			return fmt.Errorf("host %s has no GPU %d (its GPUs: %s)", j.Host, j.GPU, h.ids())
		case !h.fits(j):
			return fmt.Errorf("gpus=%d: host %s has only %d GPUs", j.GPUs, j.Host, h.live())
		case j.Nodes > 1 && !h.cluster:
			return fmt.Errorf("host=%s and nodes=%d: a job over several hosts may be pinned only to a Slurm cluster (tags= or model= choose machines)", j.Host, j.Nodes)
		}
		return nil
	}
	if j.GPU >= 0 {
		return fmt.Errorf("gpu=%d without a host: say which host too (@HOST:%d)", j.GPU, j.GPU)
	}
	if j.Nodes > 1 {
		var fit []string
		for _, h := range t.hosts {
			if !h.removed && h.cluster {
				return nil
			}
			if !h.removed && h.fits(j) {
				fit = append(fit, h.host.Name)
			}
		}
		if len(fit) < j.Nodes {
			have := "no host has"
			switch len(fit) {
			case 0:
			case 1:
				have = fmt.Sprintf("only host %s has", fit[0])
			default:
				have = fmt.Sprintf("only %d hosts (%s) have", len(fit), strings.Join(fit, ", "))
			}
			return fmt.Errorf("nodes=%d gpus=%d: %s %s or more", j.Nodes, j.GPUs, have, Count(j.GPUs, "GPU"))
		}
		return nil
	}
	most := 0
	for _, h := range t.hosts {
		if h.cluster && !h.removed {
			return nil
		}
		most = max(most, h.live())
	}
	if j.GPUs > most {
		return fmt.Errorf("gpus=%d: no host has that many GPUs (the most is %d)", j.GPUs, most)
	}
	return nil
}

func (t *slotTable) names() []string {
	var names []string
	for _, h := range t.hosts {
		if !h.removed {
			names = append(names, h.host.Name)
		}
	}
	return names
}

// has reports whether h's GPU idx, or a MIG instance of it, has slots.
func (h *hostSlots) has(idx int) bool {
	return slices.ContainsFunc(h.gpus, func(g *gpu) bool { return g.cap > 0 && g.id.GPU() == idx })
}

// asIDs names the GPUs of an inventory entry.
func asIDs(idx []int) []executor.GPUID {
	ids := make([]executor.GPUID, len(idx))
	for i, n := range idx {
		ids[i] = executor.GPUID(n)
	}
	return ids
}

// ids lists h's GPUs that have slots.
func (h *hostSlots) ids() string {
	var ids []string
	for _, g := range h.gpus {
		if g.cap > 0 {
			ids = append(ids, g.id.String())
		}
	}
	return strings.Join(ids, ",")
}

// placement is where a job runs: GPUs of one host, one slot on each, or
// mem MiB of the budget of each (a job that declares its memory).
type placement struct {
	host *hostSlots
	gpus []*gpu
	mem  int
}

// String is "node1:2" or "node1:0,1", or "hpc" on a Slurm cluster;
// "node1:0,1+node2:0,1" for a job over several hosts.
func (p placement) String() string {
	if p.host.cluster {
		return p.host.host.Name
	}
	parts := p.parts()
	s := make([]string, len(parts))
	for i, pt := range parts {
		s[i] = pt.host.host.Name + ":" + executor.GPUIDs(pt.gpuIDs())
	}
	return strings.Join(s, "+")
}

// gpuIDs are the GPUs p gives its job (on a job over several hosts, part
// 0's: the others are in parts): none on a Slurm cluster, where Slurm
// picks them (its one slot-holding pseudo-GPU is not one).
func (p placement) gpuIDs() []executor.GPUID {
	if p.host.cluster {
		return nil
	}
	ids := make([]executor.GPUID, 0, len(p.gpus))
	for _, g := range p.gpus {
		if g.host == p.host {
			ids = append(ids, g.id)
		}
	}
	return ids
}

// partHost is the host of p's part rank (p.host for a job on one host).
func (p placement) partHost(rank int) *hostSlots {
	h := p.host
	for _, g := range p.gpus {
		if g.host != h {
			h, rank = g.host, rank-1
		}
		if rank == 0 {
			break
		}
	}
	return h
}

// parts splits p by host, in rank order: one placement for a job on one
// host, one per part of a job over several ([nodes=N]), part 0 first
// (p.host's). Its GPUs are grouped by host, in that order.
func (p placement) parts() []placement {
	if len(p.gpus) == 0 {
		return []placement{p}
	}
	var out []placement
	for _, g := range p.gpus {
		if n := len(out); n == 0 || out[n-1].host != g.host {
			out = append(out, placement{host: g.host, mem: p.mem})
		}
		out[len(out)-1].gpus = append(out[len(out)-1].gpus, g)
	}
	return out
}

// held counts the slots reserved for the oldest waiting job.
type held map[*gpu]int

func (t *slotTable) free(g *gpu, h held) int {
	n := g.cap - g.used
	if len(h) > 0 {
		n -= h[g]
	}
	return n
}

// candidates lists j's eligible hosts, up or down (some may have fewer GPUs
// than j needs).
func (t *slotTable) candidates(j *Job) []*hostSlots {
	if j.Host != "" {
		if h := t.byName[j.Host]; h != nil {
			return []*hostSlots{h}
		}
		return nil
	}
	return t.hosts
}

// unrunnable says why no host j may run on can be waited for any longer
// (all have been down past the host-down timeout), or returns "".
func (t *slotTable) unrunnable(j *Job, timeout time.Duration) string {
	var why []string
	left := max(j.Nodes, 1) // hosts not given up on that it needs
	for _, h := range t.candidates(j) {
		if h.removed || !h.fits(j) {
			continue // never a place for j
		}
		if !h.expired {
			if left -= h.hostsOf(j); left <= 0 {
				return ""
			}
			continue
		}
		why = append(why, fmt.Sprintf("%s down since %s: %s", h.host.Name, h.since.Format(time.TimeOnly), h.why))
	}
	which := "its host"
	switch {
	case j.Nodes > 1:
		which = fmt.Sprintf("too many of the hosts it fits on (it needs %d)", j.Nodes)
	case len(why) > 1:
		which = "every host it fits on"
	}
	return fmt.Sprintf("%s stayed down longer than --host-down-timeout %s (%s)", which, timeout, strings.Join(why, "; "))
}

// setDown takes h's slots out of use; it reports false when h was down
// already.
func (t *slotTable) setDown(h *hostSlots, why string, now time.Time) bool {
	if h.down {
		return false
	}
	t.freeSlots -= t.hostContrib(h)
	h.down, h.since, h.why = true, now, why
	h.episode++
	t.countUnseen()
	return true
}

// setOpening takes h's slots out of use until setOpened.
func (t *slotTable) setOpening(h *hostSlots, now time.Time) {
	t.setDown(h, "not answered yet", now)
	h.opening = true
	t.countUnseen()
}

// setOpened ends setOpening: h's slots are given out, unless it is then
// said to be down.
func (t *slotTable) setOpened(h *hostSlots) {
	if h.opening {
		h.opening = false
		t.setUp(h)
		t.countUnseen()
	}
}

// opening reports whether the host named name is still being opened.
func (t *slotTable) opening(name string) bool {
	h := t.byName[name]
	return h != nil && h.opening
}

// anyOpening reports whether a host is still being opened.
func (t *slotTable) anyOpening() bool {
	return slices.ContainsFunc(t.hosts, func(h *hostSlots) bool { return h.opening })
}

// setUp gives h's slots out again.
func (t *slotTable) setUp(h *hostSlots) {
	if !h.down {
		return
	}
	h.down, h.expired = false, false
	t.freeSlots += t.hostContrib(h)
	t.countUnseen()
}

// freeGPUs lists h's GPUs with a slot j may use, least loaded and least
// recently used first.
func (t *slotTable) freeGPUs(h *hostSlots, j *Job, hd held) []*gpu {
	var gs []*gpu
	mem := h.memOf(j)
	shared, maxed := h.overShare(), t.maxGPUs > 0 && t.busyGPUs >= t.maxGPUs
	for _, g := range h.gpus {
		if mem == 0 && g.used >= g.cap {
			continue // full: the most common case in a busy lab
		}
		if (shared || maxed) && !h.inUse(g, nil) {
			continue // a GPU it frees goes to the run that waits
		}
		if g.open() && t.takes(g, mem, hd) && g.mayRun(j) {
			gs = append(gs, g)
		}
	}
	if len(gs) > 1 {
		sort.SliceStable(gs, func(a, b int) bool { return better(gs[a], gs[b]) })
	}
	return gs
}

// whyCapped says why j waits when the run keeps as many GPUs busy as
// --max-gpus lets it, or as its fair share of every host j may run on
// while other runs wait for them; "" otherwise.
func (t *slotTable) whyCapped(j *Job) string {
	if t.maxGPUs > 0 && t.busyGPUs >= t.maxGPUs {
		return fmt.Sprintf("--max-gpus %d: the run keeps %s busy", t.maxGPUs, Count(t.busyGPUs, "GPU"))
	}
	var capped []string
	for _, h := range t.candidates(j) {
		if !h.overShare() {
			return ""
		}
		capped = append(capped, fmt.Sprintf("on %s, %s of its %d GPUs; this run keeps its share, %d", h.host.Name, cmp.Or(h.waiting, "another run waits with less than its share"), len(h.gpus), h.share))
	}
	if len(capped) == 0 {
		return ""
	}
	return "fair share: " + strings.Join(capped, "; ")
}

// claiming reports whether a claim on a GPU is being settled.
func (t *slotTable) claiming() bool {
	for _, h := range t.hosts {
		for _, g := range h.gpus {
			if g.claiming {
				return true
			}
		}
	}
	return false
}

// overShare reports whether the run keeps as many of h's GPUs busy as its
// fair share while another run waits for them: then it starts no job on a
// GPU of h it has none on. A share counts GPUs, whatever the run has on
// them: MIG instances of one GPU count once, as jobs packed on one do.
func (h *hostSlots) overShare() bool {
	if h.share < 0 {
		return false
	}
	busy := 0
	for i, g := range h.gpus {
		if g.jobs() > 0 && !h.inUse(g, h.gpus[:i]) {
			busy++
		}
	}
	return busy >= h.share
}

// inUse reports whether one of gs (all of h's GPUs when nil) is g's GPU,
// or an instance of it, with a job of the run.
func (h *hostSlots) inUse(g *gpu, gs []*gpu) bool {
	if gs == nil {
		gs = h.gpus
	}
	for _, o := range gs {
		if o.jobs() > 0 && o.id.GPU() == g.id.GPU() {
			return true
		}
	}
	return false
}

// place finds slots for j outside what is held, or reports false. A job
// with a preference goes there when the slots it needs are free there.
// Otherwise, among hosts with room it picks the one whose best GPU is least
// loaded and least recently used, so single-GPU jobs spread over hosts.
func (t *slotTable) place(j *Job, hd held) (placement, bool) {
	if j.Nodes > 1 {
		return t.placeGang(j, hd)
	}
	if p, ok := t.preferred(j, hd); ok {
		return p, true
	}
	var best placement
	for _, h := range t.candidates(j) {
		if !h.usable(j) {
			continue
		}
		gs := t.freeGPUs(h, j, hd)
		if len(gs) < h.need(j) {
			continue
		}
		if best.host == nil || better(gs[0], best.gpus[0]) {
			best = placement{host: h, gpus: gs[:h.need(j)], mem: h.memOf(j)}
		}
	}
	// CUDA_VISIBLE_DEVICES lists a job's GPUs in id order.
	sort.Slice(best.gpus, func(a, b int) bool { return best.gpus[a].id < best.gpus[b].id })
	return best, best.host != nil
}

// hostGPUs is a host and GPUs of it a job may take.
type hostGPUs struct {
	h  *hostSlots
	gs []*gpu
}

// gangHosts lists, in inventory order, the machines that may take a part
// of j ([nodes=N]) now, each with its free GPUs j may use, best first.
func (t *slotTable) gangHosts(j *Job, hd held) []hostGPUs {
	var out []hostGPUs
	for _, h := range t.candidates(j) {
		if h.mayTakePart(j) {
			out = append(out, hostGPUs{h, t.freeGPUs(h, j, hd)})
		}
	}
	return out
}

// partHosts counts the machines that may take a part of j now.
func (t *slotTable) partHosts(j *Job) int {
	n := 0
	for _, h := range t.candidates(j) {
		if h.mayTakePart(j) {
			n++
		}
	}
	return n
}

// mayTakePart says whether h, a machine (not a Slurm cluster), may take
// a part of j now: up, fit for it, with GPUs enough.
func (h *hostSlots) mayTakePart(j *Job) bool { return !h.cluster && h.usable(j) && h.fits(j) }

// placeGang places a job over several hosts ([nodes=N]): N machines with
// GPUs GPUs free each, else a Slurm cluster's slot (one batch job of N
// nodes), or nothing. It picks the machines whose best GPUs are least
// loaded (as place does), and gives the parts their ranks in inventory
// order, so that a job's hosts always come in one order.
func (t *slotTable) placeGang(j *Job, hd held) (placement, bool) {
	var room []hostGPUs
	for _, c := range t.gangHosts(j, hd) {
		if len(c.gs) >= j.GPUs {
			room = append(room, hostGPUs{c.h, c.gs[:j.GPUs]})
		}
	}
	if len(room) < j.Nodes {
		for _, h := range t.candidates(j) {
			if h.cluster && h.usable(j) {
				if gs := t.freeGPUs(h, j, hd); len(gs) > 0 {
					return placement{host: h, gpus: gs[:1]}, true
				}
			}
		}
		return placement{}, false
	}
	chosen := slices.Clone(room)
	slices.SortStableFunc(chosen, func(a, b hostGPUs) int {
		switch {
		case better(a.gs[0], b.gs[0]):
			return -1
		case better(b.gs[0], a.gs[0]):
			return 1
		}
		return 0
	})
	chosen = chosen[:j.Nodes]
	p := placement{}
	for _, c := range room {
		if slices.ContainsFunc(chosen, func(o hostGPUs) bool { return o.h == c.h }) {
			if p.host == nil {
				p.host = c.h
			}
			gs := slices.Clone(c.gs)
			sort.Slice(gs, func(a, b int) bool { return gs[a].id < gs[b].id })
			p.gpus = append(p.gpus, gs...)
		}
	}
	return p, true
}

// preferred places j where it prefers to go, if it has a preference and
// that place has room now.
func (t *slotTable) preferred(j *Job, hd held) (placement, bool) {
	h := t.byName[j.Prefer]
	if h == nil || !h.usable(j) || j.Host != "" && j.Host != j.Prefer {
		return placement{}, false
	}
	gs := t.freeGPUs(h, j, hd)
	if j.PreferGPU >= 0 {
		i := slices.IndexFunc(gs, func(g *gpu) bool { return g.id.GPU() == j.PreferGPU })
		if i < 0 {
			return placement{}, false
		}
		gs = append([]*gpu{gs[i]}, slices.Delete(slices.Clone(gs), i, i+1)...)
	}
	if len(gs) < h.need(j) {
		return placement{}, false
	}
	p := placement{host: h, gpus: gs[:h.need(j)], mem: h.memOf(j)}
	sort.Slice(p.gpus, func(a, b int) bool { return p.gpus[a].id < p.gpus[b].id })
	return p, true
}

// checkPrefer says why j's preference names no place j could go, or nil.
// Unlike check, it is only asked as a job arrives: an inventory edit that
// takes the preferred place away leaves the job free to go anywhere.
func (t *slotTable) checkPrefer(j *Job) error {
	if j.Prefer == "" {
		return nil
	}
	h := t.byName[j.Prefer]
	switch {
	case h == nil || h.removed:
		return fmt.Errorf("prefer=%s: unknown host (hosts: %s)", j.Prefer, strings.Join(t.names(), ", "))
	case j.Host != "" && j.Host != j.Prefer:
		return fmt.Errorf("prefer=%s: the job is pinned to host %s", j.Prefer, j.Host)
	case j.PreferGPU >= 0 && h.cluster:
		return fmt.Errorf("prefer=%s:%d: %s is a Slurm cluster, where Slurm chooses the GPUs", j.Prefer, j.PreferGPU, j.Prefer)
	case j.PreferGPU >= 0 && !h.has(j.PreferGPU):
		return fmt.Errorf("prefer=%s:%d: host %s has no GPU %d (its GPUs: %s)", j.Prefer, j.PreferGPU, j.Prefer, j.PreferGPU, h.ids())
	case j.PreferGPU >= 0 && j.GPU >= 0 && j.GPU != j.PreferGPU:
		return fmt.Errorf("prefer=%s:%d: the job is pinned to GPU %d", j.Prefer, j.PreferGPU, j.GPU)
	}
	return nil
}

// better reports whether a is idle where b is busy with others' work, or
// as idle or busy and less loaded (its jobs, slots or memory), or as
// loaded and less recently used.
func better(a, b *gpu) bool {
	if (a.others == "") != (b.others == "") {
		return a.others == ""
	}
	if la, lb := a.jobs(), b.jobs(); la != lb {
		return la < lb
	}
	return a.lastUsed < b.lastUsed
}

// hold reserves for j, the oldest waiting job, the free slots it will need,
// on the eligible host where it is closest to fitting.
func (t *slotTable) hold(j *Job, hd held) {
	if t.holdMemory(j, hd) {
		return
	}
	if j.Nodes > 1 {
		// The N hosts where it is closest to fitting (the first in
		// inventory order among equals): their free GPUs only grow for it
		// as jobs end there, so it fits in the end.
		near := t.gangHosts(j, hd)
		slices.SortStableFunc(near, func(a, b hostGPUs) int { return len(b.gs) - len(a.gs) })
		for _, c := range near[:min(len(near), j.Nodes)] {
			for _, g := range c.gs[:min(len(c.gs), j.GPUs)] {
				hd[g]++
			}
		}
		return
	}
	var target []*gpu
	need := 0
	for _, h := range t.candidates(j) {
		if !h.usable(j) || !h.fits(j) {
			continue
		}
		if gs := t.freeGPUs(h, j, hd); len(gs) > len(target) {
			target, need = gs, h.need(j)
		}
	}
	for _, g := range target[:min(len(target), need)] {
		hd[g]++
	}
}

// total counts the slots held.
func (hd held) total() int {
	n := 0
	for _, c := range hd {
		n += c
	}
	return n
}

// take marks p's slots used; p is on an up host.
func (t *slotTable) take(p placement) {
	t.tick++
	for _, g := range p.gpus {
		if !g.host.inUse(g, nil) {
			t.busyGPUs++ // a GPU: its MIG instances count once
		}
		before := t.contrib(g)
		if p.mem > 0 {
			g.memUsed += p.mem
			g.memJobs++
		} else {
			g.used++
		}
		g.lastUsed = t.tick
		t.freeSlots += t.contrib(g) - before
	}
}

// release gives p's slots back.
func (t *slotTable) release(p placement) {
	for _, g := range p.gpus {
		before := t.contrib(g)
		if p.mem > 0 {
			g.memUsed -= p.mem
			g.memJobs--
		} else {
			g.used--
		}
		if !g.host.inUse(g, nil) {
			t.busyGPUs--
		}
		t.freeSlots += t.contrib(g) - before
	}
}

// limit lowers cluster h's slots to the jobs it holds now, after it refused
// one for a limit (refused), or gives them back once one of its jobs ended.
// A cluster that holds none takes one job, which tries again.
func (t *slotTable) limit(h *hostSlots, refused bool) {
	g := h.gpus[0]
	before := t.contrib(g)
	h.limit = 0
	if refused {
		h.limit = max(g.used, 1)
	}
	g.cap = h.host.Slurm.MaxJobs
	if h.limit > 0 {
		g.cap = min(h.limit, g.cap)
	}
	if h.removed {
		g.cap = 0
	}
	t.freeSlots += t.contrib(g) - before
}

// downFor says which of the hosts j may run on are down, and why.
func (t *slotTable) downFor(j *Job) string {
	var why []string
	for _, h := range t.candidates(j) {
		if h.down {
			why = append(why, fmt.Sprintf("host %s is down (%s)", h.host.Name, h.why))
		}
	}
	return strings.Join(why, "; ")
}

// whyWaiting says why j, at place ahead of it in the queue, waits.
func (t *slotTable) whyWaiting(j *Job, ahead int) string {
	if down := t.downFor(j); down != "" && t.allDown(j) {
		return down
	}
	if j.Host != "" && j.GPU >= 0 {
		if g := t.byName[j.Host].byID[executor.GPUID(j.GPU)]; g != nil && g.busy != "" {
			return g.busy
		}
	}
	why := t.whyMemory(j)
	if why == "" && j.Host != "" {
		why = t.othersOnAll(j)
	}
	if why == "" {
		why = t.whyCapped(j)
	}
	switch {
	case why != "":
	case j.Nodes > 1:
		why = fmt.Sprintf("waits for %d hosts with %s free each, together", j.Nodes, Count(j.GPUs, "GPU"))
	case j.GPUs > 1 && j.Host != "":
		why = fmt.Sprintf("waits for %d GPUs of host %s together", j.GPUs, j.Host)
	case j.GPUs > 1:
		why = fmt.Sprintf("waits for %d GPUs of one host together", j.GPUs)
	case j.Host != "" && j.GPU >= 0:
		why = fmt.Sprintf("waits for GPU %d of host %s", j.GPU, j.Host)
	case j.Host != "":
		why = "waits for a slot on host " + j.Host
	default:
		why = "waits for a free slot"
	}
	if ahead == 0 {
		return why + "; first in line: slots are held for it as they free up"
	}
	if ahead == 1 {
		return why + "; 1 job ahead of it"
	}
	return fmt.Sprintf("%s; %s ahead of it", why, Count(ahead, "job"))
}

// allDown reports whether every host j may run on is down (for a job over
// N hosts, all but fewer than N).
func (t *slotTable) allDown(j *Job) bool {
	up := 0
	for _, h := range t.candidates(j) {
		if !h.down && !h.removed && h.fits(j) {
			up += h.hostsOf(j)
		}
	}
	return up < max(j.Nodes, 1)
}
