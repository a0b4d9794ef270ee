package dispatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/dispatch/snapshot"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// Input is one source of job lines.
type Input struct {
	// Name is the file name shown in errors; "" for standard input.
	Name string
	R    io.Reader
}

// Options configure a run.
type Options struct {
	// ID is the run's id ("": NewID's as it starts); a caller that opens
	// the hosts before the run gives them the same (hosts.Options.Run).
	ID string
	// Inventory's hosts have their GPU lists resolved (no AutoGPUs), but
	// for those still Opening.
	Inventory *inventory.Inventory
	// Opening lists the hosts of Inventory that are still being opened:
	// they get no job until an Update says they are (Opened), and a
	// `gpus: auto` one has no GPU until then. Jobs that only they may turn
	// out to fit wait for them, and so do the attempts an earlier run left
	// running there (Resume).
	Opening []string
	// Executor runs the jobs; see package executor for its contract.
	Executor executor.Executor
	// LogDir receives the job logs and journal.jsonl.
	LogDir string
	// Resume skips jobs the journal records as finished.
	Resume bool
	// Retries is how many times a job whose host was lost is run again.
	Retries int
	// RetryFailed is how many times a job that fails or times out is run
	// again, unless its line says (retries=).
	RetryFailed int
	// Timeout limits each job (0: none); a job's timeout= overrides it.
	Timeout time.Duration
	// Kind is the kind of GPU every job needs whose line (or submitted
	// batch) does not say: model=, vram=, tags=.
	Kind Kind
	// Reporters are told every event.
	Reporters []Reporter
	// Drain, once closed, stops reading input and starting jobs; the jobs
	// that run finish, and the ones that waited are recorded cancelled.
	// Cancelling Run's context instead also stops the running jobs.
	Drain <-chan struct{}
	// LeftOut lists the inventory's hosts that are not in the run, and why:
	// a job pinned to one is rejected with that reason.
	LeftOut map[string]error
	// Down lists the hosts that could not be reached at the start, and why:
	// they get jobs once the Executor's WaitUp says they are back.
	Down map[string]error
	// HostDownTimeout is how long jobs that only down hosts can run wait for
	// one of them to come back before they fail (0: DefaultHostDownTimeout).
	HostDownTimeout time.Duration
	// ReturnLimit caps the bytes one attempt's return= files bring back
	// (0: DefaultReturnLimit).
	ReturnLimit int64
	// SkipBusy keeps jobs off GPUs that other people's processes use: more
	// than BusyMemoryMB of memory, or any compute process, on a GPU where no
	// job of this run is. It is checked just before each such start.
	SkipBusy     bool
	BusyMemoryMB int
	// MaxGPUs caps the GPUs the run keeps busy at once over all its hosts
	// (0: no cap): with that many busy, a job goes only to a GPU that has a
	// job of the run already (slots_per_gpu, mem=).
	MaxGPUs int
	// Hooks are the commands run as jobs and the run end.
	Hooks Hooks
	// Snapshots are the snapshots of the code taken as the run started, by
	// the directory a host's Sync names: the jobs' workdir on the host.
	Snapshots map[string]*snapshot.Snapshot
	// TakeDeps takes a snapshot of every file under dir (the files that
	// the jobs a job waited for brought back, laid out for a host that is
	// not this machine), kept where the run's snapshots of code are; nil:
	// such a job gets none there.
	TakeDeps func(ctx context.Context, dir string) (*snapshot.Snapshot, error)
	// OpenSnapshot opens a snapshot of dir that a submit took (by its ID),
	// for the jobs it submits; nil: submit --sync is refused.
	OpenSnapshot func(id, dir string) (*snapshot.Snapshot, error)
	// Recheck is how long a GPU found busy or locked by another run, or a
	// host found unable to set up a job's environment (for that
	// environment), is set aside before it is tried again (0:
	// DefaultRecheck).
	Recheck time.Duration
	// Updates brings edits of the inventory while the run goes on.
	Updates <-chan Update
	// Serve makes a standing queue: the run has no input and does not end
	// until it is stopped; jobs arrive through Control.Submit. It numbers
	// its jobs after those of the log dir's journal, and with Resume it
	// queues again the jobs an earlier server left unfinished.
	Serve bool
	// Environ is the coordinator's own environment ("NAME=value"), which
	// local jobs start from: a submitted batch's environment (Defaults.Env)
	// is kept as what differs from it.
	Environ []string
	// Control, when set, steers the run from other goroutines.
	Control *Control
	// Started, when set, is called once the log dir is claimed and its
	// journal open, before any job is read: the control socket is made
	// there, under the claim. An error ends the run before it starts.
	Started func() error
}

// Update is an edit of the inventory, for a run that is going on.
type Update struct {
	// Inventory is the new one, its hosts resolved (no AutoGPUs); the
	// Executor can run jobs on every host it names.
	Inventory *inventory.Inventory
	// Down and LeftOut are as in Options, for the hosts the edit adds and
	// those Opened.
	Down, LeftOut map[string]error
	// Opened lists hosts of Options.Opening that are now settled: up, or
	// in Down or LeftOut. Warnings are what to say of them.
	Opened   []string
	Warnings []string
	// Snapshots are the snapshots taken of the directories the edit
	// names for sync that the run had none of.
	Snapshots map[string]*snapshot.Snapshot
	// Err is why the edited file does not load: the edit is reported and
	// the run goes on as it was.
	Err error
}

// DefaultHostDownTimeout is Options.HostDownTimeout's default.
const DefaultHostDownTimeout = 10 * time.Minute

// DefaultReturnLimit is Options.ReturnLimit's default: 10 GiB.
const DefaultReturnLimit = 10 << 30

// errJobTimeout is the cause given to a job's context when its time is up.
var errJobTimeout = errors.New("timed out")

// SetupError is a problem found before any job ran (exit status 2).
type SetupError struct{ Err error }

func (e *SetupError) Error() string { return e.Err.Error() }
func (e *SetupError) Unwrap() error { return e.Err }

