package jobshell

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/codestore"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
)

// shell is a job shell (shell.sh) on a machine: it runs the jobs it is given
// one after another, so that a job costs no new session, no sshd fork and
// no bash start beyond its own login shell. A shell runs one job at a time.
type shell struct {
	// tag is in the shell's argv for as long as the shell lives: the tag of
	// the job it was started for, or a random one for a job without.
	tag string
	// prelude is the Key of what the shell set up: it runs only jobs with
	// that Prelude.
	prelude string
	// from is the sharing of the login shell's state the shell read and
	// handed on, or copied; nil when it read the profile for itself.
	from *sharing
	// used is set once the shell was given a job; tagged while it runs a
	// job (a command with a tag, which may outlive the coordinator), not
	// a look of the coordinator's own. Shells.mu guards tagged.
	used   bool
	tagged bool
	stdin  io.WriteCloser
	out    *stream // the shell's stdout
	errs   *stream // the shell's stderr
	// pending is what to send before the next job's fields: the shell's own
	// start, until its first job.
	pending []byte
	// ended is closed once the shell's process has ended and all its output
	// was handled; err is then why it ended.
	ended chan struct{}
	err   error
}

// startShell starts a job shell through spawn, for the job tagged tag,
// that is to set up the Prelude whose key is prelude: its caller sets
// what the shell is sent first (pending, a header).
func startShell(ctx context.Context, start spawn.Func, tag string, prelude string) (*shell, error) {
	if tag == "" {
		tag = "x" + newMark()[:16]
	}
	sh := &shell{tag: tag, prelude: prelude, out: newStdout(), errs: &stream{}, ended: make(chan struct{})}
	proc, err := start(ctx, spawn.Bootstrap(script, ProcessName, tag), sh.out, sh.errs)
	if err != nil {
		return nil, err
	}
	sh.stdin = &serialized{w: proc.Stdin}
	go func() {
		sh.err = proc.Wait()
		close(sh.ended)
	}()
	return sh, nil
}

// gone reports whether the shell's process has ended.
func (sh *shell) gone() bool {
	select {
	case <-sh.ended:
		return true
	default:
		return false
	}
}

// close ends the shell: it exits at once, keeping nothing on the machine,
// or once its job is gone when one runs.
func (sh *shell) close() {
	sh.stdin.Write([]byte("q"))
	sh.stdin.Close()
}

// rotateAt is how much output a shell's stream files may hold before the
// next job starts new ones: what is in them is home by then.
const rotateAt = 64 << 20

// placing says where the next job's output starts in the shell's stream
// files.
func (sh *shell) placing() placing {
	o, e := sh.out.size(), sh.errs.size()
	if o+e < rotateAt {
		return placing{outBase: o, errBase: e}
	}
	sh.out.restart()
	sh.errs.restart()
	return placing{rotate: true}
}

// Shells keeps a machine's idle job shells, and starts new ones.
type Shells struct {
	spawn spawn.Func
	sup   Supervision
	code  *codestore.Store

	mu     sync.Mutex
	idle   []*shell // the last one is the most recently used
	closed bool
	// live is every shell started and not yet gone.
	live map[*shell]bool
	// shared holds, per Prelude key, the state of the login shell the
	// machine's shells copy (share.go).
	shared map[string]*sharing
	// changed is closed, and made anew, as a shell becomes idle, set up
	// or gone: what a command that waits for a busy shell waits on
	// (await). readyAt is, per Prelude key, when a shell for it last said
	// it was set up; starting counts the shells for it whose process is
	// being started.
	changed  chan struct{}
	readyAt  map[string]time.Time
	starting map[string]int
	// waiters are, per Prelude key, the commands that wait for a busy
	// shell, first come first: put hands a shell given back to the first.
	// backAt is when a shell for it was last given back.
	waiters map[string][]waiter
	backAt  map[string]time.Time
}

// waiter is a command that waits for a busy shell (await): put hands it
// one on handed, marked for it as take would (tagged: it is a job).
type waiter struct {
	handed chan *shell
	tagged bool
}

// New returns the job shells of the machine that start runs bash on.
func New(start spawn.Func, s Supervision) *Shells {
	return &Shells{spawn: start, sup: s, code: codestore.New(start, s.KeepCode, ""), shared: map[string]*sharing{}, live: map[*shell]bool{},
		changed: make(chan struct{}), readyAt: map[string]time.Time{}, starting: map[string]int{}, waiters: map[string][]waiter{},
		backAt: map[string]time.Time{}}
}

