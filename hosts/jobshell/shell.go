package jobshell

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
)

// shell is a job shell (shell.sh) on a machine: it runs the jobs it is given
// one after another, so that a job costs no new session, no sshd fork and
// no bash start beyond its own login shell. A shell runs one job at a time.
type shell struct {
	// tag is in the shell's argv for as long as the shell lives: the tag of
	// the job it was started for, or a random one for a job without.
	tag   string
	stdin io.WriteCloser
	out   *stream // the shell's stdout
	errs  *stream // the shell's stderr
	// pending is what to send before the next job's fields: the shell's own
	// start, until its first job.
	pending []byte
	// ended is closed once the shell's process has ended and all its output
	// was handled; err is then why it ended.
	ended chan struct{}
	err   error
}

// startShell starts a job shell through spawn, for the job tagged tag.
func startShell(ctx context.Context, start spawn.Func, tag string, s Supervision) (*shell, error) {
	if tag == "" {
		tag = "x" + newMark()[:16]
	}
	sh := &shell{tag: tag, out: &stream{}, errs: &stream{}, pending: header(s), ended: make(chan struct{})}
	p, err := start(ctx, spawn.Bootstrap(script, ProcessName, tag), sh.out, sh.errs)
	if err != nil {
		return nil, err
	}
	sh.stdin = &serialized{w: p.Stdin}
	go func() {
		sh.err = p.Wait()
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

// close ends the shell: told nothing more, it exits once its job (if any) is
// gone.
func (sh *shell) close() { sh.stdin.Close() }

// Shells keeps a machine's idle job shells, and starts new ones.
type Shells struct {
	spawn spawn.Func
	sup   Supervision

	mu     sync.Mutex
	idle   []*shell // the last one is the most recently used
	closed bool
	// jobs maps the tag of each job running, or lost with its shell and not
	// yet forgotten, to the tag of its shell.
	jobs map[string]string
}

// New returns the job shells of the machine that start runs bash on.
func New(start spawn.Func, s Supervision) *Shells {
	return &Shells{spawn: start, sup: s}
}

// Run runs c in an idle shell of the machine, or in a new one, and returns
// its exit status (see shell.run). While c runs, and after its shell was
// lost until Forget, ShellOf(c.Tag) is the tag of that shell. An error of
// type LostError means the shell ended before the job did.
func (ss *Shells) Run(ctx context.Context, c executor.Command, stdout, stderr io.Writer) (code int, err error) {
	mark := newMark()
	fields, err := fields(c, mark)
	if err != nil {
		return -1, err
	}
	// A shell whose profile changed runs nothing and answers errStale: the
	// job goes to a new shell, which reads the profile as it is now.
	for tries := 0; ; tries++ {
		sh := ss.take()
		if sh == nil || tries > 0 {
			if sh, err = startShell(ctx, ss.spawn, c.Tag, ss.sup); err != nil {
				return -1, err
			}
		}
		ss.note(c.Tag, sh.tag)
		code, reuse, err := sh.run(ctx, mark, fields, ss.sup.Heartbeat, stdout, stderr)
		if !errors.As(err, new(LostError)) {
			ss.Forget(c.Tag)
		}
		if reuse {
			ss.put(sh)
		} else {
			sh.close()
		}
		if errors.Is(err, errStale) && tries < 2 {
			continue
		}
		return code, err
	}
}

// errStale is a shell's answer to a job when its login profile changed
// since it read it: the job did not run.
var errStale = errors.New("the job shell's login profile changed: the job did not run")

// note records that the job tagged job runs in the shell tagged sh.
func (ss *Shells) note(job, sh string) {
	if job == "" {
		return
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.jobs == nil {
		ss.jobs = map[string]string{}
	}
	ss.jobs[job] = sh
}

// Forget drops what was recorded of job: once it ended, or was reaped.
func (ss *Shells) Forget(job string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.jobs, job)
}

// ShellOf is the tag of the shell that runs job, or ran it when it was
// lost; job itself when there is none.
func (ss *Shells) ShellOf(job string) string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if sh, ok := ss.jobs[job]; ok {
		return sh
	}
	return job
}

// take returns an idle shell fit for a job, or nil.
func (ss *Shells) take() *shell {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for len(ss.idle) > 0 {
		sh := ss.idle[len(ss.idle)-1]
		ss.idle = ss.idle[:len(ss.idle)-1]
		if !sh.gone() && !sh.out.strayed() && !sh.errs.strayed() {
			return sh
		}
		sh.close()
	}
	return nil
}

// put keeps sh for another job.
func (ss *Shells) put(sh *shell) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		sh.close()
		return
	}
	ss.idle = append(ss.idle, sh)
}

