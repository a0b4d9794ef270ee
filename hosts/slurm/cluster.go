package slurm

import (
	"bufio"
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/codestore"
	"github.com/gpudispatch/gpudispatch/hosts/results"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
	"github.com/gpudispatch/gpudispatch/inventory"
)

//go:embed agent.sh
var agentScript string

// AgentName is the agent's process name on the login node (ps shows it,
// with the run).
const AgentName = "gpudispatch-slurm-agent"

// Options configure a Cluster.
type Options struct {
	// Name is the cluster's inventory name, for messages.
	Name  string
	Slurm inventory.Slurm
	// Spawn starts bash on the login node; WaitUp returns once it can be
	// reached (nil: it always can).
	Spawn  spawn.Func
	WaitUp func(context.Context) error
	// Heartbeat is how often the agent hears from the coordinator; after
	// three missed ones and Grace, it exits, and the run's jobs run on in
	// Slurm.
	Heartbeat, Grace time.Duration
	// KeepCode is how long the cluster's content store keeps snapshots no
	// run used (0: codestore.DefaultKeep).
	KeepCode time.Duration
}

// Cluster runs jobs as batch jobs of a Slurm cluster, through one agent on
// its login node. It implements the executor contract for one host.
type Cluster struct {
	o Options

	mu     sync.Mutex
	run    string // the tag prefix of this coordinator's run
	ag     *agent
	jobs   map[string]*job // by tag, from submit to end
	closed bool
	bg     context.Context
	stop   context.CancelFunc
	// code is the content store under the cluster's workdir, on its
	// shared filesystem, where the jobs' snapshots are built.
	code *codestore.Store
	// types are the gres types of its GPUs, as its last Check saw them.
	types []string
}

// New returns a cluster runner; it reaches the login node on first use.
func New(o Options) *Cluster {
	if o.WaitUp == nil {
		o.WaitUp = func(context.Context) error { return nil }
	}
	bg, stop := context.WithCancel(context.Background())
	return &Cluster{o: o, jobs: map[string]*job{}, bg: bg, stop: stop,
		code: codestore.New(o.Spawn, o.KeepCode, strings.TrimSuffix(o.Slurm.Workdir, "/")+"/code")}
}

// job is one batch job of the run, from its submission to its end.
type job struct {
	tag            string
	id             string // Slurm's, once known
	stdout, stderr io.Writer
	outN, errN     int64 // bytes home
	// parts are the output of parts 1.. of a job over several nodes.
	parts    []*output
	progress func(executor.Progress)
	// events brings the agent's records about the job to Run, until gone
	// is closed as Run returns.
	events chan record
	gone   chan struct{}
}

// output is where a part of a job writes, and the bytes of it home.
type output struct {
	stdout, stderr io.Writer
	outN, errN     int64
}

// writer is where the output of tag goes ("TAG", or "TAG.rankK" for part
// K of a job over several nodes), and its count of bytes home; nil, nil
// for no job of the run. c.mu is held.
func (c *Cluster) writer(tag string, stderr bool) (io.Writer, *int64) {
	if j := c.jobs[tag]; j != nil {
		if stderr {
			return j.stderr, &j.errN
		}
		return j.stdout, &j.outN
	}
	base, rank, _ := strings.Cut(tag, ".rank")
	k, err := strconv.Atoi(rank)
	j := c.jobs[base]
	if err != nil || j == nil || k < 1 || k > len(j.parts) {
		return nil, nil
	}
	o := j.parts[k-1]
	if stderr {
		return o.stderr, &o.errN
	}
	return o.stdout, &o.outN
}

// deliver hands r to j's Run, unless Run has returned.
func (j *job) deliver(r record) {
	select {
	case j.events <- r:
	case <-j.gone:
	}
}

// record is one line of the agent about a job.
type record struct {
	kind  byte // S F P R X, or 0 when the agent died
	text  string
	state string // X
	code  string // X
}

