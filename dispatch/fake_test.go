package dispatch

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// fakeExec stands in for the hosts: it interprets a few commands and checks
// that no GPU slot ever runs more jobs than it has slots.
//
//	sleep D     sleeps D (a Go duration)
//	exit N      exits with N
//	hang        runs until cancelled
//	lose N      loses its connection on its first N attempts, then sleeps 1 ms
//	godown D    sleeps D, then takes its host down and succeeds
//	die         on its first attempt takes its host down and loses the
//	            connection; later attempts sleep 1 ms
//	cutoff      runs until cancelled, then takes its host down and says
//	            the cancel did not reach it (the job holds its slots)
//
// A lost job keeps its slots (the fake counts it running) until Reap is
// called for its tag, so a slot reused too early shows as overbooked. While a
// host is down, Run fails with executor.ErrHostDown and WaitUp blocks.
//
// GPU locks live in a fakeLocks that several fakes (several runs) may share;
// a job that runs on a GPU whose lock its run does not hold is a violation.
// ProbeGPUs answers from usage, which a test may change.
type fakeExec struct {
	inv   *inventory.Inventory
	locks *fakeLocks
	// reapGate, when set, holds every Reap until it is closed; lockGate
	// likewise every LockGPU.
	reapGate chan struct{}
	lockGate chan struct{}

	mu         sync.Mutex
	now        map[string]int // "host:gpu" -> jobs running there
	peak       map[string]int
	total      int // jobs running anywhere
	peakTotal  int
	peakGPUs   int // the most GPUs with a job at once
	starts     []start
	attempts   map[string]int // command -> attempts so far
	violations []string
	down       map[string]chan struct{}  // host -> closed when it is back
	held       map[string][]string       // tag -> slots its lost job still holds
	reaps      []string                  // tags reaped, in order
	usage      map[string][]executor.GPU // host -> what ProbeGPUs says
	probes     int
	// asked counts every ProbeGPUs call, those of a host down included.
	asked int
	// detached are the attempts an earlier run left on the hosts, by tag,
	// for Adopt.
	detached map[string]detached
	// unfit says, by host, which conda envs its shells cannot set up, and
	// why ("*": none at all); unfitTries counts the answers given.
	unfit      map[string]map[string]string
	unfitTries int
	// fetches are the Fetch calls, in order, with the time each came;
	// fetchErr, when set, is what Fetch answers.
	fetches  []fetchCall
	fetchErr error
	// memNow and memJobs are the memory declared on each slot
	// ("host:gpu") by the jobs that run there, and how many they are.
	memNow, memJobs map[string]int
	// probeErr, by host, is what ProbeGPUs fails with.
	probeErr map[string]error
	// stopped are the StopWaiting calls, in order, each with the jobs
	// started by then.
	stopped []stopCall
	// user is whose runs this fake's are (fair share); spans are when
	// each sleep job ran, and on which GPUs.
	user  string
	spans []span
	// ports counts FreePort's answers; noPort are the hosts where it
	// finds none. gates are Go's, by tag; ran lists the commands that
	// ran past their gate, with their host.
	ports  int
	noPort map[string]bool
	gates  map[string]chan struct{}
	ran    []string
}

// span is when a job ran, and where.
type span struct {
	start, end time.Time
	slots      []string
}

// stopCall is one StopWaiting.
type stopCall struct {
	host, run string
	started   int
}

var _ executor.Waiter = (*fakeExec)(nil)

// Waiting implements executor.Waiter.
func (f *fakeExec) Waiting(host, run string, need executor.Need) {
	f.locks.mu.Lock()
	defer f.locks.mu.Unlock()
	if f.locks.fair != nil {
		f.locks.want(host, run, need)
	}
}

// Share implements executor.Waiter.
func (f *fakeExec) Share(host, run string) (int, string, <-chan struct{}) {
	f.locks.mu.Lock()
	defer f.locks.mu.Unlock()
	n, waiting := f.locks.shareOf(host, run)
	if f.locks.changed[host] == nil {
		f.locks.changed[host] = make(chan struct{})
	}
	return n, waiting, f.locks.changed[host]
}

// StopWaiting implements executor.Waiter.
func (f *fakeExec) StopWaiting(host, run string) {
	f.mu.Lock()
	f.stopped = append(f.stopped, stopCall{host, run, len(f.starts)})
	f.mu.Unlock()
	f.locks.mu.Lock()
	delete(f.locks.wants[host], run)
	f.locks.touch(host)
	f.locks.mu.Unlock()
}

