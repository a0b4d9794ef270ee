package dispatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// DefaultRecheck is Options.Recheck's default.
const DefaultRecheck = 10 * time.Second

// locking keeps the run's GPU claims and locks. A claim settles off the
// loop and comes back on claims; a GPU set aside (busy, or locked by
// another run) is tried again when its recheck comes (for the latest time
// it was set aside only), and a host set aside for an environment it could
// not set up, when unfitOver says so. A lock whose holder went away comes
// on lockLost, and the GPU is locked again by its next job. A host's fair
// share that changed comes on shareNews (watchShare). idle are the
// GPUs left without a job of this run since the last turn of the loop:
// their locks are let go of at its end unless a job took the GPU again
// meanwhile; releasing counts the locks being let go of, and the hosts
// being told whether the run waits there (sayWaiting), which the run
// waits for as it ends.
type locking struct {
	claims    chan claimResult
	rechecks  chan recheck
	unfitOver chan unfitExpiry
	lockLost  chan lostLock
	shareNews chan struct{}
	idle      []*gpu
	releasing sync.WaitGroup
}

// claim is what must be settled on a job's GPUs before it starts: the
// locks this run does not hold yet, and (SkipBusy) whether other people's
// work is on GPUs where no job of this run is (not vetted).
type claim struct {
	a assignment
	// hosts names each GPU's host (a job over several hosts has GPUs on
	// each): settle runs off the loop, which owns the slot table (a
	// reload rewrites hostSlots.host). A gpu's id never changes, so
	// settle may read it.
	hosts map[*gpu]string
	lock  []*gpu
	check []*gpu
	// unlocked are the Lost channels of locks of these GPUs that this run
	// is letting go of: a new lock waits for the old holder to be gone.
	unlocked []<-chan struct{}
}

// claimResult is a claim settled by the claim goroutine.
type claimResult struct {
	claim
	locks map[*gpu]executor.GPULock
	// busy says why some GPUs cannot take the job now; holders, for those
	// whose lock another run holds, whose run it is (perhaps unsaid).
	busy    map[*gpu]string
	holders map[*gpu]string
	// freed are closed as the locks found taken look free.
	freed map[*gpu]<-chan struct{}
	// noLocks says which hosts cannot lock (executor.ErrNoLocks), noProbe
	// those whose nvidia-smi cannot be asked: the job goes on regardless.
	noLocks, noProbe map[string]error
	// err is set when a host (down) could not be reached, or the run
	// ended.
	err  error
	down string
}

// needs says what must be settled before a can start.
func (r *run) needs(a assignment) claim {
	c := claim{a: a}
	if a.p.host.cluster {
		return c // Slurm gives the GPUs
	}
	for _, g := range a.p.gpus {
		h := g.host
		if g.lock != nil {
			// A loss the loop has not heard of yet still counts.
			select {
			case <-g.lock.Lost():
				r.onLockLost(lostLock{g, g.lock})
			default:
			}
		}
		if g.lock == nil && h.noLocks == nil {
			c.lock = append(c.lock, g)
			if g.unlocked != nil {
				c.unlocked = append(c.unlocked, g.unlocked)
			}
		}
		// Checked once for the jobs of this run there: placed together or
		// one after another, the first is checked and the others join it.
		if r.opts.SkipBusy && !g.vetted {
			c.check = append(c.check, g)
		}
		if len(c.lock)+len(c.check) > 0 && c.hosts[g] == "" {
			if c.hosts == nil {
				c.hosts = map[*gpu]string{} // only for a claim to settle
			}
			c.hosts[g] = h.host.Name
		}
	}
	return c
}

// launch starts a, or first settles its claim in the background (an
// attempt in flight either way); it reports false when a went back to the
// queue at once because a claim on one of its GPUs is already under way.
func (r *run) launch(ctx context.Context, a assignment) bool {
	for _, g := range a.p.gpus {
		if g.claiming {
			r.release(a.p)
			r.sched.add(a.q)
			return false
		}
	}
	r.attempts.inFlight++
	c := r.needs(a)
	if len(c.lock) == 0 && len(c.check) == 0 {
		r.start(ctx, a)
		return true
	}
	for _, g := range a.p.gpus {
		r.sched.table.setBlocked(g, func() { g.claiming = true })
	}
	a.q.claiming = true
	go func() { r.locking.claims <- r.settle(ctx, c) }()
	return true
}