// Check asks the cluster whether it would take a job with the inventory's
// settings (sbatch --test-only): a bad partition, account, qos or option
// is an error that says so. It reports executor.ErrHostDown when the login
// node cannot be reached. It also says what sinfo and squeue show.
func (c *Cluster) Check(ctx context.Context) (Info, error) {
	var out, errs tail
	p, err := c.o.Spawn(ctx, spawn.Bootstrap(agentCode, AgentName, "check"), &out, &errs)
	if err != nil {
		return Info{}, err
	}
	io.WriteString(p.Stdin, agentCode+string(c.arguments("check")))
	p.Stdin.Close()
	if err := p.Wait(); err != nil {
		if _, exited := spawn.ExitStatus(err); !exited {
			return Info{}, fmt.Errorf("%s: %w: %v", c.o.Name, executor.ErrHostDown, err)
		}
	}
	var info Info
	r := bufio.NewReader(strings.NewReader(out.String()))
	for {
		f, err := spawn.ReadRecord(r)
		switch {
		case err != nil:
			return Info{}, fmt.Errorf("slurm: the login node's bash did not run the agent: %s", errs.String())
		case len(f) == 3 && f[0] == "F":
			return Info{}, fmt.Errorf("slurm: %s", f[2])
		case len(f) == 3 && f[0] == "I" && f[1] == "partition":
			info.Partition = strings.TrimSuffix(strings.TrimSpace(f[2]), ";")
		case len(f) == 3 && f[0] == "I" && f[1] == "queue":
			info.Queue = strings.TrimSpace(f[2])
		case len(f) == 1 && f[0] == "r":
			c.mu.Lock()
			c.types = info.GPUTypes()
			c.mu.Unlock()
			return info, nil
		}
	}
}

// Info is what Check saw of the cluster, for gpudispatch hosts.
type Info struct {
	// Partition is sinfo's word on the partition: availability, nodes,
	// their state and GPUs, per kind of node ("up 1 idle gpu:fake:4").
	Partition string `json:"partition"`
	// Queue counts the user's jobs in the queue by state ("2 PENDING 1
	// RUNNING"), all of them, not only gpudispatch's.
	Queue string `json:"queue"`
}

// gresType is a GPU type in sinfo's gres words ("gpu:a100:4(S:0-1)"); a
// count alone ("gpu:4") names none.
var gresType = regexp.MustCompile(`(?:^|[\s,;])gpu:([A-Za-z][A-Za-z0-9_.-]*):\d`)

// GPUTypes are the gres types of the partition's GPUs, in the order sinfo
// gives them, each once.
func (i Info) GPUTypes() []string {
	var types []string
	for _, m := range gresType.FindAllStringSubmatch(i.Partition, -1) {
		if !slices.Contains(types, m[1]) {
			types = append(types, m[1])
		}
	}
	return types
}

// GPUTypes are the gres types the cluster's partition said it has when it
// was last checked (Check).
func (c *Cluster) GPUTypes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.types)
}

// agentCode is what the agent runs, after the prelude every script gets.
var agentCode = spawn.Prelude + agentScript

// arguments is the agent's first record (see agent.sh): for run (its
// tag prefix, or "check", or "cancel-TAG"), the cluster's workdir, how
// often it polls, the silence after which it leaves, how often it looks at
// the output (seconds), and the sbatch options.
func (c *Cluster) arguments(run string) []byte {
	s := c.o.Slurm
	args := []string{"--partition=" + s.Partition}
	if s.Account != "" {
		args = append(args, "--account="+s.Account)
	}
	if s.QOS != "" {
		args = append(args, "--qos="+s.QOS)
	}
	args = append(args, s.SbatchArgs...)
	silence := int(math.Ceil((3*c.o.Heartbeat + c.o.Grace).Seconds()))
	return spawn.Record(append([]string{run, s.Workdir, strconv.Itoa(max(1, int(s.Poll.Seconds()))), strconv.Itoa(max(1, silence)), "0.5"}, args...)...)
}

// Run implements the executor contract for the cluster: it submits c and
// returns once Slurm is done with it.
func (c *Cluster) Run(ctx context.Context, cmd executor.Command, stdout, stderr io.Writer) (int, error) {
	if cmd.Code != nil {
		// The snapshot's tree, built under the cluster's workdir, is the
		// job's workdir on whichever node runs it.
		dir, sent, err := c.code.Ensure(ctx, cmd.Code, cmp.Or(cmd.Tree, codestore.CheckLog))
		for _, w := range sent.Warnings {
			fmt.Fprintf(stderr, "gpudispatch: %s: %s\n", c.o.Name, w)
		}
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, executor.ErrHostDown) {
				return -1, fmt.Errorf("%s: %w", c.o.Name, err)
			}
			return -1, &executor.UnfitError{Why: err.Error()}
		}
		cmd.Workdir, cmd.Code = dir, nil
	}
	if cmd.Deps != nil {
		dir, _, err := c.code.Ensure(ctx, cmd.Deps, cmp.Or(cmd.Tree, codestore.CheckLog))
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, executor.ErrHostDown) {
				return -1, fmt.Errorf("%s: %w", c.o.Name, err)
			}
			return -1, &executor.UnfitError{Why: "its dependencies' files: " + err.Error()}
		}
		cmd.Env, cmd.Deps = append(slices.Clip(cmd.Env), executor.DepsVar+"="+dir), nil
	}
	run, j, err := c.newJob(cmd, stdout, stderr)
	if err != nil {
		return -1, err
	}
	defer close(j.gone)
	if err := c.submit(ctx, run, j, cmd); err != nil {
		return -1, err
	}
	return c.wait(ctx, j)
}