// Close ends the idle shells and those that become idle from now on.
func (ss *Shells) Close() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.closed = true
	for _, sh := range ss.idle {
		sh.close()
	}
	ss.idle = nil
}

// newMark returns a fresh end mark: hex, so no newline, and unguessable, so
// no job writes it by chance or on purpose.
func newMark() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// LostError says the shell's process ended before the job's end mark came:
// someone killed it, or (remote) its connection is gone. Err is how the
// process ended.
type LostError struct{ Err error }

func (e LostError) Error() string {
	if e.Err == nil {
		return "job shell ended before its job"
	}
	return "job shell ended before its job: " + e.Err.Error()
}

// run runs the job whose fields (see fields) start with mark, streaming
// its output to stdout and stderr, and returns its exit status. reuse says
// whether the shell may run another job: the job ran to its end, nothing
// but the job's output came out, and the output was written. When ctx ends
// the job is killed (the shell's stdin closes) and run still waits for it to
// be gone. An error of type LostError means the shell ended first.
func (sh *shell) run(ctx context.Context, mark string, fields []byte, hb time.Duration, stdout, stderr io.Writer) (code int, reuse bool, err error) {
	outEnd := sh.out.start(stdout, mark, true)
	errEnd := sh.errs.start(stderr, mark, false)
	// One goroutine writes to stdin: the fields, then the heartbeats.
	stop, fed := make(chan struct{}), make(chan struct{})
	go feed(sh.stdin, append(sh.pending, fields...), hb, stop, fed)
	sh.pending = nil
	defer func() {
		close(stop)
		<-fed
	}()
	var tail string
	outDone, errDone, cancelled := false, false, false
	done := ctx.Done()
	for !outDone || !errDone {
		select {
		case tail = <-outEnd:
			outDone = true
		case <-errEnd:
			errDone = true
		case <-done:
			cancelled, done = true, nil
			sh.stdin.Close()
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
				sh.out.abort()
				sh.errs.abort()
				if cancelled {
					return -1, false, fmt.Errorf("job stopped: %w", context.Cause(ctx))
				}
				return -1, false, LostError{sh.err}
			}
		}
	}
	if strings.TrimSpace(tail) == "stale" {
		return -1, false, errStale
	}
	code, perr := strconv.Atoi(strings.TrimSpace(tail))
	if perr != nil {
		return -1, false, fmt.Errorf("job shell: bad end of job %q", tail)
	}
	if cancelled {
		return code, false, fmt.Errorf("job stopped: %w", context.Cause(ctx))
	}
	werr := sh.out.writeErr()
	if werr == nil {
		werr = sh.errs.writeErr()
	}
	if werr != nil {
		return code, false, fmt.Errorf("writing the job's output: %w", werr)
	}
	return code, !sh.out.strayed() && !sh.errs.strayed(), nil
}

// feed writes first to w, then a heartbeat every interval until stop is
// closed or a write fails; it closes fed when it returns.
func feed(w io.Writer, first []byte, interval time.Duration, stop <-chan struct{}, fed chan<- struct{}) {
	defer close(fed)
	if _, err := w.Write(first); err != nil {
		return // the shell is gone; its end says why
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	beat := []byte("h\x00")
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if _, err := w.Write(beat); err != nil {
				return
			}
		}
	}
}

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
