package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/snapshot"
)

// Control steers a run while it goes on: it adds jobs (a run started with
// Options.Serve), cancels, retries and reorders them, answers status and
// stops the run. Its methods may be called from any goroutine; each is
// carried out by the run's loop, between two of its events, so it sees and
// changes the run as the loop does. The control socket and the web page are
// its clients.
type Control struct {
	reqs chan func(*run)
	done chan struct{}
}

// NewControl returns a Control for one Run (Options.Control).
func NewControl() *Control {
	return &Control{reqs: make(chan func(*run)), done: make(chan struct{})}
}

// ErrRunEnded is returned by Control's methods once the run has ended.
var ErrRunEnded = errors.New("the run has ended")

// ErrNotServing is returned by Submit to a run that reads its jobs from
// its input.
var ErrNotServing = errors.New("this run reads its jobs from its input: jobs can be submitted to gpudispatch serve only")

// do runs f on the run's loop and returns once it has.
func (c *Control) do(ctx context.Context, f func(*run)) error {
	finished := make(chan struct{})
	select {
	case c.reqs <- func(r *run) { f(r); close(finished) }:
	case <-c.done:
		return ErrRunEnded
	case <-ctx.Done():
		return ctx.Err()
	}
	<-finished // the loop never blocks in f
	return nil
}

// Defaults apply to every job of a submitted batch that does not say
// otherwise in its line.
type Defaults struct {
	Name     string
	Host     string
	GPUs     int // 0: one
	Priority int
	Timeout  time.Duration
	// Env is the submitter's environment ("NAME=value"): the batch's jobs
	// get it on local hosts, as they would have run where it was
	// submitted (see Job.CallerEnv).
	Env []string
	// After are the jobs each job of the batch waits for (submit --after),
	// unless its line says otherwise.
	After []string
	// Snapshot is the ID of the snapshot of SyncDir that the submitter
	// took (submit --sync): the batch's jobs run in it on every host.
	Snapshot, SyncDir string
	// Kind is the kind of GPU the batch's jobs need (submit --model,
	// --vram, --tags); the run's own for what it does not say.
	Kind
}

// Batch is job lines submitted together.
type Batch struct {
	// Source names the batch in errors ("submit:3: ..."); "" is "submit".
	Source string
	Text   string
	Defaults
}

// Submitted is what became of a batch: the ids of the jobs queued, and the
// lines rejected, each with its line number. The jobs are in the journal
// before Submit returns.
type Submitted struct {
	IDs    []string `json:"ids"`
	Errors []string `json:"errors,omitempty"`
}

// Submit queues a batch of job lines, as a run queues lines of its input.
func (c *Control) Submit(ctx context.Context, b Batch) (Submitted, error) {
	var out Submitted
	var err error
	if derr := c.do(ctx, func(r *run) { out, err = r.submit(b) }); derr != nil {
		return out, derr
	}
	return out, err
}

// Answer is what a request did to one job: Err is set when it did nothing.
type Answer struct {
	ID      string `json:"id"`
	Message string `json:"message,omitempty"`
	Err     string `json:"error,omitempty"`
}

// Cancel takes waiting jobs out of the queue and kills running ones (their
// process groups, TERM then KILL); each is recorded cancelled.
func (c *Control) Cancel(ctx context.Context, ids []string) ([]Answer, error) {
	return c.each(ctx, ids, (*run).cancelJob)
}

// Retry queues jobs that ended without success again, as new attempts.
func (c *Control) Retry(ctx context.Context, ids []string) ([]Answer, error) {
	return c.each(ctx, ids, (*run).retryJob)
}

// SetPriority gives a waiting job a new priority, which moves it in the
// queue.
func (c *Control) SetPriority(ctx context.Context, id string, priority int) (Answer, error) {
	as, err := c.each(ctx, []string{id}, func(r *run, q *queued) (string, error) {
		return r.setPriority(q, priority)
	})
	if err != nil {
		return Answer{}, err
	}
	return as[0], nil
}