// newJob is the job that follows cmd, and the run its tag names.
func (c *Cluster) newJob(cmd executor.Command, stdout, stderr io.Writer) (string, *job, error) {
	run, _, ok := cutTag(cmd.Tag)
	if !ok {
		return "", nil, fmt.Errorf("%s: job tag %q: want RUN-SEQ-ATTEMPT", c.o.Name, cmd.Tag)
	}
	j := &job{tag: cmd.Tag, stdout: stdout, stderr: stderr, progress: cmd.Progress,
		events: make(chan record, 16), gone: make(chan struct{})}
	for _, p := range cmd.PartLogs {
		j.parts = append(j.parts, &output{p.Stdout, p.Stderr, p.OutOff, p.ErrOff})
	}
	if j.progress == nil {
		j.progress = func(executor.Progress) {}
	}
	return run, j, nil
}

// cutTag splits RUN-SEQ-ATTEMPT.
func cutTag(tag string) (run, rest string, ok bool) {
	i := strings.LastIndexByte(tag, '-')
	if i <= 0 {
		return "", "", false
	}
	j := strings.LastIndexByte(tag[:i], '-')
	if j <= 0 {
		return "", "", false
	}
	return tag[:j], tag[j+1:], true
}

// submit hands j to the agent, starting one when there is none.
func (c *Cluster) submit(ctx context.Context, run string, j *job, cmd executor.Command) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.agentLocked(ctx, run); err != nil {
		return err
	}
	script := batchScript(cmd, j.tag)
	// --gres=gpu:N, or gpu:TYPE:N for a job that asks for a model.
	gres := strconv.Itoa(max(cmd.GPUs, 1))
	if cmd.GPUType != "" {
		gres = cmd.GPUType + ":" + gres
	}
	c.jobs[j.tag] = j
	nodes := strconv.Itoa(max(cmd.Nodes, 1))
	if err := c.ag.send(submitting(j.tag, gres, nodes, timeLimit(cmd, c.o.Slurm.Time), script)...); err != nil {
		delete(c.jobs, j.tag)
		return fmt.Errorf("%s: %w: %v", c.o.Name, executor.ErrHostDown, err)
	}
	return nil
}

// wait follows j until Slurm is done with it.
func (c *Cluster) wait(ctx context.Context, j *job) (int, error) {
	done := ctx.Done()
	var giveUp <-chan time.Time
	cancelled := false
	for {
		select {
		case <-done:
			if errors.Is(context.Cause(ctx), executor.ErrDetached) {
				// The job runs on in Slurm; a later run re-adopts it.
				c.forget(j)
				return -1, fmt.Errorf("%s: %w", c.o.Name, context.Cause(ctx))
			}
			done = nil
			cancelled = true
			c.cancel(j)
			// Slurm says CANCELLED at the next poll.
			giveUp = time.After(2*c.o.Slurm.Poll + 3*c.o.Heartbeat + c.o.Grace)
		case <-giveUp:
			// Slurm never said the job ended: the cancel may not have
			// reached it.
			c.forget(j)
			return -1, fmt.Errorf("%s: %w (%w)", c.o.Name, context.Cause(ctx), executor.ErrCancelUnreached)
		case r := <-j.events:
			switch r.kind {
			case 'S':
				c.mu.Lock()
				j.id = r.text
				c.mu.Unlock()
				j.progress(executor.Progress{ID: r.text, Reason: "submitted"})
				if cancelled {
					c.cancel(j)
				}
			case 'F':
				c.forget(j)
				if limitRefusal(r.text) {
					return -1, fmt.Errorf("%s: %w: %s", c.o.Name, executor.ErrLimit, r.text)
				}
				return -1, fmt.Errorf("%s: sbatch refused the job: %s", c.o.Name, r.text)
			case 'P':
				j.progress(executor.Progress{ID: j.id, Reason: r.text})
			case 'R':
				p := executor.Progress{ID: j.id, Running: true}
				if sec, err := strconv.ParseInt(r.text, 10, 64); err == nil {
					p.Started = time.Unix(sec, 0)
				}
				j.progress(p)
			case 'X':
				c.forget(j)
				if cancelled {
					return -1, fmt.Errorf("%s: %w", c.o.Name, context.Cause(ctx))
				}
				return c.outcome(j, r)
			}
		}
	}
}