// run is the state of one Run call, owned by its loop goroutine. Its
// state is in parts, each the owner of its fields and of the channels on
// which goroutines bring it news (see each type for what it keeps true):
// the loop takes one piece of news at a time and hands it to the part's
// handler (loop, the on* methods).
type run struct {
	opts    Options
	id      string
	journal *journal
	// logDirAbs is the log dir as an absolute path where it can be made
	// one: how a host that keeps a job names its log dir.
	logDirAbs string
	// tree names the log dir's working trees of snapshots on the hosts
	// (see treeKey).
	tree string
	// fileMode is what the log dir's new files get (see fileMode).
	fileMode fs.FileMode
	sched    *scheduler
	summary  *Summary
	// stopping is set on drain, on cancel and when the journal fails.
	stopping bool
	// detached is set by Detach: the run ends without waiting for its
	// running jobs, which run on.
	detached bool
	// bg ends the goroutines that bring the parts news: as Run returns, or
	// once its context is cancelled.
	bg context.Context

	attempts attempts   // the attempts under way
	past     history    // what the log dir's earlier runs left (adopt.go)
	health   health     // hosts going down and coming back (health.go)
	fencing  fencing    // attempts to stop once their hosts answer (fence.go)
	locking  locking    // GPU claims and locks (claim.go)
	serving  serving    // the jobs Control steers (control.go)
	returns  returns    // files brought back (returns.go)
	deps     deps       // jobs that wait for others (deps.go)
	mem      memWatch   // hosts' GPU memory and use (memory.go, usage.go)
	hooks    hookRunner // the commands run as jobs and the run end (hooks.go)
}

// attempts are the attempts the run started. inFlight counts those started
// (or being claimed) whose result has not come on results yet: the run
// ends only once it is 0 (or it detaches; over is closed as Run returns,
// and the results of a detached run's attempts are dropped). Their
// context is ctx, which kill cancels (stop --now, a second Ctrl-C). Hosts
// say on progress when an attempt begins, waits (Slurm) or was cut off.
type attempts struct {
	inFlight int
	ctx      context.Context
	kill     context.CancelCauseFunc
	results  chan result
	progress chan progress
	over     chan struct{}
}

// result is a job attempt that ended.
type result struct {
	a    assignment
	code int
	err  error
	// rank is the part of a job over several hosts whose end is the
	// attempt's (0: part 0, or a job on one host).
	rank       int
	start, end time.Time
	logs       logFiles
}

// Run reads jobs from inputs, one after the other, runs each on free slots
// as soon as it arrives, and returns when input has ended and every job is
// done, or after a drain or cancel. An error means nothing ran (setup).
func Run(ctx context.Context, opts Options, inputs []Input) (*Summary, error) {
	if opts.Control != nil {
		defer close(opts.Control.done)
	}
	claim, err := claimLogDir(opts.LogDir)
	if err != nil {
		return nil, &SetupError{err}
	}
	defer claim.release()
	r, err := prepare(opts)
	if err != nil {
		return nil, err
	}
	bg, stop := context.WithCancel(ctx)
	defer stop()
	r.bg = bg
	defer close(r.attempts.over)
	r.fileMode = claim.mode
	r.logDirAbs = opts.LogDir
	if abs, err := filepath.Abs(opts.LogDir); err == nil {
		r.logDirAbs = abs
	}
	j, err := openJournal(filepath.Join(opts.LogDir, JournalName), claim.mode)
	if err != nil {
		return nil, &SetupError{err}
	}
	r.journal = j
	defer j.close()
	// Not reported: it moves no job, and says nothing a user watches for.
	if err := j.append(Event{Time: time.Now(), Event: EventRun, Run: r.id, Resume: opts.Resume || opts.Serve}); err != nil {
		return nil, &SetupError{err}
	}
	if r.tree, err = treeKey(filepath.Join(opts.LogDir, JournalName)); err != nil {
		return nil, &SetupError{err}
	}
	if opts.Started != nil {
		if err := opts.Started(); err != nil {
			return nil, &SetupError{err}
		}
	}
	for _, d := range r.past.damaged {
		r.record(r.warning("", "", "--resume: "+d+"; the line was skipped"))
	}
	if r.serving.unfinished > 0 {
		r.record(r.warning("", "", Count(r.serving.unfinished, "job")+" of an earlier run in this log dir did not finish: serve --resume queues them again"))
	}
	for _, h := range r.sched.table.hosts {
		if err := opts.Down[h.host.Name]; err != nil {
			r.hostDown(h, err)
		}
	}
	for _, name := range opts.Opening {
		if h := r.sched.table.byName[name]; h != nil {
			r.sched.table.setOpening(h, time.Now())
		}
	}
	r.watchUsages()
	// The jobs' context: stop --now cancels it, as a second Ctrl-C does.
	ctx, r.attempts.kill = context.WithCancelCause(ctx)
	defer r.attempts.kill(nil)
	r.attempts.ctx = ctx
	r.takeUpEarlier()
	r.loop(ctx, inputs)
	r.endHooks()
	if r.detached {
		r.attempts.kill(executor.ErrDetached)
		// The lock holders keep the locks of the GPUs whose jobs run on
		// (hosts/gpulock) once they stop hearing this run.
		r.record(r.warning("", "", "detached: "+Count(r.attempts.inFlight, "running job")+" left running where they run; --resume (or serve --resume) on this log dir re-adopts them"))
		return r.summary, nil
	}
	r.awaitFences()
	r.unlockAll()
	return r.summary, nil
}

// takeUpEarlier takes up what earlier runs of the log dir left: the
// attempts still to stop, the files still to fetch, the running jobs of an
// earlier server to follow, and its unfinished jobs to queue again (serve
// --resume); a job that can no longer be queued fails, saying why.
func (r *run) takeUpEarlier() {
	r.putUpEarlier()
	r.fetchUnreturned()
	for _, a := range r.past.adoptions {
		if !r.follow(a) {
			r.serving.requeue = append(r.serving.requeue, a.q)
		}
	}
	for _, q := range r.serving.requeue {
		err := q.requeueErr
		if err == nil {
			err = r.sched.table.check(q.job)
		}
		if err == nil {
			err = r.enqueue(q, "queued again by serve --resume")
		}
		if err != nil {
			e := r.event(EventFailed, q.job, 0)
			e.Error = "cannot be queued again: " + err.Error()
			r.final(e)
		}
	}
}

