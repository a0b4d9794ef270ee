package hosts

import (
	"bytes"
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

// spawner starts bash on a machine with line as its command, writing its
// stdout and stderr to the writers as they arrive.
type spawner func(ctx context.Context, line string, stdout, stderr io.Writer) (*proc, error)

// startShell starts a job shell through spawn, for the job tagged tag.
func startShell(ctx context.Context, spawn spawner, tag string, s Supervision) (*shell, error) {
	if tag == "" {
		tag = "x" + newMark()[:16]
	}
	sh := &shell{tag: tag, out: &stream{}, errs: &stream{}, pending: shellHeader(s), ended: make(chan struct{})}
	p, err := spawn(ctx, bootstrap(shellScript, "gpudispatch-job", tag), sh.out, sh.errs)
	if err != nil {
		return nil, err
	}
	sh.stdin = p.stdin
	go func() {
		sh.err = p.wait()
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

// shells keeps a machine's idle job shells, and starts new ones.
type shells struct {
	spawn spawner
	sup   Supervision

	mu     sync.Mutex
	idle   []*shell // the last one is the most recently used
	closed bool
	// jobs maps the tag of each job running, or lost with its shell and not
	// yet forgotten, to the tag of its shell.
	jobs map[string]string
}

// run runs c in an idle shell of the machine, or in a new one, and returns
// its exit status (see shell.run). While c runs, and after its shell was
// lost until forget, shellOf(c.Tag) is the tag of that shell.
func (ss *shells) run(ctx context.Context, c executor.Command, stdout, stderr io.Writer) (code int, err error) {
	mark := newMark()
	fields, err := fields(c, mark)
	if err != nil {
		return -1, err
	}
	sh := ss.take()
	if sh == nil {
		if sh, err = startShell(ctx, ss.spawn, c.Tag, ss.sup); err != nil {
			return -1, err
		}
	}
	ss.note(c.Tag, sh.tag)
	code, reuse, err := sh.run(ctx, mark, fields, ss.sup.Heartbeat, stdout, stderr)
	if !errors.As(err, new(errShellLost)) {
		ss.forget(c.Tag)
	}
	if reuse {
		ss.put(sh)
	} else {
		sh.close()
	}
	return code, err
}

// note records that the job tagged job runs in the shell tagged sh.
func (ss *shells) note(job, sh string) {
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

// forget drops what note recorded of job.
func (ss *shells) forget(job string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.jobs, job)
}

// shellOf is the tag of the shell that runs job, or ran it when it was
// lost; job itself when there is none.
func (ss *shells) shellOf(job string) string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if sh, ok := ss.jobs[job]; ok {
		return sh
	}
	return job
}

// take returns an idle shell fit for a job, or nil.
func (ss *shells) take() *shell {
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
func (ss *shells) put(sh *shell) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		sh.close()
		return
	}
	ss.idle = append(ss.idle, sh)
}

// close ends the idle shells and those that become idle from now on.
func (ss *shells) close() {
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

// errShellLost says the shell's process ended before the job's end mark came.
type errShellLost struct{ err error }

func (e errShellLost) Error() string {
	if e.err == nil {
		return "job shell ended before its job"
	}
	return "job shell ended before its job: " + e.err.Error()
}

// run runs the job whose fields (Command.fields) start with mark, streaming
// its output to stdout and stderr, and returns its exit status. reuse says
// whether the shell may run another job: the job ran to its end, nothing
// but the job's output came out, and the output was written. When ctx ends
// the job is killed (the shell's stdin closes) and run still waits for it to
// be gone. An error of type errShellLost means the shell ended first.
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
				return -1, false, errShellLost{sh.err}
			}
		}
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

// stream is one of a shell's output streams. It passes a job's bytes to the
// job's writer up to the job's end mark (NUL, then the mark), and notices
// bytes that come between jobs: something that left a job's process group
// still writing, which makes the shell unfit for another job.
type stream struct {
	mu         sync.Mutex
	state      int       // between, body or status
	w          io.Writer // the job's
	mark       []byte    // NUL and the job's mark
	wantStatus bool      // a status line follows the mark
	held       []byte    // the end of what came, which may begin the mark
	status     []byte
	end        chan string
	werr       error // the first error writing to w
	stray      bool  // bytes came between jobs
}

// The states of a stream.
const (
	between = iota // no job: any byte is stray
	body           // the job's bytes, up to the mark
	status         // after the mark, up to a newline
)

// start directs the stream to w until mark. The returned channel gets what
// follows the mark up to a newline when wantStatus is set (the exit status),
// or "" right after the mark.
func (s *stream) start(w io.Writer, mark string, wantStatus bool) <-chan string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state, s.w, s.mark, s.wantStatus = body, w, append([]byte{0}, mark...), wantStatus
	s.held, s.status, s.werr = s.held[:0], s.status[:0], nil
	s.end = make(chan string, 1)
	return s.end
}

// Write implements io.Writer for the shell's process.
func (s *stream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		switch s.state {
		case between:
			s.stray = true
			return n, nil
		case status:
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				s.status = append(s.status, p...)
				return n, nil
			}
			s.status = append(s.status, p[:i]...)
			s.finish(string(s.status))
			p = p[i+1:]
		default:
			p = s.scan(p)
		}
	}
	return n, nil
}

// scan passes p to the job up to the mark and returns what follows the mark
// (nothing when it is not complete yet). s.mu is held.
func (s *stream) scan(p []byte) []byte {
	data := p
	if len(s.held) > 0 {
		data = append(s.held, p...)
	}
	if i := bytes.Index(data, s.mark); i >= 0 {
		s.pass(data[:i])
		rest := data[i+len(s.mark):]
		if s.wantStatus {
			s.state = status
		} else {
			s.finish("")
		}
		return rest
	}
	k := partialMark(data, s.mark)
	s.pass(data[:len(data)-k])
	s.held = append(s.held[:0], data[len(data)-k:]...)
	return nil
}

// partialMark is the length of the longest end of data that begins mark
// (whose first byte is NUL), shorter than mark.
func partialMark(data, mark []byte) int {
	for j := max(0, len(data)-len(mark)+1); j < len(data); j++ {
		if data[j] == 0 && bytes.HasPrefix(mark, data[j:]) {
			return len(data) - j
		}
	}
	return 0
}

// finish ends the job on this stream. s.mu is held.
func (s *stream) finish(tail string) {
	s.state, s.w, s.held = between, nil, s.held[:0]
	s.end <- tail
}

// pass writes b to the job's writer, keeping the first error.
func (s *stream) pass(b []byte) {
	if len(b) == 0 || s.werr != nil {
		return
	}
	if _, err := s.w.Write(b); err != nil {
		s.werr = err
	}
}

// abort gives the job what was held back, when the shell ended before the
// mark.
func (s *stream) abort() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == body {
		s.pass(s.held)
	}
	s.state, s.w, s.held = between, nil, nil
}

// writeErr is the first error writing the job's output.
func (s *stream) writeErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.werr
}

// strayed reports whether bytes came between jobs.
func (s *stream) strayed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stray
}