// fetchCall is one Fetch: it wrote a file per path that does not start
// with "none" into dst, holding the host's name.
type fetchCall struct {
	host string
	from executor.Return
	dst  string
	at   time.Time
}

// detached is an attempt that runs, or ran, with no coordinator: Adopt
// writes out, then returns code once release is closed (nil: at once).
type detached struct {
	out     string
	code    int
	release chan struct{}
}

// fakeLocks are the GPU locks of every host, shared by the runs of a test.
type fakeLocks struct {
	mu     sync.Mutex
	holder map[string]string // "host:gpu" -> run
	taken  int               // locks taken, all runs
	denied int               // lock attempts refused
	// running counts the jobs on each GPU by run; a GPU with jobs of two
	// runs at once is a collision.
	running    map[string]map[string]int
	collisions int
	// noFlock lists the hosts that cannot lock (executor.ErrNoLocks).
	noFlock map[string]bool
	handed  []*fakeLock // every lock taken, in order
	// shares is the fair share each host's holder says, by host (none:
	// no run waits).
	shares map[string]int
	// fair, when set, has the holders say shares as lock.sh's share_of
	// does (fairShare), from the locks held and the runs that wait: fair
	// gives each host's GPU count, users each run's user (a fakeExec's
	// user, as it locks), wants the runs that wait, by host, with their
	// place in the line (wantRec); freed is closed as a slot's lock is let
	// go of.
	fair  map[string]int
	users map[string]string
	wants map[string]map[string]*wantRec
	freed map[string]chan struct{}
	// changed, by host, is closed as the locks or records there change
	// (fakeLock.Changed).
	changed map[string]chan struct{}
}

func newFakeLocks() *fakeLocks {
	return &fakeLocks{holder: map[string]string{}, running: map[string]map[string]int{}, noFlock: map[string]bool{}, shares: map[string]int{},
		users: map[string]string{}, wants: map[string]map[string]*wantRec{}, freed: map[string]chan struct{}{}, changed: map[string]chan struct{}{}}
}

// wantRec is a run's record of waiting as lock.sh keeps it: its time
// (the run's place in the line for what whole shares leave), when its
// holder last looked, whether it is new in the line, the GPUs its first
// job for the host needs together, and whether that job is a part of one
// over several hosts.
type wantRec struct {
	at, looked time.Time
	fresh      bool
	need       int
	part       bool
	key        time.Time
}

// want records that run waits on host, unless it waited already, and
// what its first job there needs (0 GPUs: as said before, else 1), as
// lock.sh's want does (l.mu held).
func (l *fakeLocks) want(host, run string, need executor.Need) {
	if l.wants[host] == nil {
		l.wants[host] = map[string]*wantRec{}
	}
	w, ok := l.wants[host][run]
	if !ok {
		l.account(host)
		now := time.Now()
		w = &wantRec{at: now, looked: now, fresh: true, need: 1}
		l.wants[host][run] = w
	}
	if need.GPUs > 0 {
		w.need, w.part, w.key = need.GPUs, need.Part, need.Since
	}
	l.touch(host)
}

// touch says that the locks or records of host changed (l.mu held).
func (l *fakeLocks) touch(host string) {
	if ch := l.changed[host]; ch != nil {
		close(ch)
		delete(l.changed, host)
	}
}

// gone forgets run's records of waiting: its holders ended with it.
func (l *fakeLocks) gone(run string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for host, w := range l.wants {
		l.account(host)
		delete(w, run)
		l.touch(host)
	}
}

// fairRun is what a host's records say of one run (lock.sh's share_of):
// whose it is, the GPUs it holds, since when it waits (zero: it does
// not), the GPUs its first job there needs together (0 or 1: one),
// whether that job is a part of one over several hosts, since when that
// job waits (key), and whether the part is parked (its GPUs here taken,
// it waits for its other hosts: the fake's holders take no GPU for a
// turn, so only the test of lock.sh's share_of says so).
type fairRun struct {
	user   string
	holds  int
	since  time.Time
	need   int
	part   bool
	key    time.Time
	parked bool
}