// NewID is a new run's id: the time now, in UTC to the microsecond.
func NewID() string { return time.Now().UTC().Format("20060102T150405.000000Z") }

// prepare readies what Run and Plan share: the options' defaults, the slot
// table, and with Resume the jobs that succeeded before; so a dry run admits
// and places jobs exactly as a run does.
func prepare(opts Options) (*run, error) {
	if opts.HostDownTimeout <= 0 {
		opts.HostDownTimeout = DefaultHostDownTimeout
	}
	if opts.ReturnLimit <= 0 {
		opts.ReturnLimit = DefaultReturnLimit
	}
	if opts.Recheck <= 0 {
		opts.Recheck = DefaultRecheck
	}
	// A reload adds to it: the caller's map stays as it was.
	opts.LeftOut = maps.Clone(opts.LeftOut)
	r := &run{
		opts:    opts,
		id:      cmp.Or(opts.ID, NewID()),
		sched:   &scheduler{table: newSlotTable(opts.Inventory)},
		summary: newSummary(),
		attempts: attempts{
			results:  make(chan result),
			progress: make(chan progress),
			over:     make(chan struct{}),
		},
		past:    history{done: map[jobKey]bool{}},
		health:  health{ups: make(chan *hostSlots), expired: make(chan expiry)},
		fencing: fencing{reaped: make(chan fence), fenced: map[string]fence{}},
		locking: locking{
			claims:    make(chan claimResult),
			rechecks:  make(chan recheck),
			shareNews: make(chan struct{}),
			unfitOver: make(chan unfitExpiry),
			lockLost:  make(chan lostLock),
		},
		serving: serving{jobs: map[string]*queued{}, seen: map[string]int{}, names: map[string]string{}},
		returns: returns{fetched: make(chan fetched)},
		deps:    deps{dependents: map[string][]*queued{}, earlier: map[string]bool{}},
		mem:     memWatch{answers: make(chan memAnswer), usages: make(chan usageAnswer)},
		hooks:   hookRunner{said: make(chan struct{}, 1)},
	}
	r.sched.table.maxGPUs = opts.MaxGPUs
	for _, h := range opts.Inventory.Hosts {
		r.mem.wanted = r.mem.wanted || h.MemMB > 0
	}
	r.mem.look = r.mem.wanted
	if opts.Serve {
		if err := r.loadServed(); err != nil {
			return nil, &SetupError{err}
		}
		unreturned, err := unreturnedAttempts(filepath.Join(opts.LogDir, JournalName))
		if err != nil {
			return nil, &SetupError{fmt.Errorf("reading the journal of %s: %w", opts.LogDir, err)}
		}
		r.returns.unreturned = unreturned
		return r, nil
	}
	nums, err := readNumbers(filepath.Join(opts.LogDir, JournalName))
	if err != nil {
		return nil, &SetupError{fmt.Errorf("numbering the jobs after the log dir's earlier runs: %w", err)}
	}
	r.past.numbers = nums
	done, open, unstopped, failures, damaged, err := openAttempts(filepath.Join(opts.LogDir, JournalName))
	if err != nil {
		return nil, &SetupError{fmt.Errorf("reading the journal of %s: %w", opts.LogDir, err)}
	}
	// An attempt left to stop is stopped by whichever run comes next.
	r.fencing.unstopped = unstopped
	if opts.Resume {
		r.past.done, r.past.open, r.past.damaged, r.past.failures = done, open, damaged, failures
		if r.returns.unreturned, err = unreturnedAttempts(filepath.Join(opts.LogDir, JournalName)); err != nil {
			return nil, &SetupError{fmt.Errorf("reading the journal of %s: %w", opts.LogDir, err)}
		}
	}
	return r, nil
}

// parsed is what the reader hands the loop: a job, or why a line was rejected.
type parsed struct {
	job *Job
	err error
}

// read parses inputs in order, their jobs needing kind where their lines
// do not say, and sends what it finds until the inputs end or stop is
// closed. A read blocked on a terminal or pipe cannot be interrupted; the
// process exiting ends it.
func read(inputs []Input, kind Kind, out chan<- parsed, stop <-chan struct{}) {
	defer close(out)
	seq := 0
	seen := map[string]int{}
	names := map[string]string{}
	for _, in := range inputs {
		p := newParser(in.R, in.Name, &seq, seen, names)
		p.defaults.Kind = kind
		for {
			j, err := p.next()
			if errors.Is(err, io.EOF) {
				break
			}
			select {
			case out <- parsed{job: j, err: err}:
			case <-stop:
				return
			}
			var le *LineError
			if err != nil && !errors.As(err, &le) {
				break // the input itself failed; go on with the next one
			}
		}
	}
}

// loop takes the news of the run one at a time, each from the part that
// owns its channel to that part's handler (on*), then gives the scheduler
// its turn (turn), until nothing is left to wait for (goesOn).
func (r *run) loop(ctx context.Context, inputs []Input) {
	jobs := make(chan parsed)
	stopReading := make(chan struct{})
	defer close(stopReading)
	go read(inputs, r.opts.Kind, jobs, stopReading)

	drain, cancelled := r.opts.Drain, ctx.Done()
	var reqs chan func(*run)
	if r.opts.Control != nil {
		reqs = r.opts.Control.reqs
	}
	for r.goesOn(jobs != nil) {
		select {
		case f := <-reqs:
			f(r)
		case p, ok := <-jobs:
			if !ok {
				jobs = nil
				break
			}
			r.admit(p)
		case res := <-r.attempts.results:
			r.onResult(res)
		case p := <-r.attempts.progress:
			r.onProgress(p)
		case f := <-r.returns.fetched:
			r.onFetched(f)
		case a := <-r.mem.answers:
			r.onMemory(a)
		case a := <-r.mem.usages:
			r.onUsage(a)
		case h := <-r.health.ups:
			r.onHostUp(h)
		case x := <-r.health.expired:
			r.onHostExpired(x)
		case f := <-r.fencing.reaped:
			r.onReaped(f)
		case c := <-r.locking.claims:
			r.onClaim(ctx, c)
		case rc := <-r.locking.rechecks:
			r.onRecheck(rc)
		case x := <-r.locking.unfitOver:
			r.onUnfitOver(x)
		case ll := <-r.locking.lockLost:
			r.onLockLost(ll)
		case <-r.locking.shareNews:
			// A host's fair share changed: the turn reads it.
		case <-r.hooks.said:
			r.onHookSaid()
		case u := <-r.opts.Updates:
			r.onUpdate(u)
		case <-drain:
			drain = nil
			r.stop()
		case <-cancelled:
			cancelled = nil
			r.stop()
		}
		if r.stopping {
			jobs = nil // read no more input
		}
		r.turn(ctx)
	}
}

