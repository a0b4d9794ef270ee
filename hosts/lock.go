package hosts

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
)

// lockScript holds a GPU's lock on the target machine; see lock.sh. It is
// sent after lockKeyScript, which defines the lock file's name.
//
//go:embed lock.sh
var lockScript string

// lockKeyScript defines lock_key, the lock file name of a GPU; see
// lockkey.sh.
//
//go:embed lockkey.sh
var lockKeyScript string

// lockCode is what is sent to hold a lock: lock.sh after lockkey.sh.
var lockCode = lockKeyScript + lockScript

// DefaultLockDir is where GPU locks live on every machine (SPEC §6).
const DefaultLockDir = "/tmp/gpudispatch-locks"

var (
	// ErrGPULocked means another gpudispatch run holds the GPU's lock.
	ErrGPULocked = errors.New("locked by another gpudispatch run")
	// ErrNoFlock means the machine has no flock(1) (util-linux), so its GPUs
	// cannot be locked.
	ErrNoFlock = errors.New("flock(1) not found (install util-linux): other gpudispatch runs may share its GPUs")
)

// GPULock is a run's hold on one GPU of a machine: while it is held, other
// gpudispatch runs, whoever started them, put no job on that GPU.
type GPULock interface {
	// Key is the lock file's name: the GPU's UUID, or index-N.
	Key() string
	// Lost is closed once the lock is no longer held: after Release, or
	// when the process holding it on the machine is gone (connection lost).
	Lost() <-chan struct{}
	// Release lets go of the lock and returns once it is free.
	Release()
}

// proc is a bash started on a machine, reading its script from stdin.
type proc struct {
	stdin io.WriteCloser
	// wait returns once the process has exited and its output was written;
	// kill ends it at once.
	wait func() error
	kill func()
}

// spawnLocal is the spawner of this machine. The process gets a group of
// its own, which keeps a terminal's Ctrl-C away from jobs: the coordinator
// decides whether to drain or kill.
func spawnLocal(_ context.Context, line string, stdout, stderr io.Writer) (*proc, error) {
	cmd := exec.Command("bash", "-c", line)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// If a job hands its output to a process that escaped its group, do not
	// wait for that process forever once bash has exited.
	cmd.WaitDelay = time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("local: start bash: %w", err)
	}
	wait := func() error {
		if err := cmd.Wait(); !errors.Is(err, exec.ErrWaitDelay) {
			return err
		}
		return nil
	}
	return &proc{stdin: stdin, wait: wait, kill: func() { cmd.Process.Kill() }}, nil
}

// spawn is r's spawner: it starts bash on r's host over the pool.
func (r *Remote) spawn(ctx context.Context, line string, stdout, stderr io.Writer) (*proc, error) {
	s, release, err := r.pool.session(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.name, err)
	}
	s.Stdout, s.Stderr = stdout, stderr
	stdin, err := s.StdinPipe()
	if err == nil {
		if err = s.Start(line); err != nil {
			// The server did not run the command: nothing of it started.
			err = fmt.Errorf("start: %w: %v", ErrHostDown, err)
		}
	}
	if err != nil {
		s.Close()
		release()
		return nil, fmt.Errorf("%s: %w", r.name, err)
	}
	wait := func() error {
		defer release()
		defer s.Close()
		return s.Wait()
	}
	return &proc{stdin: stdin, wait: wait, kill: func() { s.Close() }}, nil
}

// exitStatus is the exit status in a local or remote wait's error.
func exitStatus(err error) (int, bool) {
	var local *exec.ExitError
	var remote *ssh.ExitError
	switch {
	case err == nil:
		return 0, true
	case errors.As(err, &local):
		return local.ExitCode(), true
	case errors.As(err, &remote):
		return remote.ExitStatus(), true
	}
	return 0, false
}

