package gpulock

import (
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
)

// lockfsScript is the layout of a lock directory (names, checks, who
// holds a lock), sent before each of the scripts below; see lockfs.sh.
//
//go:embed lockfs.sh
var lockfsScript string

// lockCode starts a lock holder; see lock.sh.
//
//go:embed lock.sh
var lockScript string

var lockCode = holderCode("")

// holderCode is what a holder runs: lock.sh, and first (_g_first) the
// script of a Prologue, in a subshell.
func holderCode(first string) string {
	return spawn.Prelude + "_g_first() (\n" + cmp.Or(first, ":") + "\n)\n" + lockfsScript + lockScript
}

// Prologue is a look at the machine that a holder started by Start takes
// first, in its own bash: the machine runs no session for it. Script runs
// after spawn.Prelude, in a subshell, with Args as its arguments; each
// record it writes goes to Each, before Start returns.
type Prologue struct {
	Script string
	Args   []string
	Each   func(record []string)
}

// checkCode checks a lock dir; see check.sh.
//
//go:embed check.sh
var checkScript string

var checkCode = spawn.Prelude + lockfsScript + checkScript

// DefaultDir is where GPU locks live on every machine: /tmp, root's and
// sticky everywhere, is the one directory that every user of a host can
// lock in and none can turn against another (see lockfs.sh).
const DefaultDir = "/tmp"

// ProcessName is a lock holder's $0, by which a holder of the same run
// knows it (lock.sh), and `gpudispatch hosts` a live holder (probe.sh).
const ProcessName = "gpudispatch-lock"

// ErrUnsafeLockDir means the lock dir is one where another user of the
// machine could redirect the locks (owned by them, or writable by everyone
// without the sticky bit, or a symbolic link): the machine is not used.
var ErrUnsafeLockDir = errors.New("unsafe lock dir")

// runRE is what a run's name may hold: it goes in argv and in file names.
var runRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// coordinator is who starts the run, user@host, as a lock's record names
// it: anything but letters, digits and "._@-" made '_'.
func coordinator() string {
	who := "someone"
	if u, err := user.Current(); err == nil {
		who = u.Username
	}
	host, _ := os.Hostname()
	return strings.Map(func(r rune) rune {
		if r < 128 && (r == '.' || r == '_' || r == '@' || r == '-' || unicode.IsLetter(r) || unicode.IsDigit(r)) {
			return r
		}
		return '_'
	}, who+"@"+host)
}

// Lockers are a machine's lock holders: one lock.sh per run, started as
// the run opens the machine (Start) or with its first lock there, and told
// to exit once it holds and is asked for nothing. One holder for all of a
// machine's GPUs costs one session and one nvidia-smi per machine, not per
// GPU.
type Lockers struct {
	spawn spawn.Func
	where string // the machine, for messages
	dir   string
	// heartbeat is how often the coordinator tells a holder it lives; a
	// holder that hears nothing for three keeps its locks for linger, then
	// exits.
	heartbeat, linger time.Duration
	// probe bounds the holder's look at nvidia-smi; find says how it
	// finds nvidia-smi.
	probe time.Duration
	find  Finding

	// NoShare keeps the runs of these holders out of fair share: they say
	// no run's share, and leave no record of waiting. Set it before the
	// first Lock.
	NoShare bool

	// mu guards the holders and their requests, and orders what is written
	// to a holder's stdin.
	mu      sync.Mutex
	holders map[string]*holder // by run
	// waits is what each run that waits for the machine's GPUs said its
	// first job needs (Waiting, until StopWaiting): told again to a holder
	// started after one that died, so that the run keeps its place.
	waits map[string]executor.Need
}