// goesOn says whether the loop waits for more: input that is still read
// (reading), an attempt or a fetch under way, or, unless the run stops,
// jobs that wait, attempts to follow on hosts still being opened, or a
// standing queue (serve). A detached run waits for nothing.
func (r *run) goesOn(reading bool) bool {
	if r.detached {
		return false
	}
	if reading || r.attempts.inFlight > 0 || r.returns.pending > 0 {
		return true
	}
	return !r.stopping && (len(r.sched.waiting) > 0 || len(r.past.adoptLater) > 0 || r.opts.Serve)
}

// turn follows each piece of news: a run that stops cancels the jobs that
// wait; otherwise the scheduler places what it can, and the locks of GPUs
// left idle go, and hosts' GPU memory is asked where a job needs it.
func (r *run) turn(ctx context.Context) {
	if r.stopping {
		for _, q := range append(r.sched.drop(), r.deps.dropHeld()...) {
			r.final(r.event(EventCancelled, q.job, q.attempts))
		}
		return
	}
	r.shares()
	defer r.sayWaiting()
	// A job put back because another job of the same pass is claiming
	// its GPU may fit elsewhere: pass again until none is put back.
	for again := true; again; {
		again = false
		for _, a := range r.sched.next() {
			if !r.launch(ctx, a) {
				again = true
			}
		}
	}
	r.locking.unlockIdle()
	r.askMemory()
}

// skipped is the verdict on a job that succeeded in an earlier run, and
// adopted on one whose attempt an earlier run left running: verdicts that
// are no event of the journal.
const (
	skipped EventKind = "skipped"
	adopted EventKind = "adopted"
)

// verdict says what becomes of a job as it arrives: EventQueued;
// EventRejected or EventFailed and why; skipped (Resume); or "" when its
// input could not be read (then the summary says so).
func (r *run) verdict(p parsed) (j *Job, kind EventKind, why error) {
	var le *LineError
	j = p.job
	if errors.As(p.err, &le) {
		j = le.Job // a rejected line takes a number too
	}
	if j != nil && r.past.numbers != nil {
		r.past.numbers.number(j, r.opts.Resume)
	}
	switch {
	case le != nil:
		return j, EventRejected, le.Err
	case p.err != nil:
		r.summary.InputErrors = append(r.summary.InputErrors, p.err.Error())
		return nil, "", nil
	}
	final, err := r.admissible(j)
	switch {
	case err != nil && final:
		return j, EventRejected, err
	case r.past.done[jobKey{j.Text, j.Occurrence}]:
		return j, skipped, nil
	}
	if e, ok := r.past.open[jobKey{j.Text, j.Occurrence}]; ok && (r.adoptable(e) || r.opening(e)) {
		return j, adopted, nil
	}
	if _, derr := r.resolveDeps(j); derr != nil {
		return j, EventRejected, derr
	}
	if why := r.sched.table.unrunnable(j, r.opts.HostDownTimeout); why != "" && err == nil {
		return j, EventFailed, errors.New(why)
	}
	// err, not final: queued, as the hosts still being opened may fit it.
	return j, EventQueued, err
}

// admissible says why j cannot run in this run, if it cannot; final is
// false when hosts still being opened may yet fit it.
func (r *run) admissible(j *Job) (final bool, err error) {
	if why := r.opts.LeftOut[j.Host]; j.Host != "" && why != nil {
		return true, fmt.Errorf("host %s is left out of this run: %w", j.Host, why)
	}
	if j.MemMB > 0 && !r.mem.wanted {
		r.mem.wanted, r.mem.look = true, true
	}
	err = cmp.Or(r.sched.table.check(j), r.sched.table.checkPrefer(j), r.sched.table.checkMemory(j))
	if err == nil {
		// What kind of GPU it needs: known once every host has answered.
		return r.sched.table.checkKind(j)
	}
	return !r.sched.table.anyOpening(), err
}

// admit queues a parsed job, or records why it was rejected or skipped;
// it returns the verdict.
func (r *run) admit(p parsed) (j *Job, kind EventKind, why error) {
	j, kind, why = r.verdict(p)
	switch kind {
	case EventRejected, EventFailed:
		e := r.event(kind, j, 0)
		e.Error = why.Error()
		r.final(e)
	case skipped:
		r.summary.Skipped++
		r.deps.earlier[j.ID()] = true
	case adopted:
		k := jobKey{j.Text, j.Occurrence}
		e := r.past.open[k]
		delete(r.past.open, k)
		q := &queued{job: j, failures: r.past.failures[k]}
		r.serving.jobs[j.ID()] = q
		if !r.follow(adoption{q, e}) {
			r.enqueue(q, "") // its dependencies were resolved by verdict
		}
	case EventQueued:
		q := &queued{job: j, unfit: why, failures: r.past.failures[jobKey{j.Text, j.Occurrence}]}
		r.serving.jobs[j.ID()] = q
		r.enqueue(q, "") // its dependencies were resolved by verdict
	}
	return j, kind, why
}

// follow follows a's attempt where it runs, or, on a host still being
// opened, once it is (adoptLater); it reports false when the attempt
// cannot be followed, and the job is the caller's to queue again.
func (r *run) follow(a adoption) bool {
	if r.opening(a.attempt) {
		r.past.adoptLater = append(r.past.adoptLater, a)
		return true
	}
	return r.adopt(a.q, a.attempt)
}