// fairShare is the share of a host of all GPUs that its holder says to
// run me, and who waits, as lock.sh's share_of says them (a test checks
// the two against each other): split's, but that a run whose first job
// needs more GPUs together than its share cannot use that share: it
// waits with none, and the others share the GPUs without it; unless it
// is the first in the line of runs waiting, and its job is on the host
// alone: then it has its turn, its job's GPUs its share, and the others
// share the rest. Said (else -1) while another run waits holding fewer
// than its own. base is me's whole share, without a GPU left over, of
// all the runs' split.
func fairShare(all int, runs map[string]fairRun, me string) (n int, waiting string, base int) {
	users := map[string]bool{}
	for _, r := range runs {
		users[r.user] = true
	}
	if len(users) == 0 || all == 0 {
		return -1, "", 0
	}
	nruns := 0
	for _, r := range runs {
		if r.user == runs[me].user {
			nruns++
		}
	}
	base = all / len(users) / max(nruns, 1)
	// A parked part keeps the GPUs its job needs, out of the line.
	parked, pall := map[string]bool{}, 0
	in := maps.Clone(runs)
	for k, r := range runs {
		if need := max(r.need, 1); r.parked && r.part && !r.since.IsZero() && r.holds >= need && pall+need <= all {
			parked[k], pall = true, pall+need
			delete(in, k)
		}
	}
	fair := split(all-pall, in)
	can := maps.Clone(in)
	first := ""
	for k, r := range in {
		if r.since.IsZero() {
			continue
		}
		if max(r.need, 1) > fair[k] {
			delete(can, k)
		}
		if first == "" || r.since.Before(runs[first].since) || r.since.Equal(runs[first].since) && k < first {
			first = k
		}
	}
	// keyOlder says whether part a's job began to wait before part b's.
	keyOlder := func(a, b string) bool {
		return runs[a].key.Before(runs[b].key) || runs[a].key.Equal(runs[b].key) && a < b
	}
	turn, yielded := "", false
	if _, canUse := can[first]; first != "" && !canUse {
		switch {
		case !runs[first].part && max(runs[first].need, 1) <= all-pall:
			turn = first
		default:
			// Turns between parts go by when their jobs began to wait:
			// when the first is one, or a job parked parts leave too few
			// GPUs.
			for k, r := range in {
				if _, canUse := can[k]; !canUse && !r.since.IsZero() && r.part && max(r.need, 1) <= all && (turn == "" || keyOlder(k, turn)) {
					turn = k
				}
			}
			if turn != "" && max(runs[turn].need, 1) > all-pall {
				// Parts parked for later jobs give their GPUs up for it.
				for k := range parked {
					if keyOlder(turn, k) {
						delete(parked, k)
						pall -= max(runs[k].need, 1)
						yielded = true
					}
				}
			}
			if turn != "" && max(runs[turn].need, 1) > all-pall {
				turn = ""
			}
		}
	}
	if len(can) < len(in) || yielded || len(parked) > 0 {
		n := pall
		if turn != "" {
			n += runs[turn].need
		}
		fair = split(all-n, can)
		for k := range parked {
			fair[k] = max(runs[k].need, 1)
		}
		if turn != "" {
			fair[turn] = runs[turn].need
		}
	}
	ours, who := fair[me], []string{}
	for _, k := range slices.Sorted(maps.Keys(runs)) {
		if r := runs[k]; k != me && !r.since.IsZero() && r.holds < fair[k] {
			w := fmt.Sprintf("run %s of %s waits with %d", k, r.user, r.holds)
			if k == turn {
				w += fmt.Sprintf(" (its turn: a job of %d GPUs)", fair[k])
			}
			who = append(who, w)
		}
	}
	if len(who) == 0 {
		return -1, "", base
	}
	return ours, strings.Join(who, ", "), base
}

// split shares all GPUs between runs, as lock.sh's split does: equal
// between users, then between a user's runs (none where they are more
// than its GPUs); what whole shares leave goes one GPU at a time to
// whoever waits longest, between users (a user's oldest record, then its
// run's id), then between a user's runs (a run's record, then its id).
// The runs not in runs have none.
func split(all int, runs map[string]fairRun) map[string]int {
	nruns := map[string]int{}
	for _, r := range runs {
		nruns[r.user]++
	}
	fair := map[string]int{}
	if len(nruns) == 0 {
		return fair
	}
	per := all / len(nruns)
	// older says whether a record of time ta and run a comes first.
	older := func(ta time.Time, a string, tb time.Time, b string) bool {
		return ta.Before(tb) || ta.Equal(tb) && a < b
	}
	type line struct {
		since time.Time
		who   string
	}
	oldest := map[string]line{} // by user
	for k, r := range runs {
		if o, ok := oldest[r.user]; !r.since.IsZero() && (!ok || older(r.since, k, o.since, o.who)) {
			oldest[r.user] = line{r.since, k}
		}
	}
	total := map[string]int{}
	for u := range nruns {
		total[u] = per
	}
	for left := all - per*len(nruns); left > 0; left-- {
		best := ""
		for u, o := range oldest {
			if total[u] == per && (best == "" || older(o.since, o.who, oldest[best].since, oldest[best].who)) {
				best = u
			}
		}
		if best == "" {
			break
		}
		total[best]++
	}
	rleft := maps.Clone(total)
	for k, r := range runs {
		fair[k] = total[r.user] / nruns[r.user]
		rleft[r.user] -= fair[k]
	}
	extra := map[string]bool{}
	for {
		best := ""
		for k, r := range runs {
			if r.since.IsZero() || rleft[r.user] <= 0 || extra[k] {
				continue
			}
			if best == "" || older(r.since, k, runs[best].since, best) {
				best = k
			}
		}
		if best == "" {
			break
		}
		extra[best] = true
		fair[best]++
		rleft[runs[best].user]--
	}
	return fair
}