// holder is a lock.sh process and what it was asked.
type holder struct {
	ls   *Lockers
	run  string
	p    *spawn.Proc
	errs bytes.Buffer // its stderr, read once it is dead
	// dead is closed once the process has ended and all its output was
	// handled; err is then why it ended.
	dead chan struct{}
	err  error
	// hushed stops the heartbeats.
	hushed   chan struct{}
	hushOnce sync.Once
	// ready is closed once the holder found the lock dir safe; first
	// takes the records of its prologue till then.
	ready chan struct{}
	first func(record []string)

	// Guarded by ls.mu:
	configured bool                           // sent its input after the lock dir (configure)
	asked      map[executor.GPUID]chan answer // GPUs asked for, and where the answer goes
	held       map[executor.GPUID]*heldLock
	freed      map[executor.GPUID]chan struct{} // GPUs found locked, closed once they look free
	retired    bool                             // told to exit, or dead: it takes no more requests
	share      int                              // the run's fair share of the host's GPUs (lock.sh), -1: none
	waiting    string                           // who waits for them, as the holder said
	changed    chan struct{}                    // closed once share or waiting change (Changed)
}

// answer is a holder's answer to "lock N"; lock is set for "locked",
// freed for "busy".
type answer struct {
	verb  string
	what  []string // after the GPU: KEY MIB (locked), KEY WHO (busy), WHY (failed)
	lock  *heldLock
	freed chan struct{}
}

// New returns the lock holders of the machine that start runs bash on,
// named where in messages, with their lock files in dir. A holder gives the
// machine's nvidia-smi probe to tell the GPUs' UUIDs (0: a minute), then
// fails with an error wrapping executor.ErrProbeTimeout. find says how the
// holder finds nvidia-smi.
func New(start spawn.Func, where, dir string, heartbeat, linger, probe time.Duration, find Finding) *Lockers {
	return &Lockers{spawn: start, where: where, dir: dir, heartbeat: heartbeat, linger: linger, probe: cmp.Or(probe, time.Minute), find: find}
}

// Finding says how a holder finds nvidia-smi: as a login shell would (a
// remote host's jobs run in one), or on its own PATH (this machine's jobs
// get the coordinator's environment).
type Finding struct {
	// Login finds nvidia-smi on the login shell's PATH.
	Login bool
	// Path, when set and it knows it, gives the login shell's PATH as a
	// job shell of the machine read it: the holder then reads no login
	// profile of its own (with Lmod in /etc/profile.d, tens of
	// milliseconds of CPU on a run's way to its first job there).
	Path func() (string, bool)
	// Seen, when set and it has them, gives the machine's GPUs as the
	// coordinator's look at them found them a moment ago: the holder then
	// asks nvidia-smi nothing as it starts (on a GPU server, tens of
	// milliseconds of CPU and a wait on the run's way to its first job).
	Seen func() ([]executor.GPU, bool)
}

// Lock takes GPU gpu for run, through the run's holder on the machine. An
// error wraps executor.ErrGPULocked when another run holds it,
// executor.ErrNoLocks when the machine has no flock(1), executor.ErrHostDown
// when the machine could not be reached.
func (ls *Lockers) Lock(ctx context.Context, gpu executor.GPUID, run string) (executor.GPULock, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: locking GPU %s: %w", ls.where, gpu, context.Cause(ctx))
	}
	got := make(chan answer, 1)
	ls.mu.Lock()
	h, err := ls.holder(ctx, run, Prologue{})
	if err == nil {
		h.configure()
		if _, dup := h.asked[gpu]; dup || h.held[gpu] != nil {
			err = fmt.Errorf("%s: GPU %s: already locked or being locked by run %s", ls.where, gpu, run)
		} else {
			h.asked[gpu] = got
			h.send("lock", strconv.Itoa(int(gpu)))
		}
	}
	ls.mu.Unlock()
	if err != nil {
		return nil, err
	}
	select {
	case a := <-got:
		return h.answered(gpu, a)
	case <-h.dead:
		return nil, h.deathErr(gpu)
	case <-ctx.Done():
		ls.mu.Lock()
		defer ls.mu.Unlock()
		if _, waiting := h.asked[gpu]; waiting {
			// Whatever the answer will be, let go of the GPU.
			delete(h.asked, gpu)
			h.send("release", strconv.Itoa(int(gpu)))
		} else if a := <-got; a.lock != nil {
			h.send("release", strconv.Itoa(int(gpu)))
		}
		h.idle()
		return nil, fmt.Errorf("%s: locking GPU %s: %w", ls.where, gpu, context.Cause(ctx))
	}
}