// opening reports whether a host where attempt e runs (or part of it) is
// still being opened: its GPUs are not known yet.
func (r *run) opening(e Event) bool {
	return slices.ContainsFunc(e.Places(), func(p Place) bool { return r.sched.table.opening(p.Host) })
}

// queue records q as queued and puts it in the queue.
func (r *run) queue(q *queued, message string) {
	e := r.event(EventQueued, q.job, q.attempts)
	e.Message = message
	if r.opts.Serve {
		e.Spec = r.specOf(q.job)
	}
	r.record(e)
	r.sched.add(q)
}

func (r *run) start(ctx context.Context, a assignment) {
	q, j := a.q, a.q.job
	q.attempts++
	q.launched.Parts = nil // an earlier attempt's, until this one is launched
	h := a.p.host.host
	parts := a.p.parts()
	e := r.event(EventStarted, j, q.attempts)
	e.Host, e.GPUs = h.Name, a.p.gpuIDs()
	logs, err := openLogs(r.opts.LogDir, j.ID(), r.fileMode)
	if err != nil {
		go r.hand(result{a: a, code: -1, err: err})
		return
	}
	// Its parts: one a host, or, on a Slurm cluster, one a node of its
	// one batch job.
	nparts := len(parts)
	if a.p.host.cluster {
		nparts = max(j.Nodes, 1)
	}
	if nparts > 1 {
		err = openPartLogs(&logs, nparts, r.fileMode)
	}
	q.tag = r.tag(j, q.attempts)
	cmds := make([]part, len(parts))
	tags := make([]string, len(parts))
	var master string
	if len(parts) > 1 {
		master = r.masterAddr(h)
	}
	for k, pt := range parts {
		if err != nil {
			break
		}
		tags[k] = partTag(q.tag, k)
		cmds[k], err = r.command(pt, j, tags[k], q.attempts)
		cmds[k].logs = logs
		if len(parts) > 1 {
			cmds[k].c.Env = append(cmds[k].c.Env, gangEnv(parts, k, j, master)...)
			cmds[k].c.About += fmt.Sprintf(", part %d of %d", k, len(parts))
			cmds[k].c.Gated = true
		}
		if k > 0 {
			cmds[k].logs = logs.parts[k-1]
		}
	}
	if err != nil {
		logs.close()
		go r.hand(result{a: a, code: -1, err: err, logs: logs})
		return
	}
	c := cmds[0].c
	e.Stdout, e.Stderr = logs.out.Name(), logs.err.Name()
	e.MemMB = a.p.mem
	switch {
	case len(parts) > 1:
		e.Parts = partEvents(parts, tags, logs)
	case nparts > 1:
		// The cluster runs the parts: their logs are the run's, their
		// places Slurm's.
		for k, l := range logs.parts {
			e.Parts = append(e.Parts, Part{Rank: k + 1, Stdout: l.out.Name(), Stderr: l.err.Name()})
			cmds[0].c.PartLogs = append(cmds[0].c.PartLogs, executor.PartLog{Stdout: l.out, Stderr: l.err})
		}
	}
	start := time.Now()
	e.Start = &start
	e.Tag = q.tag
	if c.Code != nil {
		e.Snapshot, e.Tree = c.Code.ID, r.tree
	}
	timeout := c.Timeout
	// The job is pending until its host says it runs: a job shell once it
	// is set up (at once when one is ready), Slurm once it starts it. An
	// attempt that never ran is never said to have started; one over
	// several hosts runs once every part does.
	q.launched, q.pending, q.ran, q.endedAt = e, true, nil, time.Time{}
	e.Event, e.Start, e.Message, e.SettingUp = EventPending, nil, "its shell is being set up on "+h.Name, true
	if len(parts) > 1 {
		e.Message = fmt.Sprintf("its shells are being set up on %d hosts", len(parts))
	}
	if a.p.host.cluster {
		// Slurm holds the job until it runs it, and times it itself.
		e.Message, e.SettingUp = "submitting to Slurm", false
		timeout = 0
	}
	r.record(e)
	deps := r.depFiles(j)
	local := make([]bool, len(parts)) // read here: a reload rewrites hostSlots.host
	for k, pt := range parts {
		local[k] = pt.host.host.Local
	}
	jctx, kill := context.WithCancelCause(ctx)
	q.kill = kill
	// Every part waits, set up, until all are: then they are let go
	// together, and one that cannot be ends the others before any ran.
	hosts := make([]string, len(cmds))
	for k, c := range cmds {
		hosts[k] = c.host
	}
	progress := partsProgress(len(parts), r.progressOf(q), func() { r.letGo(ctx, hosts, tags, kill) })
	for k := range cmds {
		cmds[k].c.Progress = progress(cmds[k].host)
	}
	go func() {
		defer kill(nil)
		if timeout > 0 {
			var cancel context.CancelFunc
			jctx, cancel = context.WithTimeoutCause(ctx, timeout, errJobTimeout)
			defer cancel()
		}
		var err error
		for k := range cmds {
			if err == nil {
				err = r.withDeps(jctx, &cmds[k].c, local[k], j.ID(), deps)
			}
		}
		code, rank := -1, 0
		switch {
		case err != nil:
		case len(cmds) == 1:
			code, err = r.opts.Executor.Run(jctx, cmds[0].host, cmds[0].c, logs.out, logs.err)
		default:
			var port int
			if port, err = r.masterPort(jctx, cmds[0].host); err == nil {
				for k := range cmds {
					cmds[k].c.Env = append(cmds[k].c.Env, "MASTER_PORT="+strconv.Itoa(port))
				}
				code, rank, err = runParts(jctx, hosts, func(ctx context.Context, k int) (int, error) {
					c := cmds[k]
					return r.opts.Executor.Run(ctx, c.host, c.c, c.logs.out, c.logs.err)
				})
				if pe := (*PartError)(nil); errors.As(err, &pe) {
					rank = pe.Rank // one that could not be let go
				}
			}
		}
		if cerr := logs.close(); err == nil && cerr != nil {
			err = cerr
		}
		r.hand(result{a: a, code: code, err: err, rank: rank, start: start, end: time.Now(), logs: logs})
	}()
}