// outcome turns Slurm's last word on j into the executor's.
func (c *Cluster) outcome(j *job, r record) (int, error) {
	code, err := strconv.Atoi(r.code)
	haveCode := err == nil
	where := fmt.Sprintf("%s: Slurm job %s", c.o.Name, j.id)
	switch r.state {
	case "COMPLETED", "FAILED", "GONE":
		if haveCode {
			return code, nil
		}
		if r.state == "GONE" && j.id == "" {
			return -1, fmt.Errorf("%s: %w: it never reached the queue", c.o.Name, executor.ErrHostDown)
		}
		return -1, fmt.Errorf("%s %w: it ended (%s) without writing its exit status", where, executor.ErrJobLost, r.state)
	case "TIMEOUT", "DEADLINE":
		return -1, fmt.Errorf("%s: %w (%s)", where, executor.ErrTimeLimit, r.state)
	case "NODE_FAIL", "PREEMPTED", "BOOT_FAIL":
		return -1, fmt.Errorf("%s %w: %s", where, executor.ErrJobLost, r.state)
	case "CANCELLED":
		return -1, fmt.Errorf("%s was cancelled in Slurm by someone else (scancel)", where)
	}
	return -1, fmt.Errorf("%s ended %s", where, r.state)
}

// limitRefusal reports whether sbatch's message is a refusal for a limit on
// the user's jobs, which passes as their jobs end.
func limitRefusal(msg string) bool {
	for _, s := range []string{"MaxSubmitJob", "job submit limit", "JobLimit", "Resource temporarily unavailable"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// cancel asks Slurm to cancel j, once its id is known.
func (c *Cluster) cancel(j *job) {
	c.mu.Lock()
	ag, id := c.ag, j.id
	c.mu.Unlock()
	if ag != nil && id != "" {
		ag.send(cancelling(id)...)
	}
}

func (c *Cluster) forget(j *job) {
	c.mu.Lock()
	delete(c.jobs, j.tag)
	c.mu.Unlock()
}

// WaitUp returns once the login node can be reached.
func (c *Cluster) WaitUp(ctx context.Context) error { return c.o.WaitUp(ctx) }

// Reap implements the executor contract: Run never returns ErrConnectionLost
// for a cluster (its jobs run on while the login node is away), but a
// cancel may not have reached it (ErrCancelUnreached). Once the login node
// answers, Reap cancels the job tagged tag in Slurm (by its name), which
// then ends it.
func (c *Cluster) Reap(ctx context.Context, tag string) error {
	if err := c.o.WaitUp(ctx); err != nil {
		return err
	}
	var out, errs tail
	p, err := c.o.Spawn(ctx, spawn.Bootstrap(agentCode, AgentName, "cancel-"+tag), &out, &errs)
	if err != nil {
		return err
	}
	io.WriteString(p.Stdin, agentCode+string(c.arguments("cancel-"+tag)))
	p.Stdin.Close()
	if err := p.Wait(); err != nil {
		return fmt.Errorf("%s: cancelling %s: %w: %s", c.o.Name, tag, err, errs.String())
	}
	text := strings.TrimSpace(out.String())
	if msg, ok := strings.CutPrefix(text, "F - "); ok {
		return fmt.Errorf("%s: scancel of %s: %s", c.o.Name, tag, msg)
	}
	if !strings.HasSuffix(text, "r") {
		return fmt.Errorf("%s: the login node's bash did not run the agent: %s", c.o.Name, errs.String())
	}
	return nil
}

// Adopt implements the executor contract: it tracks again the job tagged
// cmd.Tag that an earlier coordinator submitted (found by its name in
// squeue), from the bytes of its output that are home, until Slurm is done
// with it.
func (c *Cluster) Adopt(ctx context.Context, cmd executor.Command, outOff, errOff int64, stdout, stderr io.Writer) (int, time.Time, error) {
	run, j, err := c.newJob(cmd, stdout, stderr)
	if err != nil {
		return -1, time.Now(), err
	}
	defer close(j.gone)
	j.outN, j.errN = outOff, errOff
	tag := cmd.Tag
	c.mu.Lock()
	had := c.ag != nil
	c.jobs[tag] = j
	err = c.agentLocked(ctx, run) // a new agent is told of every job: this one too
	ag := c.ag
	c.mu.Unlock()
	if err != nil {
		c.forget(j)
		return -1, time.Now(), err
	}
	if had {
		c.mu.Lock()
		t := j.tracking("-")
		c.mu.Unlock()
		ag.send(t...)
	}
	code, err := c.wait(ctx, j)
	return code, time.Now(), err
}

// agentLocked starts the agent of run's jobs when there is none; c.mu is
// held.
func (c *Cluster) agentLocked(ctx context.Context, run string) error {
	if c.closed {
		return fmt.Errorf("%s: %w: the run is ending", c.o.Name, executor.ErrHostDown)
	}
	if c.run == "" {
		c.run = run
	}
	if c.ag != nil {
		return nil
	}
	ag, err := c.startAgent(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w: %v", c.o.Name, executor.ErrHostDown, err)
	}
	c.ag = ag
	return nil
}

// Fetch copies the files from names into dst, from the cluster's
// filesystem as its login node sees it.
func (c *Cluster) Fetch(ctx context.Context, from executor.Return, dst string) (executor.Returned, error) {
	if from.Snapshot != "" {
		from.Workdir, from.Snapshot = c.code.Tree(from.Tree, from.Snapshot), ""
	}
	return results.Fetch(ctx, c.o.Spawn, from, dst, 0)
}

// CleanCode removes from the cluster's content store every snapshot and
// content no process of the login node runs in (hosts --clean).
func (c *Cluster) CleanCode(ctx context.Context) (string, error) {
	return codestore.Clean(ctx, c.o.Spawn, strings.TrimSuffix(c.o.Slurm.Workdir, "/")+"/code")
}

// LockGPU implements the executor contract: Slurm gives a cluster's GPUs,
// so there are none to lock.
func (c *Cluster) LockGPU(context.Context, executor.GPUID, string) (executor.GPULock, error) {
	return nil, fmt.Errorf("%s: %w: Slurm gives the GPUs", c.o.Name, executor.ErrNoLocks)
}

// Close ends the agent; jobs it still follows (none, after a run that ended
// well) run on in Slurm. It waits a while for the content store's work on
// the login node (see codestore.Store.Close).
func (c *Cluster) Close() {
	defer c.code.Close()
	c.stop() // ends a reconnection under way, which holds mu
	c.mu.Lock()
	c.closed = true
	ag := c.ag
	c.mu.Unlock()
	if ag != nil {
		ag.send("q")
		select {
		case <-ag.dead:
		case <-time.After(c.o.Grace):
		}
		ag.close()
	}
}

// agent is the agent process on the login node.
type agent struct {
	mu    sync.Mutex
	stdin io.WriteCloser
	dead  chan struct{}
}

// The agent's commands (see agent.sh), each sent as a record: submit a
// batch script (time "-": none), track a job an earlier agent submitted
// with out and err of its bytes home (id "-": found by its name), cancel
// jobs; "h" is a heartbeat, "q" says to quit.
func submitting(tag, gres, nodes, time, script string) []string {
	return []string{"s", tag, gres, nodes, time, script}
}

// tracking is the agent's command to track j (Slurm's id, "-": not known)
// from the bytes of its output home, and of its parts'. c.mu is held.
func (j *job) tracking(id string) []string {
	t := []string{"t", j.tag, id, strconv.FormatInt(j.outN, 10), strconv.FormatInt(j.errN, 10)}
	for _, p := range j.parts {
		t = append(t, strconv.FormatInt(p.outN, 10), strconv.FormatInt(p.errN, 10))
	}
	return t
}

func cancelling(ids ...string) []string { return append([]string{"c"}, ids...) }

// send writes a command to the agent, its fields in a record.
func (a *agent) send(command ...string) error {
	return a.write(spawn.Record(command...))
}

// write writes b to the agent's stdin.
func (a *agent) write(b []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, err := a.stdin.Write(b)
	return err
}

// close closes the agent's stdin, never during a write: x/crypto's
// CloseWrite and Write race on an SSH channel's state.
func (a *agent) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stdin.Close()
}

// startAgent starts the run's agent, tells it the jobs an earlier one
// followed, and starts reading it; c.mu is held.
func (c *Cluster) startAgent(ctx context.Context) (*agent, error) {
	pr, pw := io.Pipe()
	var errs tail
	p, err := c.o.Spawn(ctx, spawn.Bootstrap(agentCode, AgentName, c.run), pw, &errs)
	if err != nil {
		return nil, err
	}
	ag := &agent{stdin: p.Stdin, dead: make(chan struct{})}
	if err := ag.write(append([]byte(agentCode), c.arguments(c.run)...)); err != nil {
		ag.close()
		return nil, err
	}
	br := bufio.NewReader(pr)
	ready := make(chan error, 1)
	go func() {
		err := p.Wait()
		pw.CloseWithError(fmt.Errorf("agent ended: %v %s", err, errs.String()))
	}()
	go c.read(ag, br, ready)
	select {
	case err := <-ready:
		if err != nil {
			ag.close()
			return nil, err
		}
	case <-ctx.Done():
		ag.close()
		return nil, ctx.Err()
	}
	for _, j := range c.jobs {
		id := j.id
		if id == "" {
			id = "-"
		}
		ag.send(j.tracking(id)...)
	}
	go c.heartbeat(ag)
	return ag, nil
}

func (c *Cluster) heartbeat(ag *agent) {
	t := time.NewTicker(c.o.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ag.dead:
			return
		case <-c.bg.Done():
			return
		case <-t.C:
			ag.send("h")
		}
	}
}