// Start starts run's holder on the machine, if it has none, and waits
// until it found the lock dir one that no other user can turn against
// this one (it makes it when it is missing), as CheckDir does: a run
// starts its holders as it opens its hosts, so that a host's first lock
// waits for no session, and the check costs no session of its own. The
// holder is told the rest (the GPUs seen, nvidia-smi's PATH) with the
// run's first request. A holder it starts takes the prologue first (none
// when run has a holder already).
func (ls *Lockers) Start(ctx context.Context, run string, first Prologue) error {
	ls.mu.Lock()
	h, err := ls.holder(ctx, run, first)
	ls.mu.Unlock()
	if err != nil {
		return fmt.Errorf("checking lock dir %s: %w", ls.dir, err)
	}
	select {
	case <-h.ready:
		return nil
	case <-h.dead:
		code, exited := spawn.ExitStatus(h.err)
		return dirErr(ls.dir, code, exited, h.errs.String())
	case <-ctx.Done():
		return fmt.Errorf("checking lock dir %s: %w", ls.dir, context.Cause(ctx))
	}
}

// holder returns run's holder, starting one when there is none: it is sent
// its code and the lock dir, and says "ready" once it found that safe.
// ls.mu is held, also while a holder starts (a session opens): the other
// requests of the run wait for that holder, and a machine has other
// holders only for other runs, which a coordinator does not make.
func (ls *Lockers) holder(ctx context.Context, run string, first Prologue) (*holder, error) {
	if h := ls.holders[run]; h != nil {
		return h, nil
	}
	h := &holder{ls: ls, run: run, dead: make(chan struct{}), hushed: make(chan struct{}), ready: make(chan struct{}), first: first.Each, share: -1,
		asked: map[executor.GPUID]chan answer{}, held: map[executor.GPUID]*heldLock{}, freed: map[executor.GPUID]chan struct{}{}}
	if !runRE.MatchString(run) {
		return nil, fmt.Errorf("%s: run %q: want letters, digits, '.', '_' and '-'", ls.where, run)
	}
	code := lockCode
	if first.Script != "" {
		code = holderCode(first.Script)
	}
	p, err := ls.spawn(ctx, spawn.Bootstrap(code, ProcessName, run), &spawn.RecordWriter{Each: h.answer}, &h.errs)
	if err != nil {
		return nil, err
	}
	h.p = p
	// A failed write ends the holder; its death says why.
	io.WriteString(p.Stdin, code+string(spawn.Record(append([]string{ls.dir}, first.Args...)...)))
	go func() {
		err := p.Wait()
		ls.mu.Lock()
		h.err = err
		h.detach()
		for _, l := range h.held {
			close(l.lost)
		}
		h.held = nil
		ls.mu.Unlock()
		close(h.dead)
	}()
	if ls.holders == nil {
		ls.holders = map[string]*holder{}
	}
	ls.holders[run] = h
	return h, nil
}

// configure sends the holder the rest of its input, once, and starts its
// heartbeats; a run that waits for the machine's GPUs says so again.
// ls.mu is held.
func (h *holder) configure() {
	if h.configured {
		return
	}
	h.configured = true
	io.WriteString(h.p.Stdin, string(h.ls.input(coordinator(), os.Getpid())))
	go h.beat(h.ls.heartbeat)
	if need, ok := h.ls.waits[h.run]; ok {
		h.want(need)
	}
}

// Close ends every holder's stdin. One that still holds locks keeps them for
// the linger, as when the coordinator goes away: jobs that were running
// when their shells were closed may still be dying.
func (ls *Lockers) Close() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, h := range ls.holders {
		h.detach()
		h.p.Stdin.Close()
		h.hush()
	}
}