// command is what part pt of an attempt of j runs (the whole of it, for a
// job on one host): the line, the environment of its host (and, for a
// part, of the job's other parts), its set-up, its code and time limit.
func (r *run) command(pt placement, j *Job, tag string, attempt int) (part, error) {
	h := pt.host.host
	code := r.opts.Snapshots[h.Sync]
	if j.Code != nil {
		code = j.Code // the submit's own snapshot
	}
	if h.Sync != "" && code == nil {
		return part{}, fmt.Errorf("sync: no snapshot of %s was taken (the directory was named after the run started): start a new run", h.Sync)
	}
	c := executor.Command{
		Script:  j.Command,
		Env:     jobEnv(h, j, pt),
		Prelude: prelude(h, j),
		Tag:     tag,
		GPUs:    j.GPUs,
		GPUType: pt.host.gresType(j),
		Nodes:   pt.host.hostsOf(j), // a Slurm cluster runs all the parts
		// The time limit is kept where the job runs, with or without this
		// coordinator; this one times it too (the first to act ends it).
		Timeout: cmp.Or(j.Timeout, r.opts.Timeout),
		About:   fmt.Sprintf("log dir %s, run %s, job %s, attempt %d", r.logDirAbs, r.id, j.ID(), attempt),
	}
	if code != nil {
		c.Code = code.Code()
		c.Tree = r.tree
	}
	return part{host: h.Name, c: c}, nil
}

// hand gives the loop the result of an attempt, or drops it once Run has
// returned: a run that detached leaves its jobs running, and their
// goroutines end. (A cancelled run still takes every result.)
func (r *run) hand(res result) {
	select {
	case r.attempts.results <- res:
	case <-r.attempts.over:
	}
}

// prelude is what j's shell on h sets up before it: the host's, with the
// job's own conda env when it names one.
func prelude(h inventory.Host, j *Job) executor.Prelude {
	p := HostPrelude(h)
	p.Conda = cmp.Or(j.Conda, h.Conda)
	return p
}

// HostPrelude is what a job's shell on h sets up before the job, for a job
// of no conda env of its own: h's workdir, env, setup, and its shell's
// kind.
func HostPrelude(h inventory.Host) executor.Prelude {
	return executor.Prelude{
		Workdir:     h.Workdir,
		Setup:       h.Setup,
		Conda:       h.Conda,
		Venv:        h.Venv,
		Modules:     h.Modules,
		Interactive: h.Interactive,
		Env:         h.Env,
	}
}

// jobEnv is the inventory's env, then gpudispatch's own variables, which
// win. On a Slurm cluster, Slurm sets CUDA_VISIBLE_DEVICES.
func jobEnv(h inventory.Host, j *Job, p placement) []string {
	var env []string
	if h.Local {
		env = append(env, j.CallerEnv...)
	}
	env = append(env, h.Env...)
	if h.NCCLIfname != "" {
		env = append(env, "NCCL_SOCKET_IFNAME="+h.NCCLIfname)
	}
	if !p.host.cluster {
		env = append(env, "CUDA_VISIBLE_DEVICES="+p.visible())
	}
	env = append(env,
		"CUDA_DEVICE_ORDER=PCI_BUS_ID",
		"GPUDISPATCH_JOB_ID="+j.ID(),
		"GPUDISPATCH_HOST="+h.Name,
	)
	if p.mem > 0 {
		// What it declared, so that it can keep to it.
		env = append(env, "GPUDISPATCH_MEM_MB="+strconv.Itoa(p.mem))
	}
	return env
}

// progress is what a host said of attempt of q's job: that it runs, or
// (a Slurm cluster) why it waits.
type progress struct {
	q       *queued
	attempt int
	// host is where the part of the attempt that said it runs (the
	// attempt's host, but for a job over several hosts).
	host string
	executor.Progress
}

// progressOf passes what a host says of q's current attempt to the run.
func (r *run) progressOf(q *queued) func(host string, p executor.Progress) {
	attempt := q.attempts
	return func(host string, p executor.Progress) {
		select {
		case r.attempts.progress <- progress{q, attempt, host, p}:
		case <-r.bg.Done():
		}
	}
}

// onProgress records a job's start, or a cluster job's new reason to
// wait.
func (r *run) onProgress(p progress) {
	q := p.q
	if q.kill == nil || q.attempts != p.attempt {
		return // it ended meanwhile, or this is about an earlier attempt
	}
	switch {
	case !p.CutOff.IsZero():
		r.cutOff(p.host, p.CutOff, p.Why)
		return
	case !p.Ended.IsZero() && p.host == q.launched.Host:
		q.endedAt = p.Ended
		return
	case !q.pending:
		return
	}
	e := q.launched
	q.slurmID = p.ID
	e.Time, e.SlurmJobID = time.Now(), p.ID
	if p.Running {
		start := time.Now()
		if !p.Started.IsZero() && p.Started.Before(start) {
			start = p.Started // the host's start, not the poll's that saw it
		}
		q.pending, q.ran, e.Start = false, &start, &start
		r.record(e)
		return
	}
	e.Event, e.Start, e.Message = EventPending, nil, p.Reason
	r.record(e)
}

// tag names one attempt of j on its host (executor.Command.Tag).
func (r *run) tag(j *Job, attempt int) string {
	return fmt.Sprintf("%s-%d-%d", r.id, j.Seq, attempt)
}