// fairShareOf is fairShare on host for run me, from the locks and records
// (l.mu held): nothing unless another run waits there. Then, as the
// holder does at each look, it places me's record in the line when new:
// just after the oldest other (account moves it back).
func (l *fakeLocks) fairShareOf(host, me string) (int, string) {
	l.account(host)
	var vmin time.Time
	for r, w := range l.wants[host] {
		if r != me && (vmin.IsZero() || w.at.Before(vmin)) {
			vmin = w.at
		}
	}
	mine, wanting := l.wants[host][me]
	if vmin.IsZero() {
		return -1, ""
	}
	n, waiting, _ := fairShare(l.fair[host], l.runsOn(host), me)
	if wanting {
		if v := vmin.Add(time.Microsecond); mine.fresh && v.Before(mine.at) {
			mine.at = v // just after the oldest, from now on
		}
		mine.fresh = false
	}
	return n, waiting
}

// runsOn is what host's records say of each run (l.mu held).
func (l *fakeLocks) runsOn(host string) map[string]fairRun {
	runs := map[string]fairRun{}
	counted := map[string]bool{} // run and GPU: a MIG instance's is its GPU's
	for slot, r := range l.holder {
		h, id, _ := strings.Cut(slot, ":")
		gpu, _, _ := strings.Cut(id, ":")
		if h == host && !counted[r+" "+gpu] {
			counted[r+" "+gpu] = true
			fr := runs[r]
			fr.user, fr.holds = l.users[r], fr.holds+1
			runs[r] = fr
		}
	}
	for r, w := range l.wants[host] {
		fr := runs[r]
		fr.user, fr.since, fr.need, fr.part, fr.key = l.users[r], w.at, w.need, w.part, w.key
		runs[r] = fr
	}
	return runs
}

// account moves each run that waits on host, and holds more than its
// whole share there while another waits, back in the line by the GPU
// time above that share since it was last accounted (l.mu held): called
// before the locks held or the records change, and at each look, as
// lock.sh's charge is.
func (l *fakeLocks) account(host string) {
	if l.fair == nil || len(l.wants[host]) == 0 {
		return
	}
	now := time.Now()
	runs := l.runsOn(host)
	for r, w := range l.wants[host] {
		if len(l.wants[host]) > 1 {
			_, _, base := fairShare(l.fair[host], runs, r)
			if over := runs[r].holds - base; over > 0 {
				w.at = w.at.Add(now.Sub(w.looked) * time.Duration(over))
			}
		}
		w.looked = now
	}
}

// enter and leave count a job of run on slot.
func (l *fakeLocks) enter(slot, run string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running[slot] == nil {
		l.running[slot] = map[string]int{}
	}
	l.running[slot][run]++
	if len(l.running[slot]) > 1 {
		l.collisions++
	}
}

func (l *fakeLocks) leave(slot, run string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running[slot][run]--; l.running[slot][run] == 0 {
		delete(l.running[slot], run)
	}
}

func (l *fakeLocks) heldBy(slot string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holder[slot]
}

// fakeLock is one held lock.
type fakeLock struct {
	locks *fakeLocks
	slot  string
	run   string
	// usedMB is what setUsage said of the GPU as it was locked.
	usedMB int
	lost   chan struct{}
	once   sync.Once
}

func (l *fakeLock) Key() string { return l.slot }
func (l *fakeLock) UsedMB() int { return l.usedMB }
func (l *fakeLock) Share() (int, string) {
	l.locks.mu.Lock()
	defer l.locks.mu.Unlock()
	host, _, _ := strings.Cut(l.slot, ":")
	return l.locks.shareOf(host, l.run)
}

// shareOf is run's share of host, as its holder says it: from the policy
// (fair), else as a test set it (l.mu held).
func (l *fakeLocks) shareOf(host, run string) (int, string) {
	if l.fair != nil {
		return l.fairShareOf(host, run)
	}
	if n, ok := l.shares[host]; ok {
		return n, "run other of bob@laptop waits with 0"
	}
	return -1, ""
}
func (l *fakeLock) Lost() <-chan struct{} { return l.lost }