// WarmCode starts a store shell on the machine for the first snapshot a
// job brings (see codestore.Store.Warm).
func (ss *Shells) WarmCode() { ss.code.Warm() }

// Warm starts a shell that sets up p, in the background, and keeps it idle
// for the first command with p: that command then waits for no session
// and no login profile read. A caller about to run such a command warms
// one while it does other work on the machine (a run opening a host warms
// the shell of its first look at the GPUs). ctx bounds the start.
func (ss *Shells) Warm(ctx context.Context, p executor.Prelude) {
	go func() {
		sh, err := ss.start(ctx, "", p)
		if err != nil {
			return
		}
		// Before it is idle: a job's fields follow it.
		sh.stdin.Write(sh.pending)
		sh.pending = nil
		ss.put(sh)
	}()
}

// Run runs c in an idle shell of the machine, or in a new one, and returns
// its exit status (see shell.run). An error of type *LostError means the
// shell ended before the job did: the job may run on (see Follow).
func (ss *Shells) Run(ctx context.Context, c executor.Command, stdout, stderr io.Writer) (code int, err error) {
	if err := check(c); err != nil {
		return -1, err
	}
	if c.Code != nil {
		// The snapshot's tree, once on this machine, is the workdir.
		dir, sent, err := ss.code.Ensure(ctx, c.Code, cmp.Or(c.Tree, codestore.CheckLog))
		// Said where the job's output is read: the run has no other
		// channel from a job's start.
		for _, w := range sent.Warnings {
			fmt.Fprintf(stderr, "gpudispatch: %s\n", w)
		}
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, executor.ErrHostDown) {
				// Not the host's store: the job's end, or the host's.
				return -1, err
			}
			return -1, &executor.UnfitError{Why: err.Error()}
		}
		c.Workdir, c.Code = dir, nil
	}
	if c.Deps != nil {
		dir, _, err := ss.code.Ensure(ctx, c.Deps, cmp.Or(c.Tree, codestore.CheckLog))
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, executor.ErrHostDown) {
				return -1, err
			}
			return -1, &executor.UnfitError{Why: "its dependencies' files: " + err.Error()}
		}
		c.Env, c.Deps = append(slices.Clip(c.Env), executor.DepsVar+"="+dir), nil
	}
	mark := newMark()
	began := sync.OnceFunc(func() {
		if c.Progress != nil {
			c.Progress(executor.Progress{Running: true})
		}
	})
	// A shell whose profile changed runs nothing and answers errStale: the
	// job goes to a new shell, which reads the profile as it is now.
	for tries := 0; ; tries++ {
		// A retry is for a new shell: an idle one may be as stale.
		var sh *shell
		if tries == 0 {
			var why string
			if sh, why = ss.await(ctx, c.Prelude.Key(), c.Tag != ""); why != "" {
				return -1, &executor.UnfitError{Why: why}
			}
		}
		if sh == nil {
			if sh, err = ss.start(ctx, c.Tag, c.Prelude); err != nil {
				return -1, err
			}
		}
		// A shell's first job (it may have been warmed) may find it ended
		// by its set-up.
		fresh := !sh.used
		sh.used = true
		code, reuse, err := sh.run(ctx, mark, fields(c, mark, sh.placing()), began, stdout, stderr)
		ss.mu.Lock()
		sh.tagged = false
		ss.mu.Unlock()
		if reuse {
			ss.put(sh)
		} else {
			sh.close()
		}
		if errors.Is(err, errStale) && tries < 2 {
			// What the shell read or copied is as stale for the others.
			if sh.from != nil {
				ss.forget(sh.prelude, sh.from)
			}
			continue
		}
		if fresh && ctx.Err() == nil {
			if why, ok := ss.setUpEnded(err); ok {
				return -1, &executor.UnfitError{Why: why}
			}
		}
		return code, err
	}
}