// onResult acts on the end of an attempt, as outcomeOf reads it: the host
// taken out of use, the job waiting again with no attempt used, its end
// recorded (and its slots let go unless its processes may hold them), then
// a retry, its files brought back, or the end of its story.
func (r *run) onResult(res result) {
	r.attempts.inFlight--
	o := outcomeOf(res.code, res.err)
	q, p := res.a.q, res.a.p
	q.kill = nil
	// The host whose answer this is: the job's, or that of the part of a
	// job over several hosts that ended it.
	at := p.partHost(res.rank)
	if o.hostDown {
		r.hostDown(at, res.err)
	}
	if p.host.cluster {
		r.sched.table.limit(p.host, o.limited)
	}
	switch {
	case o.limited:
		// Nothing ran and the host is fine: the job waits for a slot there
		// or elsewhere, without using an attempt.
		r.takeBack(q, p, res.logs)
		r.record(r.warning(p.host.host.Name, q.job.ID(), res.err.Error()+fmt.Sprintf("; it takes at most %s of this run until one of them ends", Count(p.host.gpus[0].cap, "job"))))
		r.notStarted(q)
		r.sched.add(q)
		return
	case o.unfit:
		// Nothing ran: the host could not set up the job's environment.
		r.takeBack(q, p, res.logs)
		if r.stopping {
			r.final(r.event(EventCancelled, q.job, q.attempts))
			return
		}
		r.setUnfit(at, q, res.err)
		return
	}
	if !o.unstopped {
		r.release(p)
	}
	e := r.ended(o, res)
	returns := returnsOf(q.job, p.host.host.Return)
	switch {
	case r.retryFailure(q, e, o.notStarted || o.unstopped):
	case o.kind == EventLost && q.attempts <= r.opts.Retries && !r.stopping:
		r.record(e)
		r.record(r.event(EventRetried, q.job, q.attempts))
		r.sched.add(q)
		// Its host may have been down past --host-down-timeout while the
		// job was presumed running there: with nowhere else to go, it
		// fails now rather than wait for a timer already gone off.
		r.failWaiting(func(j *Job) string { return r.sched.table.unrunnable(j, r.opts.HostDownTimeout) })
	case len(returns) > 0 && e.Start != nil && !o.notStarted && !o.unstopped && o.kind != EventLost:
		// Its files come back before its end is told (summary, hooks,
		// waiters): a hook finds them there.
		e.Return, e.Snapshot, e.Tree = returns, q.launched.Snapshot, q.launched.Tree
		r.record(e)
		r.fetchReturns(e, jobWorkdir(p.host.host), func() { r.conclude(e) })
	default:
		r.final(e)
	}
}

// takeBack undoes an attempt that never ran: its slots are free again, it
// does not count, and its empty logs go.
func (r *run) takeBack(q *queued, p placement, logs logFiles) {
	r.release(p)
	q.attempts--
	logs.remove()
}

// ended is the event that ends the attempt of res, as o reads it: where it
// ran and its logs (unless it never started), when it ran, its exit
// status, and a hint for a command not found. An attempt that may run on
// gets a fence (its host stops it once it answers); one that never
// started does not count, and its logs go.
func (r *run) ended(o outcome, res result) Event {
	q, p := res.a.q, res.a.p
	e := r.event(o.kind, q.job, q.attempts)
	e.Host, e.GPUs = p.host.host.Name, p.gpuIDs()
	if res.logs.out != nil && !o.notStarted {
		e.Stdout, e.Stderr = res.logs.out.Name(), res.logs.err.Name()
		e.Start, e.End = &res.start, &res.end
		if !q.endedAt.IsZero() {
			e.End = &q.endedAt // learned late: the job's own end, not the reconnect's
		}
	}
	if q.ran != nil || p.host.cluster {
		// It ran from when its host said so.
		e.Start, e.SlurmJobID = q.ran, q.slurmID
	}
	q.pending = false
	if res.code >= 0 && o.kind != EventLost {
		e.Exit = &res.code
	}
	if res.err != nil {
		e.Error = res.err.Error()
	}
	e.ByUser = o.byUser
	if o.kind == EventFailed && res.code == exitNotFound && e.Stderr != "" {
		e.Hint = hint(e.Stderr, e.Host, p.host.host.Local)
	}
	e.Parts = q.launched.Parts
	if pe := (*PartError)(nil); errors.As(res.err, &pe) && !o.notStarted {
		e.FailedPart = &pe.Rank
	}
	if o.unstopped {
		// A fence stops it once its host answers: the host, for a job over
		// several hosts, of the part that could not be told to stop, whose
		// tag names it there (the others were).
		e.Unstopped, e.Tag = true, partTag(q.tag, res.rank)
		e.Host = p.partHost(res.rank).host.Name
		r.putUp(fence{ended: e, p: p, held: true})
	}
	if o.notStarted {
		// Nothing ran: the attempt does not count and its empty logs go.
		q.attempts--
		res.logs.remove()
		e.Error += " (the job did not start)"
	}
	return e
}

// retryFailure queues q again when its attempt, which ended with e, failed
// (the job exited non-zero) or timed out, and it has retries left (its
// line's retries=, else the run's RetryFailed): e and a retried event that
// says why are journaled, and nothing else of an end happens (no summary,
// no hook, no dependent let go: they wait for its last attempt). A cancel,
// an attempt that did not start or could not be stopped, is never retried.
func (r *run) retryFailure(q *queued, e Event, notStarted bool) bool {
	failed := e.Event == EventFailed && e.Exit != nil && *e.Exit > 0 || e.Event == EventTimeout
	retries := q.job.Retries
	if retries < 0 {
		retries = r.opts.RetryFailed
	}
	if !failed || notStarted || r.stopping || q.failures >= retries {
		if failed {
			q.failures++
		}
		return false
	}
	q.failures++
	r.record(e)
	again := r.event(EventRetried, q.job, q.attempts)
	why := "it timed out"
	if e.Event == EventFailed {
		why = fmt.Sprintf("it exited %d", *e.Exit)
	}
	again.Message = fmt.Sprintf("attempt %d failed: %s; retry %d of %d (retries=%d)", q.attempts, why, q.failures, retries, retries)
	r.record(again)
	r.sched.add(q)
	return true
}

// notStarted records that q's attempt never began: q waits again, and
// the attempt does not count.
func (r *run) notStarted(q *queued) {
	e := r.event(EventRetried, q.job, q.attempts)
	e.NotStarted = true
	r.record(e)
}