// lockOwner is what a lock file says about its holder: the run, and who
// started it where.
func lockOwner(run string) string {
	who := "someone"
	if u, err := user.Current(); err == nil {
		who = u.Username
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("run %s of %s@%s (pid %d)", run, who, host, os.Getpid())
}

// lockGPU starts lock.sh through spawn and waits for its answer. The lock
// is then held by that process, kept alive by a heartbeat, until Release.
func lockGPU(ctx context.Context, spawn spawner, where string, gpu int, run, dir string, s Supervision) (GPULock, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: locking GPU %d: %w", where, gpu, context.Cause(ctx))
	}
	out := &firstLine{got: make(chan struct{})}
	var errb bytes.Buffer // read only once the holder has exited
	p, err := spawn(ctx, bootstrap(lockCode, "gpudispatch-lock", ""), out, &errb)
	if err != nil {
		return nil, err
	}
	// Long enough for the jobs' shells, which stopped hearing the
	// coordinator at about the same time, to kill their jobs.
	linger := s.Grace + 2*s.Heartbeat
	header := lockCode + strings.Join([]string{
		dir, strconv.Itoa(gpu), run, lockOwner(run),
		strconv.FormatFloat(3*s.Heartbeat.Seconds(), 'f', 3, 64),
		strconv.FormatFloat(linger.Seconds(), 'f', 3, 64),
	}, "\x00") + "\x00"
	exited := make(chan error, 1)
	go func() { exited <- p.wait() }()
	go io.WriteString(p.stdin, header) // an error ends the holder; wait says why
	var werr error
	done := false
	select {
	case <-out.got:
	case werr = <-exited:
		done = true
	case <-ctx.Done():
		p.kill()
		<-exited
		return nil, fmt.Errorf("%s: locking GPU %d: %w", where, gpu, context.Cause(ctx))
	}
	line := out.text()
	verb, rest, _ := strings.Cut(line, " ")
	if verb == "locked" {
		l := &heldLock{key: rest, p: p, lost: make(chan struct{}), stop: make(chan struct{})}
		go l.beat(s.Heartbeat)
		go func() { <-exited; close(l.lost) }()
		return l, nil
	}
	p.stdin.Close()
	if !done {
		werr = <-exited
	}
	code, ok := exitStatus(werr)
	switch {
	case verb == "busy":
		key, owner, _ := strings.Cut(rest, " ")
		return nil, fmt.Errorf("%s: GPU %d (%s) is %w: %s", where, gpu, key, ErrGPULocked, owner)
	case ok && code == 127:
		return nil, fmt.Errorf("%s: %w", where, ErrNoFlock)
	case !ok:
		// The connection went away before the lock was taken.
		return nil, fmt.Errorf("%s: locking GPU %d: %w: %v", where, gpu, ErrHostDown, werr)
	}
	return nil, fmt.Errorf("%s: locking GPU %d in %s: exit status %d: %s", where, gpu, dir, code, strings.TrimSpace(errb.String()))
}

// heldLock is a GPULock held by a lock.sh process.
type heldLock struct {
	key  string
	p    *proc
	lost chan struct{}
	stop chan struct{}
	once sync.Once
	mu   sync.Mutex // serialises writes to the holder's stdin
}

func (l *heldLock) Key() string           { return l.key }
func (l *heldLock) Lost() <-chan struct{} { return l.lost }

// Release implements GPULock.
func (l *heldLock) Release() {
	l.once.Do(func() {
		close(l.stop)
		l.mu.Lock()
		io.WriteString(l.p.stdin, "release\n")
		l.p.stdin.Close()
		l.mu.Unlock()
	})
	<-l.lost
}

// beat tells the holder that the coordinator lives, every interval.
func (l *heldLock) beat(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-l.lost:
			return
		case <-t.C:
			l.mu.Lock()
			_, err := io.WriteString(l.p.stdin, "\n")
			l.mu.Unlock()
			if err != nil {
				return
			}
		}
	}
}

// firstLine keeps the first line written to it, without its newline, and
// drops the rest.
type firstLine struct {
	mu   sync.Mutex
	line []byte
	got  chan struct{} // closed once the line is complete
	full bool
}

// Write implements io.Writer.
func (w *firstLine) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.full {
		return len(p), nil
	}
	if i := bytes.IndexByte(p, '\n'); i >= 0 {
		w.line, w.full = append(w.line, p[:i]...), true
		close(w.got)
	} else {
		w.line = append(w.line, p...)
	}
	return len(p), nil
}

// text is what came of the first line so far.
func (w *firstLine) text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.line)
}