// Changed implements executor.ShareWatcher.
func (l *fakeLock) Changed() <-chan struct{} {
	l.locks.mu.Lock()
	defer l.locks.mu.Unlock()
	host, _, _ := strings.Cut(l.slot, ":")
	if l.locks.changed[host] == nil {
		l.locks.changed[host] = make(chan struct{})
	}
	return l.locks.changed[host]
}
func (l *fakeLock) Release() {
	l.once.Do(func() {
		l.locks.mu.Lock()
		host, _, _ := strings.Cut(l.slot, ":")
		l.locks.account(host)
		delete(l.locks.holder, l.slot)
		l.locks.touch(host)
		if ch := l.locks.freed[l.slot]; ch != nil {
			close(ch)
			delete(l.locks.freed, l.slot)
		}
		l.locks.mu.Unlock()
		close(l.lost)
	})
}

func (f *fakeExec) LockGPU(ctx context.Context, host string, gpu executor.GPUID, run string) (executor.GPULock, error) {
	if f.lockGate != nil {
		select {
		case <-f.lockGate:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	if err := f.upNow(host); err != nil {
		return nil, err
	}
	used := 0
	f.mu.Lock()
	for _, g := range f.usage[host] {
		if executor.GPUID(g.Index) == gpu {
			used = g.MemoryUsedMB
		}
	}
	f.mu.Unlock()
	slot := fmt.Sprintf("%s:%s", host, gpu)
	f.locks.mu.Lock()
	defer f.locks.mu.Unlock()
	if f.locks.noFlock[host] {
		return nil, fmt.Errorf("%s: %w", host, executor.ErrNoLocks)
	}
	f.locks.users[run] = f.user
	if who := f.locks.holder[slot]; who != "" {
		f.locks.denied++
		var freed chan struct{}
		if f.locks.fair != nil {
			f.locks.want(host, run, executor.Need{})
			if freed = f.locks.freed[slot]; freed == nil {
				freed = make(chan struct{})
				f.locks.freed[slot] = freed
			}
		}
		return nil, &executor.LockedError{Where: host, GPU: gpu, Key: slot, Holder: "run " + who, Freed: freed}
	}
	f.locks.account(host)
	f.locks.holder[slot] = run
	f.locks.touch(host)
	f.locks.taken++
	l := &fakeLock{locks: f.locks, slot: slot, run: run, usedMB: used, lost: make(chan struct{})}
	f.locks.handed = append(f.locks.handed, l)
	return l, nil
}

// upNow fails with executor.ErrHostDown while host is down, as a pool would.
func (f *fakeExec) upNow(host string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down[host] != nil {
		return fmt.Errorf("%s: %w: connection refused", host, executor.ErrHostDown)
	}
	return nil
}

func (f *fakeExec) ProbeGPUs(ctx context.Context, host string) ([]executor.GPU, error) {
	f.mu.Lock()
	f.asked++
	f.mu.Unlock()
	if err := f.upNow(host); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.probes++
	if err := f.probeErr[host]; err != nil {
		return nil, err
	}
	if u, ok := f.usage[host]; ok {
		return append([]executor.GPU(nil), u...), nil
	}
	var free []executor.GPU
	for _, id := range f.inv.HostNamed(host).GPUs {
		free = append(free, executor.GPU{Index: id, MemoryTotalMB: 81920})
	}
	return free, nil
}

// memBudget is the declared memory a GPU of host may hold: what
// ProbeGPUs says of its memory (or its memory_mb:) less reserve_mb.
// device is the GPU or MIG instance that CUDA_VISIBLE_DEVICES names name
// on host (f.mu held), and the memory budget of jobs that declare theirs
// there.
func (f *fakeExec) device(host, name string) (executor.GPUID, int) {
	for _, g := range f.usage[host] {
		for _, m := range g.MIG {
			if m.UUID == name {
				return executor.MIGID(g.Index, m.Device), m.MemoryMB - f.inv.HostNamed(host).ReserveMB
			}
		}
	}
	id, _ := strconv.Atoi(name)
	return executor.GPUID(id), f.memBudget(host)
}

func (f *fakeExec) memBudget(host string) int {
	h := f.inv.HostNamed(host)
	return cmp.Or(h.MemoryMB, 81920) - h.ReserveMB
}

// started counts the jobs started so far.
func (f *fakeExec) started() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.starts)
}