func (c *Control) each(ctx context.Context, ids []string, f func(*run, *queued) (string, error)) ([]Answer, error) {
	out := make([]Answer, len(ids))
	err := c.do(ctx, func(r *run) {
		for i, id := range ids {
			out[i].ID = id
			q := r.serving.jobs[id]
			if q == nil {
				out[i].Err = fmt.Sprintf("no job %q in this run", id)
				continue
			}
			msg, err := f(r, q)
			out[i].Message = msg
			if err != nil {
				out[i].Err = err.Error()
			}
		}
	})
	return out, err
}

// Status is the journal's status of every job, with each waiting job's
// priority and why it waits, from the run itself.
func (c *Control) Status(ctx context.Context, logDir string) (*Status, error) {
	// The run first, then its journal: every job the run knows of is in
	// the journal by then.
	waits := map[string]waitInfo{}
	if err := c.do(ctx, func(r *run) { waits = r.waits() }); err != nil {
		return nil, err
	}
	st, err := ReadStatus(logDir, time.Now())
	if err != nil {
		return nil, err
	}
	for i := range st.Jobs {
		if w, ok := waits[st.Jobs[i].Job]; ok && st.Jobs[i].State == StateWaiting {
			st.Jobs[i].Priority, st.Jobs[i].Why = w.priority, w.why
		}
	}
	return st, nil
}

// Wait returns once every job named has ended, with their final events. An
// id that names no job of the run is an error.
func (c *Control) Wait(ctx context.Context, ids []string) ([]Event, error) {
	w := &waiter{pending: map[string]bool{}, ended: make(chan struct{})}
	var err error
	if derr := c.do(ctx, func(r *run) { err = r.addWaiter(w, ids) }); derr != nil {
		return nil, derr
	}
	if err != nil {
		return nil, err
	}
	select {
	case <-w.ended:
		return w.events, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.done:
		// The loop ends every job's story before it returns, so a waiter
		// it had not answered yet is answered now or never.
		select {
		case <-w.ended:
			return w.events, nil
		default:
			return nil, ErrRunEnded
		}
	}
}

// Stop drains the run: no new job starts, running jobs finish and the ones
// that waited are recorded cancelled. With now, the running jobs are
// killed too.
func (c *Control) Stop(ctx context.Context, now bool) error {
	return c.do(ctx, func(r *run) {
		r.stop()
		if now {
			r.attempts.kill(errStopNow)
		}
	})
}

// Detach ends the run at once and leaves its running jobs running where
// they run, with their GPUs locked until they end: a run with Resume (or
// serve --resume) on the log dir re-adopts them. The jobs that waited are
// recorded cancelled (serve --resume queues a server's again).
func (c *Control) Detach(ctx context.Context) error {
	return c.do(ctx, func(r *run) {
		r.stop()
		r.detached = true
	})
}

// errCancelAsked and errStopNow are the causes given to a job's context
// when it is killed on request.
var (
	errCancelAsked = StopCause("cancelled on request")
	errStopNow     = StopCause("stopped with --now")
	errStopPending = StopCause("the run is stopping and the job had not started")
)

// StopCause is why jobs were stopped, as the cause of their context: it is
// said in words alone (not "context canceled"), and is a context.Canceled.
type StopCause string

func (c StopCause) Error() string { return string(c) }

// Is makes a StopCause a context.Canceled.
func (c StopCause) Is(target error) bool { return target == context.Canceled }

// serving keeps what Control steers: jobs are the run's jobs by id (every
// job queued, held or run, and its end once its story ended: q.ended);
// waiters are the Wait calls not answered yet, each answered once every
// job it names ended. A served run numbers the jobs submitted after those
// of its journal (seq), and names them as a job file would (seen, names: a
// name used twice is refused); requeue are the jobs an earlier server
// left unfinished (serve --resume), queued again as it starts, and
// unfinished counts those it does not queue again (no --resume), for a
// warning.
type serving struct {
	jobs       map[string]*queued
	waiters    []*waiter
	seq        int
	seen       map[string]int
	names      map[string]string
	requeue    []*queued
	unfinished int
}

// waiter is a Wait call: the ids whose story has not ended, and the final
// events of those that have.
type waiter struct {
	pending map[string]bool
	events  []Event
	ended   chan struct{}
}