// setUpEnded says why a new job shell that ended before its first job (err
// is run's) did, when its set-up is why: the shell reads the login profile
// and sets up the Prelude before it reads a job. A set-up that outlasted
// its limit was ended by the shell's watchdog, with SIGUSR2. A shell that
// exited by itself (an exit status, not a lost connection or a signal)
// was ended by its profile, which exits, fails under set -e, or starts
// another shell in its place (exec zsh); spawn.ExitUnread and
// spawn.ExitUnsafe are the shell's own (it cannot read the coordinator, or
// make its files).
func (ss *Shells) setUpEnded(err error) (string, bool) {
	var lost *LostError
	if !errors.As(err, &lost) {
		return "", false
	}
	sig := spawn.Signal(lost.Err)
	if sig == "USR2" {
		return fmt.Sprintf("its job shell's set-up (the login profile, then the workdir, modules, conda env, venv and setup) did not finish within %s (--setup-timeout): a profile or ~/.bashrc that waits (for input, on a dead NFS mount) or a slow env; the set-up's process group was killed there (a process it started in a session of its own, with setsid or a daemon's double fork, was not, and may still run)", ss.sup.SetupLimit), true
	}
	code, ok := spawn.ExitStatus(lost.Err)
	if ss.sup.Login != LoginPerSlot || !ok || code < 0 || code == spawn.ExitUnread || code == spawn.ExitUnsafe || sig != "" {
		return "", false
	}
	return fmt.Sprintf("the login profile ended gpudispatch's job shell as it was read (exit status %d): a profile that exits, fails under set -e, or starts another shell (exec zsh) does this; do that only in an interactive shell (case $- in *i*), or give this host login: per_job", code), true
}

// errStale is a shell's answer to a job when its login profile changed
// since it read it: the job did not run.
var errStale = errors.New("the job shell's login profile changed: the job did not run")

// A command that finds every shell of its machine set up as it needs busy
// waits for one to become idle, rather than start its own, while those
// shells keep giving jobs back: at most maxWait, and no longer than
// patience without one given back. Jobs of milliseconds then take turns in
// the shells there are (a shell is a session, two bashes, two tees and a
// starter: some 25 ms of the machine's CPU, more than such a job's own),
// and long jobs get shells of their own 30 ms later. The wait counts from
// when the command began to wait or when a shell for it last said it was
// set up, whichever is later: while the first reads the login profile, a
// new one would wait for its state anyway.
const (
	patience = 30 * time.Millisecond
	maxWait  = 120 * time.Millisecond
)

// await returns an idle shell fit for a command whose Prelude has the key
// prelude, waiting for one of those running or starting to become so (see
// maxWait); nil when there is none to wait for, none became idle in time,
// or ctx ended. Commands that wait get shells in the order they came: a
// shell given back goes to the first (put). tagged says the command is a
// job (see Close). why says that the machine's first shell for prelude,
// which the command waited for, could not be set up within its limit: the
// command is as unfit.
func (ss *Shells) await(ctx context.Context, prelude string, tagged bool) (sh *shell, why string) {
	began := time.Now()
	var handed chan *shell
	var timer *time.Timer
	var first *sharing
	ss.mu.Lock()
	defer func() {
		ss.waiters[prelude] = slices.DeleteFunc(ss.waiters[prelude], func(w waiter) bool { return w.handed == handed })
		select {
		case sh = <-handed: // a shell is handed only to a command that waits: one that had none
			why = ""
		default:
		}
		ss.mu.Unlock()
		if timer != nil {
			timer.Stop()
		}
	}()
	if sh := ss.take(prelude, tagged); sh != nil {
		return sh, ""
	}
	handed = make(chan *shell, 1)
	ss.waiters[prelude] = append(ss.waiters[prelude], waiter{handed, tagged})
	for {
		busy := ss.starting[prelude] > 0
		for sh := range ss.live {
			if sh.prelude == prelude && !sh.gone() {
				busy = true
				break
			}
		}
		if first == nil {
			first = ss.shared[prelude]
		}
		if !busy || ss.closed {
			if first != nil {
				ss.mu.Unlock()
				select {
				case <-first.done:
				case <-ctx.Done():
				}
				ss.mu.Lock()
				return nil, first.why
			}
			return nil, ""
		}
		ready, changed := ss.readyAt[prelude], ss.changed
		var timeout <-chan time.Time
		if !ready.IsZero() {
			from := later(began, ready)
			left := min(maxWait-time.Since(from), patience-time.Since(later(from, ss.backAt[prelude])))
			if left <= 0 {
				return nil, ""
			}
			if timer == nil {
				timer = time.NewTimer(left)
			} else {
				timer.Reset(left)
			}
			timeout = timer.C
		}
		ss.mu.Unlock()
		select {
		case <-changed:
		case <-timeout:
		case <-ctx.Done():
		}
		ss.mu.Lock()
		if len(handed) > 0 || ctx.Err() != nil {
			return nil, ""
		}
	}
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// changedLocked wakes the commands that wait for a shell (ss.mu held).
func (ss *Shells) changedLocked() {
	close(ss.changed)
	ss.changed = make(chan struct{})
}

// take returns an idle shell fit for a command whose Prelude has the key
// prelude, or nil; tagged says the command is a job (see Close). ss.mu is
// held.
func (ss *Shells) take(prelude string, tagged bool) *shell {
	for i := len(ss.idle) - 1; i >= 0; i-- {
		sh := ss.idle[i]
		fit := !sh.gone() && !sh.out.strayed() && !sh.errs.strayed()
		if fit && sh.prelude != prelude {
			continue
		}
		ss.idle = slices.Delete(ss.idle, i, i+1)
		if fit {
			sh.tagged = tagged
			return sh
		}
		sh.close()
	}
	return nil
}

// maxIdle is how many idle shells a machine keeps: beyond it, the least
// recently used goes (jobs with other Preludes leave shells behind).
const maxIdle = 64

// put keeps sh for another job.
func (ss *Shells) put(sh *shell) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		sh.close()
		return
	}
	ss.backAt[sh.prelude] = time.Now()
	if q := ss.waiters[sh.prelude]; len(q) > 0 && !sh.gone() && !sh.out.strayed() && !sh.errs.strayed() {
		// The command that waits longest takes it.
		sh.tagged = q[0].tagged
		q[0].handed <- sh
		ss.waiters[sh.prelude] = q[1:]
		ss.changedLocked()
		return
	}
	ss.idle = append(ss.idle, sh)
	if len(ss.idle) > maxIdle {
		ss.idle[0].close()
		ss.idle = slices.Delete(ss.idle, 0, 1)
	}
	ss.changedLocked()
}