// settle takes the locks and asks nvidia-smi, off the loop.
func (r *run) settle(ctx context.Context, c claim) claimResult {
	res := claimResult{claim: c, locks: map[*gpu]executor.GPULock{}, busy: map[*gpu]string{}, holders: map[*gpu]string{}, freed: map[*gpu]<-chan struct{}{}, noLocks: map[string]error{}, noProbe: map[string]error{}}
	for _, ch := range c.unlocked {
		select {
		case <-ch:
		case <-ctx.Done():
			res.err = context.Cause(ctx)
			return res
		}
	}
	for _, g := range c.lock {
		host := c.hosts[g]
		l, err := r.opts.Executor.LockGPU(ctx, host, g.id, r.id)
		switch {
		case err == nil:
			res.locks[g] = l
		case errors.Is(err, executor.ErrNoLocks):
			res.noLocks[host] = err
		case unreachable(err) || ctx.Err() != nil:
			res.err, res.down = err, host
			return res
		default:
			// Taken by another run, or the lock file cannot be used: either
			// way the GPU is set aside and tried again later.
			res.busy[g] = err.Error()
			var le *executor.LockedError
			if errors.As(err, &le) {
				res.holders[g] = le.Holder
				res.freed[g] = le.Freed
			}
		}
	}
	if len(res.busy) > 0 {
		return res
	}
	// One look at each host's GPUs, in the order of the job's parts.
	var hosts []string
	for _, g := range c.check {
		if !slices.Contains(hosts, c.hosts[g]) {
			hosts = append(hosts, c.hosts[g])
		}
	}
	for _, host := range hosts {
		r.look(ctx, &res, host)
		if res.err != nil {
			return res
		}
	}
	return res
}

// look asks nvidia-smi on host whether the GPUs of c.check there are
// busy with other work, for settle.
func (r *run) look(ctx context.Context, res *claimResult, host string) {
	gpus, err := r.opts.Executor.ProbeGPUs(ctx, host)
	switch {
	case unreachable(err) || ctx.Err() != nil:
		res.err, res.down = err, host
		return
	case errors.Is(err, executor.ErrProbeTimeout):
		// A sick host: its GPUs are set aside, and tried again later.
		for _, g := range res.check {
			if res.hosts[g] == host {
				res.busy[g] = fmt.Sprintf("%s: %v; no new job on GPU %s until it answers", host, err, g.id)
			}
		}
		return
	case err != nil:
		res.noProbe[host] = err
		return
	}
	for _, g := range res.check {
		if res.hosts[g] != host {
			continue
		}
		for _, info := range gpus {
			// A MIG instance's own use is not in nvidia-smi's answer.
			if why := info.BusyWhy(r.opts.BusyMemoryMB); executor.GPUID(info.Index) == g.id && why != "" {
				res.busy[g] = fmt.Sprintf("%s: GPU %s is busy with other work: %s", host, g.id, why)
			}
		}
	}
}

// unreachable reports whether err means the host could not be reached.
func unreachable(err error) bool {
	return errors.Is(err, executor.ErrHostDown) || errors.Is(err, executor.ErrConnectionLost)
}

// onClaim starts the job of a settled claim, or puts it back in the queue
// (without using an attempt, and no longer in flight) when a GPU was busy
// or the host went away.
func (r *run) onClaim(ctx context.Context, res claimResult) {
	a := res.a
	for _, g := range a.p.gpus {
		r.sched.table.setBlocked(g, func() { g.claiming = false })
	}
	a.q.claiming = false
	relock := false
	for g, l := range res.locks {
		g.lock, g.unlocked = l, nil
		r.sharing(g.host, g, l.UsedMB())
		go r.watchLock(g, l)
		select {
		case <-l.Lost():
			// Lost as soon as taken: take it again.
			r.onLockLost(lostLock{g, l})
			relock = true
		default:
		}
	}
	for _, h := range a.p.parts() {
		h := h.host
		if err := res.noLocks[h.host.Name]; err != nil && h.noLocks == nil {
			h.noLocks = err
			r.record(r.hostWarning(h, err))
		}
		if err := res.noProbe[h.host.Name]; err != nil && !h.noProbe {
			h.noProbe = true
			r.record(r.hostWarning(h, fmt.Errorf("cannot tell whether its GPUs are busy, so --skip-busy does not apply there: %w", err)))
		}
	}
	if a.q.cancelAsked {
		r.attempts.inFlight--
		r.release(a.p)
		r.cancelledBeforeStart(a.q)
		return
	}
	if res.err != nil || len(res.busy) > 0 || relock || r.stopping {
		r.attempts.inFlight--
		r.release(a.p)
		if h := r.sched.table.byName[res.down]; h != nil && unreachable(res.err) {
			r.hostDown(h, res.err)
		}
		gs := make([]*gpu, 0, len(res.busy))
		for g := range res.busy {
			gs = append(gs, g)
		}
		slices.SortFunc(gs, func(x, y *gpu) int { return int(x.id - y.id) })
		for _, g := range gs {
			r.setBusy(g, res.busy[g], res.holders[g], res.freed[g], a.q)
			if _, locked := res.holders[g]; locked {
				g.lockedOut = true
				g.host.asked = true // its holder there keeps a record that the run waits
				r.sayNeed(g.host, a.q)
			}
		}
		r.sched.add(a.q)
		return
	}
	for _, g := range a.p.gpus {
		g.reported, g.vetted = "", true
	}
	r.start(ctx, a)
}