// Waiting tells run's holder on the machine, if it has one, that the run,
// held to its fair share there, has more jobs for the machine, the first
// needing what need says: it keeps a record that the run waits (and of
// need), which gives it its turn at the GPUs that whole shares leave
// over, and at all its job needs when that is more than its share.
func (ls *Lockers) Waiting(run string, need executor.Need) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.NoShare {
		return
	}
	if ls.waits == nil {
		ls.waits = map[string]executor.Need{}
	}
	ls.waits[run] = need
	// A holder not yet told the rest hears it then (configure), after the
	// run's look at the GPUs: told now, it could name them otherwise than
	// the run's holders elsewhere.
	if h := ls.holders[run]; h != nil && h.configured {
		h.want(need)
	}
}

// want tells the holder that its run waits, its first job needing need.
// ls.mu is held.
func (h *holder) want(need executor.Need) {
	if need.Part {
		h.send("want", strconv.Itoa(max(need.GPUs, 1)), "part", strconv.FormatInt(need.Since.UnixMicro(), 10))
	} else {
		h.send("want", strconv.Itoa(max(need.GPUs, 1)))
	}
}

// Share is run's fair share of the machine's GPUs as its holder last said
// it, who waits, and a channel closed once that changes; (-1, "", nil)
// with no holder. It is said with no lock held too, to a run that waits
// there (a share of 0 keeps it off the machine till its turn).
func (ls *Lockers) Share(run string) (int, string, <-chan struct{}) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	h := ls.holders[run]
	if h == nil || !h.configured {
		return -1, "", nil
	}
	if h.changed == nil {
		h.changed = make(chan struct{})
	}
	return h.share, h.waiting, h.changed
}

// StopWaiting tells run's holder on the machine, if it has one, that the
// run waits for none of the machine's GPUs any more (its queue holds no
// job for it): the record of its waiting goes at once (else it stays as
// long as the holder), and the runs that gave up GPUs for it keep them.
func (ls *Lockers) StopWaiting(run string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	delete(ls.waits, run)
	if h := ls.holders[run]; h != nil && !ls.NoShare && h.configured {
		h.send("unwant")
		h.idle()
	}
}

// send writes a request to the holder (see lock.sh). ls.mu is held. An
// error means the holder is gone, which its death reports.
func (h *holder) send(request ...string) {
	spawn.WriteRecord(h.p.Stdin, request...)
}

// answer handles a record of the holder's stdout: a verb, a GPU, and what
// the verb says of it.
func (h *holder) answer(f []string) {
	select {
	case <-h.ready:
	default:
		// Its prologue's records, then "ready".
		switch {
		case len(f) == 1 && f[0] == "ready":
			close(h.ready)
		case h.first != nil:
			h.first(f)
		}
		return
	}
	if len(f) == 3 && f[0] == "share" {
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 0 {
			n = -1 // "-": no run waits
		}
		h.ls.mu.Lock()
		if n != h.share || f[2] != h.waiting {
			h.share, h.waiting = n, f[2]
			if h.changed != nil {
				close(h.changed)
				h.changed = nil
			}
		}
		h.ls.mu.Unlock()
		return
	}
	if len(f) < 2 {
		return
	}
	verb, rest := f[0], f[2:]
	i, err := strconv.Atoi(f[1])
	if err != nil {
		return
	}
	gpu := executor.GPUID(i)
	h.ls.mu.Lock()
	defer h.ls.mu.Unlock()
	switch verb {
	case "released":
		if l := h.held[gpu]; l != nil {
			delete(h.held, gpu)
			close(l.lost)
		}
	case "free":
		if ch := h.freed[gpu]; ch != nil {
			close(ch)
			delete(h.freed, gpu)
		}
	case "locked", "busy", "failed":
		got, ok := h.asked[gpu]
		if !ok {
			return
		}
		delete(h.asked, gpu)
		a := answer{verb: verb, what: rest}
		if verb == "busy" {
			// The holder watches the lock: "free" comes once it is let go.
			if old := h.freed[gpu]; old != nil {
				close(old)
			}
			a.freed = make(chan struct{})
			h.freed[gpu] = a.freed
		}
		if verb == "locked" {
			key, used := field(rest, 0), -1
			if n, err := strconv.Atoi(field(rest, 1)); err == nil {
				used = n
			}
			a.lock = &heldLock{h: h, gpu: gpu, key: key, usedMB: used, lost: make(chan struct{})}
			h.held[gpu] = a.lock
		}
		got <- a
	}
	h.idle()
}