// closeWait is how long Close waits for the shells it ended to be gone: a
// shell makes and removes its files as it starts and ends, and the
// coordinator's end should not leave that under way (a test's temporary
// home, removed next, was found not empty).
const closeWait = 2 * time.Second

// Close ends the idle shells, those that run no job (a look of the
// coordinator's, or one still starting), and those that become idle from
// now on, and waits a while for them to be gone and for the content
// store's work on the machine (see codestore.Store.Close). A shell that
// runs a job is left to it: the job may outlive the coordinator.
func (ss *Shells) Close() {
	ss.mu.Lock()
	ss.closed = true
	var ended []*shell
	for sh := range ss.live {
		if !sh.tagged {
			sh.close()
			ended = append(ended, sh)
		}
	}
	ss.idle = nil
	ss.mu.Unlock()
	ss.code.Close()
	deadline := time.After(closeWait)
	for _, sh := range ended {
		select {
		case <-sh.ended:
		case <-deadline:
			return
		}
	}
}

// track keeps sh among the live shells until it is gone; tagged says it
// was started for a job.
func (ss *Shells) track(sh *shell, tagged bool) {
	ss.mu.Lock()
	sh.tagged = tagged
	ss.live[sh] = true
	ss.mu.Unlock()
	go func() {
		select {
		case <-sh.out.ready:
			ss.mu.Lock()
			ss.readyAt[sh.prelude] = time.Now()
			ss.changedLocked()
			ss.mu.Unlock()
			<-sh.ended
		case <-sh.ended:
		}
		ss.mu.Lock()
		delete(ss.live, sh)
		ss.changedLocked()
		ss.mu.Unlock()
	}()
}

// newMark returns a fresh end mark: hex, so no newline, and unguessable, so
// no job writes it by chance or on purpose.
func newMark() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// LostError says the shell's process ended before the job's end mark came:
// its connection is gone, or someone killed it. Err is how the process
// ended. The job itself may run on: OutBytes and ErrBytes are how many
// bytes of its stdout and stderr came, from where Follow takes them up.
type LostError struct {
	Err                error
	OutBytes, ErrBytes int64
}

func (e *LostError) Error() string {
	if e.Err == nil {
		return "job shell ended before its job"
	}
	return "job shell ended before its job: " + e.Err.Error()
}

func (e *LostError) Unwrap() error { return e.Err }