// read handles the agent's records until it ends; then the jobs it
// followed wait for a new agent.
func (c *Cluster) read(ag *agent, br *bufio.Reader, ready chan<- error) {
	err := c.records(ag, br, ready)
	close(ag.dead)
	select {
	case ready <- fmt.Errorf("the agent ended before it was ready: %v", err):
	default:
	}
	c.mu.Lock()
	if c.ag == ag {
		c.ag = nil
	}
	follow := len(c.jobs) > 0 && !c.closed
	c.mu.Unlock()
	if follow {
		go c.reconnect()
	}
}

// reconnect starts a new agent once the login node is back, for the jobs
// the last one followed.
func (c *Cluster) reconnect() {
	for backoff := time.Second; ; backoff = min(2*backoff, 30*time.Second) {
		if c.o.WaitUp(c.bg) != nil {
			return
		}
		c.mu.Lock()
		if c.closed || c.ag != nil || len(c.jobs) == 0 {
			c.mu.Unlock()
			return
		}
		ag, err := c.startAgent(c.bg)
		if err == nil {
			c.ag = ag
		}
		c.mu.Unlock()
		if err == nil {
			return
		}
		select {
		case <-c.bg.Done():
			return
		case <-time.After(backoff):
		}
	}
}

// records reads the agent's output: records, and output bytes that go
// straight to their job's writers.
func (c *Cluster) records(ag *agent, br *bufio.Reader, ready chan<- error) error {
	for {
		f, err := spawn.ReadRecord(br)
		if err != nil {
			return err
		}
		if len(f) == 1 && f[0] == "r" {
			ready <- nil
			continue
		}
		if len(f) < 3 || len(f[0]) != 1 {
			return fmt.Errorf("agent: bad record %q", f)
		}
		kind, tag, text := f[0], f[1], f[2]
		if kind == "F" && tag == "-" {
			ready <- errors.New(text)
			return errors.New(text)
		}
		c.mu.Lock()
		j := c.jobs[tag]
		c.mu.Unlock()
		switch kind {
		case "O", "E":
			n, err := strconv.ParseInt(text, 10, 64)
			if err != nil {
				return fmt.Errorf("agent: bad record %q", f)
			}
			c.mu.Lock()
			w, home := c.writer(tag, kind == "E")
			c.mu.Unlock()
			if w == nil {
				w = io.Discard
			}
			if _, err := io.CopyN(w, br, n); err != nil {
				return err
			}
			if home != nil {
				c.mu.Lock()
				*home += n
				c.mu.Unlock()
			}
			continue
		case "X":
			if j != nil && len(f) == 4 {
				j.deliver(record{kind: 'X', state: text, code: f[3]})
			}
			continue
		}
		if j != nil {
			j.deliver(record{kind: kind[0], text: text})
		}
	}
}

// tail keeps the last bytes written to it, for an error message.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2048 {
		t.buf = t.buf[len(t.buf)-2048:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}