// idle retires the holder once it holds, is asked for and watches
// nothing, and its run waits for no GPU of the machine (its holder keeps
// the record of that, and takes GPUs for the run's turn). ls.mu is held.
func (h *holder) idle() {
	if _, waits := h.ls.waits[h.run]; !h.retired && !waits && len(h.asked) == 0 && len(h.held) == 0 && len(h.freed) == 0 {
		h.retire()
	}
}

// retire tells the holder to exit; a new request starts another. ls.mu is
// held.
func (h *holder) retire() {
	if h.retired {
		return
	}
	h.detach()
	h.send("exit")
	h.hush()
}

// detach makes the holder take no more requests: the run's next request
// starts another. ls.mu is held.
func (h *holder) detach() {
	h.retired = true
	if h.ls.holders[h.run] == h {
		delete(h.ls.holders, h.run)
	}
}

// hush stops the heartbeats.
func (h *holder) hush() { h.hushOnce.Do(func() { close(h.hushed) }) }

// answered turns the holder's answer about gpu into a lock or an error.
func (h *holder) answered(gpu executor.GPUID, a answer) (executor.GPULock, error) {
	where := h.ls.where
	switch a.verb {
	case "locked":
		return a.lock, nil
	case "busy":
		return nil, &executor.LockedError{Where: where, GPU: gpu, Key: field(a.what, 0), Holder: field(a.what, 1), Freed: a.freed}
	}
	return nil, fmt.Errorf("%s: locking GPU %s in %s: %s", where, gpu, h.ls.dir, field(a.what, 0))
}

// field is f[i], or "" when f has no such field.
func field(f []string, i int) string {
	if i < len(f) {
		return f[i]
	}
	return ""
}

// nvidiaSMI says the holder how to find nvidia-smi (see lock.sh): "login",
// "as-is", or "path" and the login shell's PATH.
func (ls *Lockers) nvidiaSMI() (how, path string) {
	switch {
	case !ls.find.Login:
		return "as-is", ""
	case ls.find.Path != nil:
		if p, ok := ls.find.Path(); ok && !strings.ContainsRune(p, 0) {
			return "path", p
		}
	}
	return "login", ""
}

// input is what a holder is sent after its code and the lock dir (see
// lock.sh), for the coordinator who (user@host) of pid.
func (ls *Lockers) input(who string, pid int) []byte {
	how, path := ls.nvidiaSMI()
	share := "1"
	if ls.NoShare {
		share = ""
	}
	return spawn.Record(who, strconv.Itoa(pid),
		strconv.FormatFloat(3*ls.heartbeat.Seconds(), 'f', 3, 64),
		strconv.FormatFloat(ls.linger.Seconds(), 'f', 3, 64),
		strconv.FormatFloat(ls.probe.Seconds(), 'f', 3, 64),
		how, path, ls.seen(), share)
}

// seen is the GPUs as Finding.Seen gives them, in nvidia-smi's lines
// (index, uuid, name, memory.total, memory.used), or "" to ask nvidia-smi:
// when it gives none, or a GPU that nvidia-smi could not fully read.
func (ls *Lockers) seen() string {
	if ls.find.Seen == nil {
		return ""
	}
	gpus, ok := ls.find.Seen()
	if !ok {
		return ""
	}
	var b strings.Builder
	for _, g := range gpus {
		if g.Error != "" || g.UUID == "" || strings.ContainsAny(g.UUID+g.Name, ",\n\x00") {
			return ""
		}
		fmt.Fprintf(&b, "%d, %s, %s, %d, %d\n", g.Index, g.UUID, g.Name, g.MemoryTotalMB, g.MemoryUsedMB)
	}
	return b.String()
}