func (r *run) addWaiter(w *waiter, ids []string) error {
	for _, id := range ids {
		q := r.serving.jobs[id]
		switch {
		case q == nil:
			return fmt.Errorf("no job %q in this run", id)
		case q.ended != nil:
			w.events = append(w.events, *q.ended)
		default:
			w.pending[id] = true
		}
	}
	if len(w.pending) == 0 {
		close(w.ended)
		return nil
	}
	r.serving.waiters = append(r.serving.waiters, w)
	return nil
}

// tellWaiters tells the waiters that e ended its job's story.
func (r *run) tellWaiters(e Event) {
	kept := r.serving.waiters[:0]
	for _, w := range r.serving.waiters {
		if w.pending[e.Job] {
			delete(w.pending, e.Job)
			w.events = append(w.events, e)
		}
		if len(w.pending) == 0 {
			close(w.ended)
			continue
		}
		kept = append(kept, w)
	}
	clear(r.serving.waiters[len(kept):])
	r.serving.waiters = kept
}

// submit parses and admits a batch (the loop's side of Control.Submit).
func (r *run) submit(b Batch) (Submitted, error) {
	var out Submitted
	switch {
	case !r.opts.Serve:
		return out, ErrNotServing
	case r.stopping:
		return out, errors.New("the server is stopping: it takes no new job")
	}
	source := b.Source
	if source == "" {
		source = "submit"
	}
	var code *snapshot.Snapshot
	if b.Snapshot != "" {
		if r.opts.OpenSnapshot == nil {
			return out, errors.New("this server takes no snapshot of code")
		}
		var err error
		if code, err = r.opts.OpenSnapshot(b.Snapshot, b.SyncDir); err != nil {
			return out, err
		}
	}
	p := newParser(strings.NewReader(b.Text), source, &r.serving.seq, r.serving.seen, r.serving.names)
	p.defaults = b.Defaults
	p.defaults.Kind = b.Kind.or(r.opts.Kind)
	// Local jobs start from the coordinator's environment: only what the
	// submitter has otherwise needs carrying (and keeping in the journal).
	p.defaults.Env = envChanges(b.Env, r.opts.Environ)
	for {
		j, err := p.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if j != nil {
			j.Code = code
		}
		j, kind, why := r.admit(parsed{job: j, err: err})
		switch kind {
		case EventQueued:
			out.IDs = append(out.IDs, j.ID())
		case EventRejected, EventFailed:
			out.Errors = append(out.Errors, j.Where()+": "+why.Error())
		}
	}
	if r.summary.JournalError != "" {
		return out, fmt.Errorf("the journal cannot be written, so the jobs are not queued: %s", r.summary.JournalError)
	}
	return out, nil
}

func (r *run) cancelJob(q *queued) (string, error) {
	switch {
	case q.ended != nil:
		return "", fmt.Errorf("job %s has ended (%s)", q.job.ID(), StateWord(q.ended.Event.State()))
	case r.sched.remove(q):
		r.cancelledBeforeStart(q)
		return "cancelled (it was waiting)", nil
	case q.deps != nil:
		r.deps.unhold(q)
		r.cancelledBeforeStart(q)
		return "cancelled (it was waiting for the jobs it comes after)", nil
	case q.kill != nil:
		q.kill(errCancelAsked)
		return "cancelled: its processes are being killed", nil
	case q.claiming:
		q.cancelAsked = true
		return "cancelled (it was about to start)", nil
	}
	return "", fmt.Errorf("job %s is neither waiting nor running", q.job.ID())
}

// cancelledBeforeStart records that q, asked to be cancelled, never ran.
func (r *run) cancelledBeforeStart(q *queued) {
	e := r.event(EventCancelled, q.job, q.attempts)
	e.Error, e.ByUser = "cancelled on request before it started", true
	r.final(e)
}