// run runs the job whose fields (see fields) start with mark, streaming
// its output to stdout and stderr, and returns its exit status. It calls
// began once the shell is set up (at once for a shell that ran a job
// before): from then on the job runs, unless it is cancelled first or the
// shell finds its login profile changed. reuse says
// whether the shell may run another job: the job ran to its end, nothing
// but the job's output came out, and the output was written. When ctx ends
// the job is cancelled (its group stopped) and run still waits for it to be
// gone. An error of type *LostError means the shell ended first.
func (sh *shell) run(ctx context.Context, mark string, fields []byte, began func(), stdout, stderr io.Writer) (code int, reuse bool, err error) {
	outEnd := sh.out.start(stdout, mark, true)
	errEnd := sh.errs.start(stderr, mark, false)
	// One goroutine writes to stdin: the fields, then a cancel.
	go sh.stdin.Write(append(sh.pending, fields...))
	sh.pending = nil
	var tail string
	outDone, errDone, cancelled := false, false, false
	done, ready := ctx.Done(), sh.out.ready
	for !outDone || !errDone {
		select {
		case <-ready:
			ready = nil
			began()
		case tail = <-outEnd:
			outDone = true
		case <-errEnd:
			errDone = true
		case <-done:
			if errors.Is(context.Cause(ctx), executor.ErrDetached) {
				// The job runs on; the shell exits after it.
				sh.stdin.Close()
				sh.out.abort()
				sh.errs.abort()
				return -1, false, context.Cause(ctx)
			}
			cancelled, done = true, nil
			go sh.stdin.Write([]byte("c"))
		case <-sh.ended:
			// Everything the shell wrote has been through the streams.
			select {
			case tail = <-outEnd:
				outDone = true
			default:
			}
			select {
			case <-errEnd:
				errDone = true
			default:
			}
			if !outDone || !errDone {
				lost := &LostError{Err: sh.err, OutBytes: sh.out.abort(), ErrBytes: sh.errs.abort()}
				if cancelled {
					return -1, false, fmt.Errorf("job stopped: %w (%w)", context.Cause(ctx), lost)
				}
				return -1, false, lost
			}
		}
	}
	select {
	case <-ready:
		began() // it came with the job's end
	default:
	}
	if strings.TrimSpace(tail) == "stale" {
		return -1, false, errStale
	}
	if why, ok := strings.CutPrefix(strings.TrimSpace(tail), "unfit "); ok {
		return -1, false, &executor.UnfitError{Why: strings.TrimSpace(why)}
	}
	end, err := parseEnd(tail)
	if err != nil {
		return -1, false, err
	}
	if cancelled {
		return end.code, false, fmt.Errorf("job stopped: %w", context.Cause(ctx))
	}
	if err := end.err(); err != nil {
		return end.code, false, err
	}
	if werr := cmp.Or(sh.out.writeErr(), sh.errs.writeErr()); werr != nil {
		return end.code, false, fmt.Errorf("writing the job's output: %w", werr)
	}
	return end.code, !sh.out.strayed() && !sh.errs.strayed(), nil
}

// jobEnd is what a job shell says after a job's output: its exit status,
// why gpudispatch ended it ("-" when it ended by itself) and when it ended.
type jobEnd struct {
	code int
	why  string
	at   time.Time
}

// parseEnd reads a job's end: "CODE WHY SECONDS".
func parseEnd(tail string) (jobEnd, error) {
	f := strings.Fields(tail)
	if len(f) != 3 {
		return jobEnd{}, fmt.Errorf("job shell: bad end of job %q", tail)
	}
	code, err1 := strconv.Atoi(f[0])
	secs, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		return jobEnd{}, fmt.Errorf("job shell: bad end of job %q", tail)
	}
	return jobEnd{code: code, why: f[1], at: time.Unix(secs, 0)}, nil
}

// err is why the job did not end by itself, or nil.
func (e jobEnd) err() error {
	switch e.why {
	case "-":
		return nil
	case "timeout":
		return fmt.Errorf("the job shell stopped the job: %w", executor.ErrTimeLimit)
	case "cancelled":
		return errCancelledThere
	}
	return fmt.Errorf("job shell: the job ended for an unknown reason %q", e.why)
}

// errCancelledThere is a job cancelled on its machine by another
// coordinator than the one that follows it.
var errCancelledThere = errors.New("the job was cancelled where it ran")

// serialized lets one goroutine close a stdin that another writes to: an
// SSH session's stdin may not be closed during a write (x/crypto's
// CloseWrite and Write race on the channel's state).
type serialized struct {
	mu sync.Mutex
	w  io.WriteCloser
}

func (s *serialized) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *serialized) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Close()
}
