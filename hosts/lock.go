package hosts

import (
	"bufio"
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

// lockBootstrap reads lock.sh from stdin, like bootstrap does the wrapper.
const lockBootstrap = `exec bash -c 'IFS= read -r -d "" w && eval "$w"' gpudispatch-lock`

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
	stdin  io.WriteCloser
	stdout io.Reader
	stderr *bytes.Buffer // read only once wait has returned
	// wait returns once the process has exited; kill ends it at once.
	wait func() error
	kill func()
}

// spawnLocal starts bash here with line as its command.
func spawnLocal(line string) (*proc, error) {
	cmd := exec.Command("bash", "-c", line)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("local: start bash: %w", err)
	}
	return &proc{stdin: stdin, stdout: stdout, stderr: &errb, wait: cmd.Wait,
		kill: func() { cmd.Process.Kill() }}, nil
}

// spawn starts bash on r's host over the pool with line as its command.
func (r *Remote) spawn(ctx context.Context, line string) (*proc, error) {
	s, release, err := r.pool.session(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.name, err)
	}
	p := &proc{stderr: &bytes.Buffer{}}
	s.Stderr = p.stderr
	if p.stdin, err = s.StdinPipe(); err == nil {
		p.stdout, err = s.StdoutPipe()
	}
	if err == nil {
		if err = s.Start(line); err != nil {
			err = fmt.Errorf("start: %w: %v", ErrHostDown, err)
		}
	}
	if err != nil {
		s.Close()
		release()
		return nil, fmt.Errorf("%s: %w", r.name, err)
	}
	p.wait = func() error {
		defer release()
		defer s.Close()
		return s.Wait()
	}
	p.kill = func() { s.Close() }
	return p, nil
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
func lockGPU(ctx context.Context, spawn func(string) (*proc, error), where string, gpu int, run, dir string, s Supervision) (GPULock, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: locking GPU %d: %w", where, gpu, context.Cause(ctx))
	}
	p, err := spawn(lockBootstrap)
	if err != nil {
		return nil, err
	}
	// Long enough for the jobs' wrappers, which stopped hearing the
	// coordinator at about the same time, to kill their jobs.
	linger := s.Grace + 2*s.Heartbeat
	header := lockKeyScript + lockScript + "\x00" + strings.Join([]string{
		dir, strconv.Itoa(gpu), run, lockOwner(run),
		strconv.FormatFloat(3*s.Heartbeat.Seconds(), 'f', 3, 64),
		strconv.FormatFloat(linger.Seconds(), 'f', 3, 64),
	}, "\x00") + "\x00"
	answer := make(chan string, 1)
	go func() {
		if _, err := io.WriteString(p.stdin, header); err != nil {
			answer <- ""
			return
		}
		line, _ := bufio.NewReader(p.stdout).ReadString('\n')
		answer <- strings.TrimSuffix(line, "\n")
	}()
	var line string
	select {
	case line = <-answer:
	case <-ctx.Done():
		p.kill()
		p.wait()
		return nil, fmt.Errorf("%s: locking GPU %d: %w", where, gpu, context.Cause(ctx))
	}
	verb, rest, _ := strings.Cut(line, " ")
	if verb == "locked" {
		l := &heldLock{key: rest, p: p, lost: make(chan struct{}), stop: make(chan struct{})}
		go l.beat(s.Heartbeat)
		go func() { p.wait(); close(l.lost) }()
		return l, nil
	}
	p.stdin.Close()
	werr := p.wait()
	code, exited := exitStatus(werr)
	switch {
	case verb == "busy":
		key, owner, _ := strings.Cut(rest, " ")
		return nil, fmt.Errorf("%s: GPU %d (%s) is %w: %s", where, gpu, key, ErrGPULocked, owner)
	case exited && code == 127:
		return nil, fmt.Errorf("%s: %w", where, ErrNoFlock)
	case !exited:
		// The connection went away before the lock was taken.
		return nil, fmt.Errorf("%s: locking GPU %d: %w: %v", where, gpu, ErrHostDown, werr)
	}
	return nil, fmt.Errorf("%s: locking GPU %d in %s: exit status %d: %s", where, gpu, dir, code, strings.TrimSpace(p.stderr.String()))
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