// setBusy sets g aside for Options.Recheck, or until freed (when not nil)
// is closed as g's lock looks free, and tells why the job q waits (once
// for as long as the reason stays the same); holder is the run that holds
// g's lock, when that is why.
func (r *run) setBusy(g *gpu, why, holder string, freed <-chan struct{}, q *queued) {
	r.sched.table.setBlocked(g, func() { g.busy, g.lockedOut = why, false })
	g.busyEpoch++
	if why != g.reported {
		g.reported = why
		e := r.event(EventBusy, q.job, q.attempts)
		e.Host, e.GPUs, e.Error, e.Message = g.host.host.Name, []executor.GPUID{g.id}, why, holder
		r.record(e)
	}
	epoch := g.busyEpoch
	// Tried again after Recheck, or as soon as its lock looks free.
	go func() {
		t := time.NewTimer(r.opts.Recheck)
		defer t.Stop()
		select {
		case <-t.C:
		case <-freed:
		case <-r.bg.Done():
			return
		}
		select {
		case r.locking.rechecks <- recheck{g, epoch}:
		case <-r.bg.Done():
		}
	}()
}

// recheck is a busy GPU's time to be tried again.
type recheck struct {
	g     *gpu
	epoch int
}

func (r *run) onRecheck(rc recheck) {
	if g := rc.g; g.busyEpoch == rc.epoch {
		r.sched.table.setBlocked(g, func() { g.busy, g.lockedOut = "", false })
	}
}

// lostLock is a lock whose holder went away without being released.
type lostLock struct {
	g *gpu
	l executor.GPULock
}

func (r *run) watchLock(g *gpu, l executor.GPULock) {
	select {
	case <-l.Lost():
	case <-r.bg.Done():
		return
	}
	select {
	case r.locking.lockLost <- lostLock{g, l}:
	case <-r.bg.Done():
	}
}

// onLockLost forgets a lock that was lost: the next job on its GPU locks it
// again.
func (r *run) onLockLost(ll lostLock) {
	if ll.g.lock == ll.l {
		ll.g.lock, ll.g.unlocked = nil, ll.l.Lost()
	}
}

// release gives p's slots back and notes the GPUs left without a job of
// this run, whose locks go once the scheduler has had its chance.
func (r *run) release(p placement) {
	r.sched.table.release(p)
	for _, g := range p.gpus {
		if g.jobs() == 0 {
			g.vetted = false // the next job there is checked again
		}
		if g.jobs() == 0 && g.lock != nil {
			r.locking.idle = append(r.locking.idle, g)
		}
	}
}

// shares reads each host's fair share for this run from the locks it
// holds there (the host's holder says it; -1 when no run waits). A host
// where it holds no lock keeps the share last read: the run that waited
// may still wait, and the run takes no more than its share there before a
// lock says otherwise.
func (r *run) shares() {
	for _, h := range r.sched.table.hosts {
		share, waiting, read := -1, "", false
		for _, g := range h.gpus {
			if g.lock == nil {
				continue
			}
			if !read {
				r.watchShare(h, g.lock)
			}
			read = true
			if n, w := g.lock.Share(); n >= 0 && (share < 0 || n < share) {
				share, waiting = n, w
			}
		}
		if !read && h.asked {
			// It waits there with no lock: the holder says its share too.
			if w, ok := r.opts.Executor.(executor.Waiter); ok {
				n, why, changed := w.Share(h.host.Name, r.id)
				read, share, waiting = true, n, why
				r.watchChanges(h, changed, nil)
			}
		}
		if read {
			h.share, h.waiting = share, waiting
		}
	}
}

// watchShare makes sure that a change of the share lock says (the host's
// holder, which says it for every lock of the run there) comes to the
// loop as news (shareNews): a run takes up a share lifted, or lowered, at
// once rather than when one of its jobs there ends.
func (r *run) watchShare(h *hostSlots, lock executor.GPULock) {
	if w, ok := lock.(executor.ShareWatcher); ok {
		r.watchChanges(h, w.Changed(), lock)
	}
}