func (r *run) retryJob(q *queued) (string, error) {
	switch {
	case q.ended == nil:
		return "", fmt.Errorf("job %s has not ended: nothing to retry", q.job.ID())
	case !Retryable(q.ended.Event.State()):
		return "", fmt.Errorf("job %s %s: only a job that failed, timed out, was lost or was cancelled is retried", q.job.ID(), StateWord(q.ended.Event.State()))
	case r.stopping:
		return "", errors.New("the run is stopping: it starts no job")
	}
	r.summary.reopen(*q.ended)
	q.ended = nil
	e := r.event(EventRetried, q.job, q.attempts)
	e.ByUser, e.Message = true, "queued again on request"
	r.record(e)
	if len(q.job.After) > 0 || len(q.job.AfterAny) > 0 {
		// It waits again for the jobs it comes after (one retried
		// before it runs again; one that failed cancels it again).
		if err := r.enqueue(q, "queued again on request"); err != nil {
			return "", err
		}
		return "queued again, after the jobs it waits for", nil
	}
	r.sched.add(q)
	return "queued again", nil
}

func (r *run) setPriority(q *queued, priority int) (string, error) {
	if priority < -maxPriority || priority > maxPriority {
		return "", fmt.Errorf("priority %d: want a whole number from %d to %d", priority, -maxPriority, maxPriority)
	}
	if !r.sched.remove(q) {
		return "", fmt.Errorf("job %s is not waiting: a priority only orders the queue", q.job.ID())
	}
	old := q.job.Priority
	q.job.Priority = priority
	r.sched.add(q)
	e := r.event(EventPriority, q.job, q.attempts)
	e.Message = fmt.Sprintf("priority %d → %d", old, priority)
	e.Spec = r.specOf(q.job)
	r.record(e)
	return e.Message, nil
}

// stop is the first stage of stopping: no new input or job.
func (r *run) stop() {
	r.stopping = true
	r.summary.Interrupted = true
	// A job a Slurm cluster still holds has not started: it is cancelled
	// like a waiting job.
	for _, q := range r.serving.jobs {
		if q.pending && q.kill != nil {
			q.kill(errStopPending)
		}
	}
}

// waitInfo is a waiting job's priority and why it waits.
type waitInfo struct {
	priority int
	why      string
}

// waits says why each waiting job waits.
func (r *run) waits() map[string]waitInfo {
	out := make(map[string]waitInfo, len(r.sched.waiting))
	for i, q := range r.sched.waiting {
		out[q.job.ID()] = waitInfo{q.job.Priority, r.sched.table.whyWaiting(q.job, i)}
	}
	for _, q := range r.deps.held {
		out[q.job.ID()] = waitInfo{q.job.Priority, heldWhy(q)}
	}
	for id, q := range r.serving.jobs {
		if q.claiming {
			out[id] = waitInfo{q.job.Priority, "starting: taking its GPUs' locks"}
		}
	}
	return out
}

// specOf is how j was queued, for the journal; its submitter's
// environment goes to a file of the user's alone (keepEnv), which the
// spec names.
func (r *run) specOf(j *Job) *JobSpec {
	spec := &JobSpec{
		Name: j.Name, Host: j.Host, GPU: j.GPU, GPUs: j.GPUs, Priority: j.Priority,
		TimeoutSeconds: j.Timeout.Seconds(), Prefer: j.Prefer, PreferGPU: j.PreferGPU,
		After: j.After, AfterAny: j.AfterAny, Models: j.Models, VRAMMB: j.VRAMMB, Tags: j.Tags,
	}
	if len(j.CallerEnv) > 0 {
		name, err := keepEnv(r.opts.LogDir, j.CallerEnv)
		if err != nil {
			r.record(r.warning("", j.ID(), err.Error()+"; serve --resume runs the job with the server's environment"))
		}
		spec.EnvFile = name
	}
	if j.Code != nil {
		spec.Snapshot, spec.SyncDir = j.Code.ID, j.Code.Dir
	}
	return spec
}

// envChanges is the entries of env ("NAME=value") that base does not
// hold as they are.
func envChanges(env, base []string) []string {
	have := make(map[string]bool, len(base))
	for _, kv := range base {
		have[kv] = true
	}
	var out []string
	for _, kv := range env {
		if !have[kv] {
			out = append(out, kv)
		}
	}
	return out
}

// secondsDuration is the inverse of Duration.Seconds.
func secondsDuration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