// setUsage makes ProbeGPUs report host's GPUs with these MiB used.
func (f *fakeExec) setUsage(host string, usedMB map[int]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var gs []executor.GPU
	for _, id := range f.inv.HostNamed(host).GPUs {
		gs = append(gs, executor.GPU{Index: id, MemoryTotalMB: 81920, MemoryUsedMB: usedMB[id]})
	}
	f.usage[host] = gs
}

type start struct {
	command string
	host    string
	gpus    string
	env     []string
}

func newFakeExec(inv *inventory.Inventory) *fakeExec {
	return &fakeExec{inv: inv, locks: newFakeLocks(), now: map[string]int{}, peak: map[string]int{}, attempts: map[string]int{},
		down: map[string]chan struct{}{}, held: map[string][]string{}, usage: map[string][]executor.GPU{},
		memNow: map[string]int{}, memJobs: map[string]int{}}
}

// setDown takes host down (true) or brings it back (false).
func (f *fakeExec) setDown(host string, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch, isDown := f.down[host]
	switch {
	case down && !isDown:
		f.down[host] = make(chan struct{})
	case !down && isDown:
		close(ch)
		delete(f.down, host)
	}
}

func (f *fakeExec) Fetch(ctx context.Context, host string, from executor.Return, dst string) (executor.Returned, error) {
	f.mu.Lock()
	f.fetches = append(f.fetches, fetchCall{host, from, dst, time.Now()})
	ferr := f.fetchErr
	f.mu.Unlock()
	var got executor.Returned
	if ferr != nil {
		return got, ferr
	}
	for _, p := range from.Paths {
		if strings.HasPrefix(p, "none") {
			got.Missing = append(got.Missing, p)
			continue
		}
		name := strings.ReplaceAll(strings.TrimSuffix(p, "/"), "/", "_")
		if err := os.WriteFile(filepath.Join(dst, name), []byte(host), 0o600); err != nil {
			return got, err
		}
		got.Files = append(got.Files, executor.ReturnedFile{Path: name, Size: int64(len(host))})
	}
	return got, nil
}