// watchChanges sends news once ch is closed, unless ch (and lock, through
// which it was had: nil for none) is watched already; a lost lock ends the
// watch, and the next one is watched.
func (r *run) watchChanges(h *hostSlots, ch <-chan struct{}, lock executor.GPULock) {
	if ch == nil || ch == h.shareWatch && lock == h.shareLock {
		return
	}
	h.shareWatch, h.shareLock = ch, lock
	var lost <-chan struct{}
	if lock != nil {
		lost = lock.Lost()
	}
	go func() {
		select {
		case <-ch:
			select {
			case r.locking.shareNews <- struct{}{}:
			case <-r.bg.Done():
			}
		case <-lost: // the next lock there is watched
		case <-r.bg.Done():
		}
	}()
}

// sayWaiting keeps each host's record of this run's waiting (fair share)
// as the run's queue is. Another run's lock that keeps a GPU from the run
// makes the record; so does being held to its share while jobs for the
// host wait (then the run has its turn at the GPUs that whole shares
// leave over). Once no job of its queue could run on the host any more,
// the record goes at once, and the runs that gave up GPUs for it keep
// them (a run whose queue empties leaves its share to the others); once a
// job for the host waits again (more input, a retry), the GPUs there set
// aside for another run's lock are tried again at once, and a refusal
// makes the record again. What is said goes in order, the latest only,
// off the loop (a hung host blocks no turn).
func (r *run) sayWaiting() {
	w, ok := r.opts.Executor.(executor.Waiter)
	if !ok {
		return
	}
	looked := false // whether a claim is under way, once asked
	for _, h := range r.sched.table.hosts {
		capped := !h.asked && h.overShare()
		if !h.asked && !h.told && !capped {
			continue // the common case: nothing to say, nothing looked at
		}
		if !looked {
			if r.sched.table.claiming() {
				return // a claim may yet be refused, and its job wait again
			}
			looked = true
		}
		need := r.sched.needOn(h)
		switch wants := need.GPUs > 0; {
		case h.asked && !wants:
			h.asked, h.told, h.needSaid = false, true, executor.Need{}
			r.say(h, w, executor.Need{})
		case capped && wants, h.asked && wants && (need.GPUs != max(h.needSaid.GPUs, 1) || need.Part != h.needSaid.Part || !need.Since.Equal(h.needSaid.Since)):
			// Waiting, or waiting for a job that needs another number of
			// GPUs together than the one said, or is another job over
			// several hosts.
			h.asked, h.told, h.needSaid = true, false, need
			r.say(h, w, need)
		case h.told && wants:
			h.told = false
			for _, g := range h.gpus {
				if g.lockedOut {
					r.onRecheck(recheck{g, g.busyEpoch})
				}
			}
		}
	}
}

// sayNeed tells h's machine, where a lock refused q's job a GPU (its holder
// made the run's record of waiting, saying one GPU), what it needs there
// together, when that is more: at once, as its claim may come and go
// while sayWaiting looks at the queue.
func (r *run) sayNeed(h *hostSlots, q *queued) {
	w, ok := r.opts.Executor.(executor.Waiter)
	if need := q.need(h); ok && need.GPUs > max(h.needSaid.GPUs, 1) {
		h.needSaid = need
		r.say(h, w, need)
	}
}

// say tells h's machine, off the loop, that the run waits there for a job
// that needs need (or, need of 0 GPUs, no more), unless something newer
// was said meanwhile.
func (r *run) say(h *hostSlots, w executor.Waiter, need executor.Need) {
	seq := h.said.seq.Add(1)
	name := h.host.Name
	r.locking.releasing.Go(func() {
		h.said.mu.Lock()
		defer h.said.mu.Unlock()
		if h.said.seq.Load() != seq {
			return
		}
		if need.GPUs > 0 {
			w.Waiting(name, r.id, need)
		} else {
			w.StopWaiting(name, r.id)
		}
	})
}

// unlockIdle lets go of the locks of GPUs on which no job of this run is.
func (l *locking) unlockIdle() {
	for _, g := range l.idle {
		if g.jobs() == 0 && g.lock != nil && !g.claiming {
			lock := g.lock
			g.lock, g.unlocked = nil, lock.Lost()
			l.releasing.Go(lock.Release)
		}
	}
	l.idle = l.idle[:0]
}

// unlockAll lets go of every lock and returns once they are all free,
// those let go of earlier included.
func (r *run) unlockAll() {
	for _, h := range r.sched.table.hosts {
		for _, g := range h.gpus {
			if l := g.lock; l != nil {
				g.lock = nil
				r.locking.releasing.Go(l.Release)
			}
		}
	}
	r.locking.releasing.Wait()
}

// hostWarning is an event about something wrong with h that does not stop
// its jobs.
func (r *run) hostWarning(h *hostSlots, err error) Event {
	return r.warning(h.host.Name, "", err.Error())
}