// onUpdate applies an edit of the inventory: new hosts and GPUs get jobs,
// dropped ones get no new job, and waiting jobs that can no longer run
// anywhere (pinned to a dropped host or GPU) fail, saying why.
func (r *run) onUpdate(u Update) {
	if u.Err != nil {
		r.record(r.warning("", "", "inventory edit ignored, the run goes on as it was: "+u.Err.Error()))
		return
	}
	if r.opts.Snapshots == nil {
		r.opts.Snapshots = map[string]*snapshot.Snapshot{}
	}
	maps.Copy(r.opts.Snapshots, u.Snapshots)
	r.mem.look = true // hosts added, or opened
	changes := r.sched.table.update(u.Inventory)
	for _, name := range u.Opened {
		if h := r.sched.table.byName[name]; h != nil {
			r.sched.table.setOpened(h)
			if u.Down[name] == nil && u.LeftOut[name] == nil {
				// With its GPUs, which a gpus: auto host has only now.
				r.record(Event{Time: time.Now(), Event: EventHostUp, Run: r.id, Host: name, Message: "opened", GPUs: asIDs(h.host.GPUs)})
			}
		}
	}
	if r.opts.LeftOut == nil && len(u.LeftOut) > 0 {
		r.opts.LeftOut = map[string]error{}
	}
	for name, why := range u.LeftOut {
		r.opts.LeftOut[name] = why
		what := "added to the inventory but left out: "
		if slices.Contains(u.Opened, name) {
			what = "left out: "
		}
		r.record(r.warning(name, "", what+why.Error()))
	}
	for _, w := range u.Warnings {
		r.record(r.warning("", "", w))
	}
	for name, why := range u.Down {
		if h := r.sched.table.byName[name]; h != nil {
			r.hostDown(h, why)
		}
	}
	if len(changes) > 0 {
		r.record(Event{Time: time.Now(), Event: EventReloaded, Run: r.id, Message: strings.Join(changes, "; ")})
	}
	r.watchUsages()
	why := map[*queued]error{}
	dropped := r.sched.dropIf(func(q *queued) bool {
		final, err := r.admissible(q.job)
		if err == nil {
			q.unfit = nil
		}
		why[q] = err
		return err != nil && final
	})
	for _, q := range dropped {
		e := r.event(EventFailed, q.job, q.attempts)
		e.Error = "the inventory changed: " + why[q].Error()
		if q.unfit != nil || r.opts.LeftOut[q.job.Host] != nil {
			// It never had a place: its line is at fault, or its host.
			e.Event, e.Error = EventRejected, why[q].Error()
		}
		r.final(e)
	}
	later := r.past.adoptLater
	r.past.adoptLater = nil
	for _, a := range later {
		if !r.follow(a) {
			r.enqueue(a.q, "") // its dependencies were resolved as it came
		}
	}
}

// hostEvent is an event about h rather than about a job.
func (r *run) hostEvent(kind EventKind, h *hostSlots) Event {
	e := Event{Time: time.Now(), Event: kind, Run: r.id, Host: h.host.Name}
	if kind == EventHostDown {
		e.Error = h.why
	}
	return e
}

// event starts an event about j.
func (r *run) event(kind EventKind, j *Job, attempt int) Event {
	e := Event{
		Time: time.Now(), Event: kind, Run: r.id,
		Job: j.ID(), Seq: j.Seq, Source: j.Where(),
		Text: j.Text, Occurrence: j.Occurrence, Command: j.Command,
		Attempt: attempt,
	}
	if !utf8.ValidString(j.Text) {
		e.TextBytes = []byte(j.Text)
	}
	return e
}

// final records the event that ends a job's story in this run.
func (r *run) final(e Event) {
	r.record(e)
	r.conclude(e)
}

// conclude tells the end of a job's story, recorded as e, to the summary,
// the hooks and the waiters.
func (r *run) conclude(e Event) {
	r.summary.add(e)
	if r.opts.Hooks.JobEnd != "" {
		r.jobHook(e)
	}
	if q := r.serving.jobs[e.Job]; q != nil && q.job.Seq == e.Seq {
		q.ended = &e
	}
	r.tellWaiters(e)
	r.depsEnded(e)
}

// warning is the run's warning event about host (or "") and job (or "").
func (r *run) warning(host, job, what string) Event {
	return Event{Time: time.Now(), Event: EventWarning, Run: r.id, Host: host, Job: job, Error: what}
}

// record writes e to the journal, then tells the reporters. A journal that
// cannot be written stops the run: no job may start without its record.
func (r *run) record(e Event) {
	if err := r.journal.append(e); err != nil && r.summary.JournalError == "" {
		r.summary.JournalError = err.Error()
		r.stopping = true
	}
	for _, rep := range r.opts.Reporters {
		rep.Report(e)
	}
}

// Summary is how a run ended.
type Summary struct {
	// Counts holds the number of jobs by final event kind.
	Counts map[EventKind]int
	// Skipped counts jobs --resume found finished already.
	Skipped int
	// Unsuccessful lists the final events of the jobs that did not finish,
	// in input order.
	Unsuccessful []Event
	// InputErrors are inputs that could not be read to the end.
	InputErrors []string
	// JournalError is why the journal could not be written, if it could not.
	JournalError string
	// Interrupted is set after a drain or cancel.
	Interrupted bool
}

func newSummary() *Summary { return &Summary{Counts: map[EventKind]int{}} }

// reopen takes back e, the final event of a job that is retried.
func (s *Summary) reopen(e Event) {
	i := slices.IndexFunc(s.Unsuccessful, func(u Event) bool { return u.Seq == e.Seq && u.Job == e.Job })
	if i < 0 {
		return // it ended in an earlier run
	}
	s.Unsuccessful = slices.Delete(s.Unsuccessful, i, i+1)
	s.Counts[e.Event]--
	if s.Counts[e.Event] == 0 {
		delete(s.Counts, e.Event)
	}
}

func (s *Summary) add(e Event) {
	s.Counts[e.Event]++
	if e.Event != EventFinished {
		i := sort.Search(len(s.Unsuccessful), func(i int) bool { return s.Unsuccessful[i].Seq > e.Seq })
		s.Unsuccessful = append(s.Unsuccessful, Event{})
		copy(s.Unsuccessful[i+1:], s.Unsuccessful[i:])
		s.Unsuccessful[i] = e
	}
}

// Succeeded reports whether every job succeeded and everything could be
// read and written.
func (s *Summary) Succeeded() bool {
	return len(s.Unsuccessful) == 0 && len(s.InputErrors) == 0 && s.JournalError == ""
}