// deathErr says why the holder died before answering about gpu.
func (h *holder) deathErr(gpu executor.GPUID) error {
	where := h.ls.where
	code, ok := spawn.ExitStatus(h.err)
	switch {
	case ok && code == spawn.ExitNotFound:
		return fmt.Errorf("%s: flock(1) not found (install util-linux): %w", where, executor.ErrNoLocks)
	case !ok:
		// The connection went away before the lock was taken.
		return fmt.Errorf("%s: locking GPU %s: %w: %v", where, gpu, executor.ErrHostDown, h.err)
	case code == spawn.ExitUnsafe:
		return fmt.Errorf("%s: %w: %s", where, ErrUnsafeLockDir, strings.TrimPrefix(strings.TrimSpace(h.errs.String()), "gpudispatch: "))
	case code == spawn.ExitTimedOut:
		return fmt.Errorf("%s: locking GPU %s: nvidia-smi did not answer within %s (a GPU fallen off the bus? a driver in a bad state? a login profile that never finishes? --probe-timeout): %w", where, gpu, h.ls.probe, executor.ErrProbeTimeout)
	}
	return fmt.Errorf("%s: locking GPU %s in %s: exit status %d: %s", where, gpu, h.ls.dir, code, strings.TrimSpace(h.errs.String()))
}

// beat tells the holder that the coordinator lives, every interval.
func (h *holder) beat(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-h.hushed:
			return
		case <-h.dead:
			return
		case <-t.C:
			h.ls.mu.Lock()
			h.send()
			h.ls.mu.Unlock()
		}
	}
}

// heldLock is a GPULock held by a holder.
type heldLock struct {
	h      *holder
	gpu    executor.GPUID
	key    string
	usedMB int
	lost   chan struct{} // closed under ls.mu
	once   sync.Once
}

func (l *heldLock) Key() string { return l.key }
func (l *heldLock) UsedMB() int { return l.usedMB }

// Share implements executor.GPULock: the share its holder last said.
func (l *heldLock) Share() (int, string) {
	l.h.ls.mu.Lock()
	defer l.h.ls.mu.Unlock()
	return l.h.share, l.h.waiting
}

// Changed implements executor.ShareWatcher.
func (l *heldLock) Changed() <-chan struct{} {
	l.h.ls.mu.Lock()
	defer l.h.ls.mu.Unlock()
	if l.h.changed == nil {
		l.h.changed = make(chan struct{})
	}
	return l.h.changed
}
func (l *heldLock) Lost() <-chan struct{} { return l.lost }

// Release implements GPULock.
func (l *heldLock) Release() {
	l.once.Do(func() {
		l.h.ls.mu.Lock()
		defer l.h.ls.mu.Unlock()
		if l.h.held[l.gpu] == l {
			l.h.send("release", strconv.Itoa(int(l.gpu)))
		}
	})
	<-l.lost
}

// checkInput is what a check of dir is sent after its code (check.sh).
func checkInput(dir string) []byte { return spawn.Record(dir) }

// CheckDir checks, on the machine that start runs bash on, that dir is a
// lock dir no other user of it can turn against this one, and makes it when
// it is missing. An error wraps ErrUnsafeLockDir and says why and what to do.
func CheckDir(ctx context.Context, start spawn.Func, dir string) error {
	var errs bytes.Buffer
	p, err := start(ctx, spawn.Bootstrap(checkCode, "gpudispatch-lockcheck"), io.Discard, &errs)
	if err != nil {
		return err
	}
	io.WriteString(p.Stdin, checkCode+string(checkInput(dir)))
	p.Stdin.Close()
	code, exited := spawn.ExitStatus(p.Wait())
	if exited && code == 0 {
		return nil
	}
	return dirErr(dir, code, exited, errs.String())
}

// dirErr says why a check of lock dir dir failed, from the exit status of
// the process that checked it (none: the connection went away) and its
// stderr.
func dirErr(dir string, code int, exited bool, stderr string) error {
	switch {
	case !exited:
		return fmt.Errorf("checking lock dir %s: %w", dir, executor.ErrHostDown)
	case code == spawn.ExitUnsafe:
		return fmt.Errorf("%w: %s", ErrUnsafeLockDir, strings.TrimPrefix(strings.TrimSpace(stderr), "gpudispatch: "))
	}
	return fmt.Errorf("checking lock dir %s: exit status %d: %s", dir, code, strings.TrimSpace(stderr))
}