func (f *fakeExec) WaitUp(ctx context.Context, host string) error {
	f.mu.Lock()
	ch := f.down[host]
	f.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeExec) Reap(ctx context.Context, host, tag string) error {
	if err := f.WaitUp(ctx, host); err != nil {
		return err
	}
	if f.reapGate != nil {
		select {
		case <-f.reapGate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.held[tag] {
		f.now[s]--
	}
	delete(f.held, tag)
	f.reaps = append(f.reaps, tag)
	return nil
}

// learn adds inv's hosts to those the fake knows (an inventory edit); hosts
// it drops stay known, as their running jobs finish.
func (f *fakeExec) learn(inv *inventory.Inventory) {
	f.mu.Lock()
	defer f.mu.Unlock()
	merged := *f.inv
	merged.Hosts = append([]inventory.Host(nil), f.inv.Hosts...)
	for _, h := range inv.Hosts {
		if old := merged.HostNamed(h.Name); old != nil {
			*old = h
		} else {
			merged.Hosts = append(merged.Hosts, h)
		}
	}
	f.inv = &merged
}

func (f *fakeExec) capacity(host string, id int) int {
	h := f.inv.HostNamed(host)
	n := 0
	for _, g := range h.GPUs {
		if g == id {
			n += h.SlotsPerGPU
		}
	}
	return n
}

func envValue(env []string, name string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

func (f *fakeExec) Run(ctx context.Context, host string, c executor.Command, stdout, stderr io.Writer) (int, error) {
	gpus := envValue(c.Env, "CUDA_VISIBLE_DEVICES")
	f.mu.Lock()
	if f.down[host] != nil {
		f.mu.Unlock()
		return -1, fmt.Errorf("%s: %w: connection refused", host, executor.ErrHostDown)
	}
	if why := cmp.Or(f.unfit[host][c.Conda], f.unfit[host]["*"]); why != "" {
		f.unfitTries++
		f.mu.Unlock()
		return -1, &executor.UnfitError{Where: host, Why: why}
	}
	f.starts = append(f.starts, start{command: c.Script, host: host, gpus: gpus, env: c.Env})
	f.attempts[c.Script]++
	attempt := f.attempts[c.Script]
	var slots []string
	mem := 0
	for _, kv := range c.Env {
		if v, ok := strings.CutPrefix(kv, "GPUDISPATCH_MEM_MB="); ok {
			mem, _ = strconv.Atoi(v)
		}
	}
	for _, g := range strings.Split(gpus, ",") {
		id, budget := f.device(host, g)
		slot := host + ":" + id.String()
		slots = append(slots, slot)
		f.now[slot]++
		f.peak[slot] = max(f.peak[slot], f.now[slot])
		switch {
		case mem > 0:
			f.memNow[slot] += mem
			if f.memNow[slot] > budget || f.now[slot] > f.memJobs[slot]+1 {
				f.violations = append(f.violations, fmt.Sprintf("%s runs %d MiB of declared memory (budget %d) with %d jobs, %d of them declaring", slot, f.memNow[slot], budget, f.now[slot], f.memJobs[slot]+1))
			}
			f.memJobs[slot]++
		case f.now[slot] > f.capacity(host, id.GPU()) || f.memJobs[slot] > 0:
			f.violations = append(f.violations, fmt.Sprintf("%s runs %d jobs", slot, f.now[slot]))
		}
		run, _, _ := strings.Cut(c.Tag, "-")
		if held := f.locks.heldBy(slot); held != run && !f.locks.noFlock[host] {
			f.violations = append(f.violations, fmt.Sprintf("%s runs a job of run %s without its lock (held by %q)", slot, run, held))
		}
		f.locks.enter(slot, run)
	}
	f.total++
	f.peakTotal = max(f.peakTotal, f.total)
	busy := 0
	for _, n := range f.now {
		if n > 0 {
			busy++
		}
	}
	f.peakGPUs = max(f.peakGPUs, busy)
	f.mu.Unlock()
	if c.Progress != nil {
		c.Progress(executor.Progress{Running: true})
	}
	if c.Gated {
		f.mu.Lock()
		gate := f.gate(c.Tag)
		f.mu.Unlock()
		select {
		case <-gate:
		case <-ctx.Done():
			f.mu.Lock()
			for _, s := range slots {
				f.now[s]--
				f.locks.leave(s, strings.SplitN(c.Tag, "-", 2)[0])
			}
			f.total--
			f.mu.Unlock()
			return 143, fmt.Errorf("job stopped before it ran: %w", context.Cause(ctx))
		}
	}
	f.mu.Lock()
	f.ran = append(f.ran, host+" "+c.Script)
	f.mu.Unlock()
	lost := false
	began := time.Now()
	defer func() {
		f.mu.Lock()
		f.spans = append(f.spans, span{began, time.Now(), slots})
		if lost {
			f.held[c.Tag] = slots
		} else {
			for _, s := range slots {
				f.now[s]--
				if mem > 0 {
					f.memNow[s] -= mem
					f.memJobs[s]--
				}
			}
		}
		run, _, _ := strings.Cut(c.Tag, "-")
		for _, s := range slots {
			f.locks.leave(s, run)
		}
		f.total--
		f.mu.Unlock()
	}()
	fmt.Fprintf(stdout, "%s %s\n", host, gpus)

	verb, arg, _ := strings.Cut(c.Script, " ")
	switch verb {
	case "sleep":
		d, _ := time.ParseDuration(arg)
		select {
		case <-time.After(d):
			return 0, nil
		case <-ctx.Done():
			return 143, fmt.Errorf("job stopped: %w", context.Cause(ctx))
		}
	case "exit":
		n, _ := strconv.Atoi(arg)
		return n, nil
	case "ranklose":
		// Part R of a job over several hosts is lost on the job's first
		// attempt (its slots held until reaped); the others run until
		// stopped; later attempts succeed.
		_, rest, _ := strings.Cut(c.Tag, "-")
		_, att, _ := strings.Cut(rest, "-")
		att, _, _ = strings.Cut(att, ".")
		if att != "1" {
			return 0, nil
		}
		if envValue(c.Env, "NODE_RANK") == arg {
			lost = true
			return -1, fmt.Errorf("%s: %w", host, executor.ErrConnectionLost)
		}
		<-ctx.Done()
		return 143, fmt.Errorf("job stopped: %w", context.Cause(ctx))
	case "rankexit":
		// Part R of a job over several hosts exits N at once; the others
		// run until they are stopped.
		r, n, _ := strings.Cut(arg, " ")
		if envValue(c.Env, "NODE_RANK") == r {
			code, _ := strconv.Atoi(n)
			return code, nil
		}
		<-ctx.Done()
		return 143, fmt.Errorf("job stopped: %w", context.Cause(ctx))
	case "flaky":
		// Exits 3 on its first N attempts, then 0.
		n, _ := strconv.Atoi(arg)
		if attempt <= n {
			return 3, nil
		}
		return 0, nil
	case "hang":
		<-ctx.Done()
		return 143, fmt.Errorf("job stopped: %w", context.Cause(ctx))
	case "lose":
		n, _ := strconv.Atoi(arg)
		if attempt <= n {
			lost = true
			return -1, fmt.Errorf("%s: %w", host, executor.ErrConnectionLost)
		}
		time.Sleep(time.Millisecond)
		return 0, nil
	case "godown":
		// Succeeds after D, and its host goes down as it ends.
		d, _ := time.ParseDuration(arg)
		time.Sleep(d)
		f.setDown(host, true)
		return 0, nil
	case "cutoff":
		<-ctx.Done()
		f.setDown(host, true)
		lost = true
		return -1, fmt.Errorf("%s: %w (%w)", host, context.Cause(ctx), executor.ErrCancelUnreached)
	case "die":
		if attempt == 1 {
			f.setDown(host, true)
			lost = true
			return -1, fmt.Errorf("%s: %w", host, executor.ErrConnectionLost)
		}
		time.Sleep(time.Millisecond)
		return 0, nil
	}
	return 127, nil
}

func (f *fakeExec) check(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, v := range f.violations {
		t.Error("slot overbooked:", v)
	}
}

// lab builds an inventory: "a:0,1 b:0,0,1" is host a with GPUs 0 and 1, and
// host b with two slots on GPU 0 and one on GPU 1.
func lab(spec string) *inventory.Inventory {
	inv := &inventory.Inventory{}
	for _, h := range strings.Fields(spec) {
		name, ids, _ := strings.Cut(h, ":")
		host := inventory.Host{Name: name, Local: true, SlotsPerGPU: 1}
		for _, id := range strings.Split(ids, ",") {
			n, _ := strconv.Atoi(id)
			host.GPUs = append(host.GPUs, n)
		}
		inv.Hosts = append(inv.Hosts, host)
	}
	return inv
}

// runJobs runs input on inv with the fake and returns it and the summary.
func runJobs(t *testing.T, inv *inventory.Inventory, input string, tweak func(*Options)) (*fakeExec, *Summary) {
	t.Helper()
	f := newFakeExec(inv)
	opts := Options{Inventory: inv, Executor: f, LogDir: t.TempDir(), Retries: 2}
	if tweak != nil {
		tweak(&opts)
	}
	return runJobsWith(t, f, opts, input)
}

// runJobsWith runs input with opts, whose Executor is f, and checks f.
func runJobsWith(t *testing.T, f *fakeExec, opts Options, input string) (*fakeExec, *Summary) {
	t.Helper()
	s, err := Run(context.Background(), opts, []Input{{Name: "jobs", R: strings.NewReader(input)}})
	if err != nil {
		t.Fatal(err)
	}
	f.check(t)
	f.locks.mu.Lock()
	defer f.locks.mu.Unlock()
	if len(f.locks.holder) != 0 {
		t.Errorf("locks still held after the run: %v", f.locks.holder)
	}
	return f, s
}

func repeat(line string, n int) string {
	return strings.Repeat(line+"\n", n)
}

// FreePort gives each job over several hosts a port of its own, but on
// a host of noPort.
func (f *fakeExec) FreePort(ctx context.Context, host string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.noPort[host] {
		return 0, fmt.Errorf("%s: exit status 1: no free port from 29500 to 32499", host)
	}
	f.ports++
	return 29500 + f.ports, nil
}

// Address is none: a host's name is its address.
func (f *fakeExec) Address(string) string { return "" }

// Go lets the gated command tagged tag run.
func (f *fakeExec) Go(ctx context.Context, host, tag string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.gate(tag))
	return nil
}

// gate is the channel Go closes for tag (f.mu held).
func (f *fakeExec) gate(tag string) chan struct{} {
	if f.gates == nil {
		f.gates = map[string]chan struct{}{}
	}
	if f.gates[tag] == nil {
		f.gates[tag] = make(chan struct{})
	}
	return f.gates[tag]
}

// Adopt follows an attempt of detached, or finds nothing.
func (f *fakeExec) Adopt(ctx context.Context, host string, c executor.Command, outOff, _ int64, stdout, _ io.Writer) (int, time.Time, error) {
	tag := c.Tag
	f.mu.Lock()
	d, ok := f.detached[tag]
	f.mu.Unlock()
	if !ok {
		return -1, time.Now(), fmt.Errorf("%s: %w: nothing kept of %s", host, executor.ErrJobLost, tag)
	}
	io.WriteString(stdout, d.out[min(int(outOff), len(d.out)):])
	if d.release != nil {
		select {
		case <-d.release:
		case <-ctx.Done():
			return -1, time.Now(), context.Cause(ctx)
		}
	}
	return d.code, time.Now(), nil
}
