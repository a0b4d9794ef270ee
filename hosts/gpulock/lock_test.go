package gpulock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"

	"al.essio.dev/pkg/shellescape"

	"github.com/gpudispatch/gpudispatch/hosts/spawn"
	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// TestMain gives local jobs and lock holders a HOME of their own.
func TestMain(m *testing.M) { os.Exit(sshtest.RunWithOwnHome(m)) }

// Heartbeats every 100 ms, and a linger of 300 ms after they stop.
const (
	heartbeat = 100 * time.Millisecond
	linger    = 300 * time.Millisecond
)

// local is this machine's lock holders, named where, locking in dir.
func local(t *testing.T, where, dir string, linger time.Duration) *Lockers {
	ls := New(spawn.Local, where, dir, heartbeat, linger, 0, Finding{Login: true})
	t.Cleanup(ls.Close)
	return ls
}

// Two runs cannot hold one GPU; the second learns who holds it; the lock is
// free again once released, and other GPUs are not affected.
func TestLockGPULocal(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "locks")
	l := local(t, "workstation", dir, linger)
	ctx := context.Background()
	a, err := l.Lock(ctx, 0, "runA")
	if err != nil {
		t.Fatal(err)
	}
	if a.Key() != "index-0" {
		t.Errorf("key %q, want index-0 (no nvidia-smi here)", a.Key())
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o777 || st.Mode()&os.ModeSticky == 0 {
		t.Errorf("lock dir: %v %v, want world-writable and sticky", st.Mode(), err)
	}
	_, err = l.Lock(ctx, 0, "runB")
	if !errors.Is(err, executor.ErrGPULocked) || !strings.HasPrefix(err.Error(), "workstation: GPU 0 (index-0) is locked by another gpudispatch run: run runA of ") {
		t.Fatalf("second lock: %v, want executor.ErrGPULocked naming the host and runA", err)
	}
	other, err := l.Lock(ctx, 1, "runB")
	if err != nil {
		t.Fatalf("another GPU: %v", err)
	}
	other.Release()
	a.Release()
	select {
	case <-a.Lost():
	default:
		t.Error("Lost not closed after Release")
	}
	b, err := l.Lock(ctx, 0, "runB")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	b.Release()
}

// A run's holder started as the run opens the machine takes its prologue
// (its records are in before Start returns), makes and checks the lock
// dir; the run's locks then go through it, with no other session, and get
// the GPUs' UUIDs the run saw meanwhile. One started and never asked exits
// when the run ends, having held nothing.
func TestLockHolderStartedFirst(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "locks")
	var sessions atomic.Int32
	start := func(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
		sessions.Add(1)
		return spawn.Local(ctx, line, stdout, stderr)
	}
	var seen []executor.GPU
	ls := New(start, "node", dir, heartbeat, linger, 0, Finding{Seen: func() ([]executor.GPU, bool) { return seen, seen != nil }})
	defer ls.Close()
	ctx := context.Background()
	var said [][]string
	first := Prologue{Script: `echo "a word for stderr" >&2; _g_send hello "$1" "$2" "$#"; run=nobody`,
		Args: []string{"two words", ""}, Each: func(f []string) { said = append(said, f) }}
	if err := ls.Start(ctx, "runA", first); err != nil {
		t.Fatal(err)
	}
	if want := [][]string{{"hello", "two words", "", "2"}}; !reflect.DeepEqual(said, want) {
		t.Errorf("the prologue said %q, want %q", said, want)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o777 || st.Mode()&os.ModeSticky == 0 {
		t.Fatalf("lock dir after Start: %v %v, want it made, world-writable and sticky", st, err)
	}
	// The run is held to its share before it looked at the GPUs: its
	// holder hears the rest only with its first lock, after the look
	// (told before, with no GPUs seen, it would name GPU 0 "index-0", as
	// a holder of another run that saw them would not).
	ls.Waiting("runA", executor.Need{GPUs: 1})
	if share, _, changed := ls.Share("runA"); share != -1 || changed != nil {
		t.Errorf("share %d before the first lock, want -1 and no channel, as with no holder", share)
	}
	ls.StopWaiting("runA")
	seen = []executor.GPU{{Index: 0, UUID: "GPU-5eed"}, {Index: 1, UUID: "GPU-beef"}}
	for g, want := range []string{"GPU-5eed", "GPU-beef"} {
		l, err := ls.Lock(ctx, executor.GPUID(g), "runA")
		if err != nil {
			t.Fatal(err)
		}
		if l.Key() != want {
			t.Errorf("GPU %d: key %q, want %q (what the run saw after the holder started)", g, l.Key(), want)
		}
		defer l.Release()
	}
	if recs, _ := filepath.Glob(filepath.Join(dir, "gpudispatch-held-*~runA~*")); len(recs) != 2 {
		t.Errorf("records of runA's locks: %q, want 2 (the prologue's variables are its own)", recs)
	}
	if err := ls.Start(ctx, "runA", first); err != nil || sessions.Load() != 1 || len(said) != 1 {
		t.Errorf("Start again: %v; %d sessions, want 1 for the start and both locks", err, sessions.Load())
	}
	// A lock dir everyone may write in, not sticky, is refused, in the
	// holder's words alone.
	open := filepath.Join(t.TempDir(), "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	err := New(start, "node", open, heartbeat, linger, 0, Finding{}).Start(ctx, "runC", first)
	if !errors.Is(err, ErrUnsafeLockDir) || strings.Contains(err.Error(), "stderr") {
		t.Errorf("an open lock dir: %v, want it refused, and nothing of the prologue's", err)
	}
	// Another run's holder, never asked: it ends with the run, holding nothing.
	if err := ls.Start(ctx, "runB", Prologue{}); err != nil {
		t.Fatal(err)
	}
	ls.mu.Lock()
	b := ls.holders["runB"]
	ls.mu.Unlock()
	ls.Close()
	select {
	case <-b.dead:
		if code, ok := spawn.ExitStatus(b.err); !ok || code != 0 {
			t.Errorf("a holder never asked ended with %v, want exit 0", b.err)
		}
	case <-time.After(5 * time.Second):
		t.Error("a holder never asked is still there after the run ended")
	}
}

// A holder that stops hearing its coordinator keeps the lock a while (for
// the jobs' wrappers to kill their jobs), then dies and frees it.
func TestLockOutlivesSilentCoordinatorBriefly(t *testing.T) {
	t.Parallel()
	// A linger of 2 s: the check right after must not race it on a loaded
	// machine (a lock attempt starts a login shell).
	const long = 2 * time.Second
	l := local(t, "local", t.TempDir(), long)
	ctx := context.Background()
	a, err := l.Lock(ctx, 3, "runA")
	if err != nil {
		t.Fatal(err)
	}
	a.(*heldLock).h.hush() // the coordinator freezes: no more heartbeats
	start := time.Now()
	lockRefused(t, l, 3, "runB")
	select {
	case <-a.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the holder never gave up")
	}
	// At least 2 missed heartbeats after the last one sent, then the linger.
	if waited, least := time.Since(start), 2*heartbeat+long; waited < least {
		t.Errorf("the lock went after %v, before the linger ended (%v)", waited, least)
	}
	b, err := l.Lock(ctx, 3, "runB")
	if err != nil {
		t.Fatalf("after the holder died: %v", err)
	}
	b.Release()
}

// A holder finds nvidia-smi where a job would: through a login shell, or,
// given the PATH a job shell's login read, on that PATH with no login
// profile read of its own. Given the GPUs its coordinator just looked at
// (all of them read whole), it asks nvidia-smi nothing: their UUIDs name
// the locks, their memory used is what others use.
func TestLockFindsNvidiaSMI(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	smi := "#!/bin/sh\necho ran >> \"$HOME/smi\"\necho '0, GPU-5eed, NVIDIA H100, 81920, 25'\n"
	if err := os.WriteFile(filepath.Join(bin, "nvidia-smi"), []byte(smi), 0o755); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	// The login profile puts the fake nvidia-smi on PATH, and says it ran.
	profile := "echo read >> ~/reads\nPATH=" + shellescape.Quote(bin) + ":$PATH\n"
	if err := os.WriteFile(filepath.Join(home, ".bash_profile"), []byte(profile), 0o644); err != nil {
		t.Fatal(err)
	}
	inHome := func(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
		return spawn.Local(ctx, "HOME="+shellescape.Quote(home)+"; "+line, stdout, stderr)
	}
	path := func() (string, bool) { return bin + ":" + os.Getenv("PATH"), true }
	seen := func(g executor.GPU) func() ([]executor.GPU, bool) {
		return func() ([]executor.GPU, bool) { return []executor.GPU{g}, true }
	}
	h100 := executor.GPU{Index: 0, UUID: "GPU-c0ffee", Name: "NVIDIA H100", MemoryTotalMB: 81920, MemoryUsedMB: 7}
	lost := executor.GPU{Index: 0, Error: "GPU requires reset"}
	tests := []struct {
		name      string
		find      Finding
		wantKey   string
		wantUsed  int
		wantReads int
		wantSMI   int
	}{
		{"its own PATH", Finding{}, "index-0", -1, 0, 0},
		{"a login shell", Finding{Login: true}, "GPU-5eed", 25, 1, 1},
		{"a login shell, no PATH known yet", Finding{Login: true, Path: func() (string, bool) { return "", false }}, "GPU-5eed", 25, 1, 1},
		{"the PATH a job shell read", Finding{Login: true, Path: path}, "GPU-5eed", 25, 0, 1},
		{"the GPUs the coordinator just saw", Finding{Login: true, Path: path, Seen: seen(h100)}, "GPU-c0ffee", 7, 0, 0},
		{"none seen lately", Finding{Login: true, Path: path, Seen: func() ([]executor.GPU, bool) { return nil, false }}, "GPU-5eed", 25, 0, 1},
		{"a GPU seen that nvidia-smi could not read", Finding{Login: true, Path: path, Seen: seen(lost)}, "GPU-5eed", 25, 0, 1},
	}
	for _, tt := range tests {
		os.Remove(filepath.Join(home, "reads"))
		os.Remove(filepath.Join(home, "smi"))
		ls := New(inHome, "node", t.TempDir(), heartbeat, linger, 0, tt.find)
		l, err := ls.Lock(context.Background(), 0, "runP")
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		reads, _ := os.ReadFile(filepath.Join(home, "reads"))
		smiRuns, _ := os.ReadFile(filepath.Join(home, "smi"))
		if l.Key() != tt.wantKey || l.UsedMB() != tt.wantUsed || strings.Count(string(reads), "\n") != tt.wantReads || strings.Count(string(smiRuns), "\n") != tt.wantSMI {
			t.Errorf("%s: key %q, %d MiB used, profile read %d times, nvidia-smi run %d times; want %q, %d, %d, %d", tt.name,
				l.Key(), l.UsedMB(), strings.Count(string(reads), "\n"), strings.Count(string(smiRuns), "\n"), tt.wantKey, tt.wantUsed, tt.wantReads, tt.wantSMI)
		}
		l.Release()
		ls.Close()
	}
}

// A job outlives its coordinator, and so does its GPU's lock: a holder
// that stopped hearing its coordinator keeps the lock of a GPU on which a
// job of its run still runs (as its job shell's record says), past the
// linger, and lets go of it once the job ends. A MIG instance's job names
// it by its UUID (CUDA_VISIBLE_DEVICES), which nvidia-smi -L gives.
func TestLockKeptWhileItsJobRuns(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	smi := "#!/bin/sh\ncase \"$*\" in\n  -L) printf 'GPU 0: NVIDIA A100 80GB PCIe (UUID: GPU-932b)\\n  MIG 3g.40gb     Device  0: (UUID: MIG-0929)\\n  MIG 3g.40gb     Device  1: (UUID: MIG-3adb)\\n' ;;\n  *) echo '0, GPU-932b, NVIDIA A100 80GB PCIe, 81920, 25' ;;\nesac\n"
	if err := os.WriteFile(filepath.Join(bin, "nvidia-smi"), []byte(smi), 0o755); err != nil {
		t.Fatal(err)
	}
	withSMI := func(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
		return spawn.Local(ctx, "PATH="+shellescape.Quote(bin)+":$PATH; "+line, stdout, stderr)
	}
	tests := []struct {
		name, run string
		// gpus is what the job's record says it runs on; kept is the
		// GPU whose lock it keeps, free one it does not.
		gpus       string
		kept, free executor.GPUID
	}{
		{name: "a GPU", run: "runK", gpus: "1,5", kept: 5, free: 6},
		{name: "a MIG instance", run: "runM", gpus: "MIG-3adb", kept: executor.MIGID(0, 1), free: executor.MIGID(0, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spool := filepath.Join(os.Getenv("HOME"), ".gpudispatch", "jobs")
			if err := os.MkdirAll(spool, 0o700); err != nil {
				t.Fatal(err)
			}
			job := exec.Command("sleep", "60")
			job.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := job.Start(); err != nil {
				t.Fatal(err)
			}
			defer job.Process.Kill()
			ended := make(chan struct{})
			go func() { job.Wait(); close(ended) }()
			rec := fmt.Sprintf("%s-1-1 sh-0 1 mark 0 0 %d boot 0 %s\nabout\n", tt.run, job.Process.Pid, tt.gpus)
			if err := os.WriteFile(filepath.Join(spool, "sh-"+tt.run+".job"), []byte(rec), 0o600); err != nil {
				t.Fatal(err)
			}
			l := New(withSMI, "local", t.TempDir(), heartbeat, linger, 0, Finding{})
			t.Cleanup(l.Close)
			ctx := context.Background()
			held := map[executor.GPUID]executor.GPULock{}
			for _, gpu := range []executor.GPUID{tt.kept, tt.free} {
				a, err := l.Lock(ctx, gpu, tt.run)
				if err != nil {
					t.Fatal(err)
				}
				held[gpu] = a
			}
			held[tt.kept].(*heldLock).h.hush() // the coordinator goes away
			time.Sleep(3 * time.Second)        // past the linger and a look
			// The GPU on which nothing of the run runs went after the linger.
			other, err := l.Lock(ctx, tt.free, "runOther")
			if err != nil {
				t.Fatalf("the lock of a GPU with no job was kept: %v", err)
			}
			other.Release()
			if _, err := l.Lock(ctx, tt.kept, "runOther"); !errors.Is(err, executor.ErrGPULocked) || !strings.Contains(err.Error(), "run "+tt.run+" of ") ||
				!strings.Contains(err.Error(), "which is gone: a job of that run runs on there with no gpudispatch") {
				t.Fatalf("another run while the job runs on: %v, want locked by %s, whose coordinator is gone", err, tt.run)
			}
			job.Process.Kill()
			<-ended
			select {
			case <-held[tt.kept].Lost():
			case <-time.After(10 * time.Second):
				t.Fatal("the lock was kept after its job ended")
			}
			b, err := l.Lock(ctx, tt.kept, "runOther")
			if err != nil {
				t.Fatalf("after the job ended: %v", err)
			}
			b.Release()
		})
	}
}

func TestLockCancelled(t *testing.T) {
	t.Parallel()
	l := local(t, "local", t.TempDir(), linger)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Lock(ctx, 0, "runA"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// holderPID is the pid of the holder that holds key's lock in dir, from
// the name of its record.
func holderPID(t *testing.T, dir, key string) int {
	t.Helper()
	recs, _ := filepath.Glob(filepath.Join(dir, "gpudispatch-held-"+key+"~*"))
	if len(recs) != 1 {
		t.Fatalf("records of %s: %q, want one", key, recs)
	}
	pid, err := strconv.Atoi(strings.Split(filepath.Base(recs[0]), "~")[1])
	if err != nil {
		t.Fatalf("record %s: no holder pid", recs[0])
	}
	return pid
}

// A run's locks on a machine, asked for at once, are held by one process,
// which exits as soon as it holds nothing, not after the linger, and
// leaves no record.
func TestLockHolderPerRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := local(t, "local", dir, 20*time.Second) // a long linger
	locks := make([]executor.GPULock, 4)
	errs := make(chan error, len(locks))
	for i := range locks {
		go func() {
			var err error
			locks[i], err = l.Lock(context.Background(), executor.GPUID(i), "runA")
			errs <- err
		}()
	}
	for range locks {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	pid := holderPID(t, dir, "index-0")
	for i, lk := range locks {
		if p := holderPID(t, dir, lk.Key()); p != pid || lk.Key() != "index-"+strconv.Itoa(i) {
			t.Errorf("GPU %d: lock %s held by %d, want index-%d held by %d", i, lk.Key(), p, i, pid)
		}
	}
	for _, lk := range locks[:3] {
		lk.Release()
	}
	if !sshtest.Running(pid) {
		t.Fatal("the holder exited while it still held GPU 3")
	}
	if recs, _ := filepath.Glob(filepath.Join(dir, "gpudispatch-held-*")); len(recs) != 1 {
		t.Errorf("records after 3 of 4 locks were let go: %q, want GPU 3's", recs)
	}
	locks[3].Release()
	sshtest.WaitGone(t, []int{pid}, 5*time.Second)
	if recs, _ := filepath.Glob(filepath.Join(dir, "gpudispatch-held-*")); len(recs) != 0 {
		t.Errorf("records left by a holder that let go of everything: %q", recs)
	}
}

// cutter wraps this machine's spawner: cut makes every process it started
// look gone to the coordinator while it runs on, as a dropped connection
// does.
type cutter struct{ cut chan struct{} }

func (c cutter) spawn(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
	p, err := spawn.Local(ctx, line, stdout, stderr)
	if err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func(wait func() error) { exited <- wait() }(p.Wait)
	p.Wait = func() error {
		select {
		case err := <-exited:
			return err
		case <-c.cut:
			return errors.New("connection lost")
		}
	}
	return p, nil
}

// The run whose coordinator lost its holder (a dropped connection) takes its
// lingering locks over at once on its next attempt; another run still finds
// them taken.
func TestLockTakenOverBySameRun(t *testing.T) {
	t.Parallel()
	const long = 20 * time.Second
	dir := t.TempDir()
	c := cutter{make(chan struct{})}
	ls := New(c.spawn, "node", dir, heartbeat, long, 0, Finding{Login: true})
	ctx := context.Background()
	var old []executor.GPULock
	for gpu := range 2 {
		a, err := ls.Lock(ctx, executor.GPUID(gpu), "runA")
		if err != nil {
			t.Fatal(err)
		}
		old = append(old, a)
	}
	pid := holderPID(t, dir, "index-0")
	close(c.cut)
	for _, a := range old {
		select {
		case <-a.Lost():
		case <-time.After(5 * time.Second):
			t.Fatal("a lock of a holder cut off is not lost")
		}
	}
	time.Sleep(4 * heartbeat) // the holder stops hearing us: it lingers
	if !sshtest.Running(pid) {
		t.Fatal("the cut-off holder did not linger")
	}
	ls2 := local(t, "node", dir, long)
	lockRefused(t, ls2, 0, "runB")
	start := time.Now()
	b, err := ls2.Lock(ctx, 0, "runA")
	if err != nil {
		t.Fatalf("the same run again: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the takeover took %v: it waited for the linger", took)
	}
	sshtest.WaitGone(t, []int{pid}, 5*time.Second)
	// The old holder's other lock went with it.
	b1, err := ls2.Lock(ctx, 1, "runA")
	if err != nil {
		t.Fatalf("GPU 1 after the takeover: %v", err)
	}
	if _, err := ls2.Lock(ctx, 0, "runB"); !errors.Is(err, executor.ErrGPULocked) {
		t.Errorf("another run after the takeover: %v, want locked", err)
	}
	b.Release()
	b1.Release()
}

// spawnInstead is a spawner of this machine that runs script whatever it is
// asked to run.
func spawnInstead(script string) spawn.Func {
	return func(ctx context.Context, _ string, stdout, stderr io.Writer) (*spawn.Proc, error) {
		return spawn.Local(ctx, script, stdout, stderr)
	}
}

// A lock asked for and given up before the answer is let go of, whatever
// the answer: the holder is told to release it, and then, holding nothing,
// to exit.
func TestLockGivenUpBeforeTheAnswer(t *testing.T) {
	t.Parallel()
	got := filepath.Join(t.TempDir(), "stdin")
	// A holder that never answers and writes down the requests it is told
	// (after its code and its start).
	mute := spawn.Prelude + `LC_ALL=C IFS= read -r -N ` + strconv.Itoa(len(lockCode)) + ` _ && _g_record || exit
while _g_record; do printf '%s\n' "${_g_f[*]}" >>` + shellescape.Quote(got) + `; [ "${_g_f[0]-}" = exit ] && exit; done`
	ls := New(spawnInstead(mute), "node", t.TempDir(), heartbeat, linger, 0, Finding{Login: true})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := ls.Lock(ctx, 2, "runA"); !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "node: locking GPU 2: ") {
		t.Fatalf("lock: %v, want the deadline, naming the host and GPU", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(got)
		// Heartbeats (empty lines) may come between.
		told := strings.Join(strings.FieldsFunc(string(b), func(r rune) bool { return r == '\n' }), "\n")
		if strings.HasSuffix(told, "lock 2\nrelease 2\nexit") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the holder was told %q, want lock 2, release 2, exit at the end", b[max(0, len(b)-200):])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A machine without flock(1) says so, for every GPU.
func TestLockWithoutFlock(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bash, filepath.Join(bin, "bash")); err != nil {
		t.Fatal(err)
	}
	noFlock := func(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
		return spawn.Local(ctx, "PATH="+shellescape.Quote(bin)+"; "+line, stdout, stderr)
	}
	ls := New(noFlock, "node", t.TempDir(), heartbeat, linger, 0, Finding{Login: true})
	for gpu := range 2 {
		if _, err := ls.Lock(context.Background(), executor.GPUID(gpu), "runA"); !errors.Is(err, executor.ErrNoLocks) || !strings.HasPrefix(err.Error(), "node: ") {
			t.Errorf("GPU %d: %v, want executor.ErrNoLocks naming the host", gpu, err)
		}
	}
}

// A run that finds a GPU locked by another run hears as soon as that lock
// is let go of (Freed), not at its next look; the lock is then its to take.
func TestLockFreedIsSaid(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := local(t, "local", dir, linger)
	ctx := context.Background()
	a, err := l.Lock(ctx, 2, "runA")
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Lock(ctx, 2, "runB")
	var le *executor.LockedError
	if !errors.As(err, &le) || le.Freed == nil {
		t.Fatalf("runB: %v, want locked by runA, watched", err)
	}
	select {
	case <-le.Freed:
		t.Fatal("said free while runA holds it")
	case <-time.After(300 * time.Millisecond):
	}
	a.Release()
	select {
	case <-le.Freed:
	case <-time.After(5 * time.Second):
		t.Fatal("the lock was let go of, and runB did not hear of it")
	}
	b, err := l.Lock(ctx, 2, "runB")
	if err != nil {
		t.Fatalf("runB after runA let go: %v", err)
	}
	b.Release()
}

// A GPU's lock has the same name whether or not nvidia-smi answers: the
// driver's UUID of the GPU at that index in bus order, read from /proc
// (here a copy of its layout); nvidia-smi's lines, then the index, only
// where the driver says nothing.
func TestLockKeyStable(t *testing.T) {
	t.Parallel()
	proc := t.TempDir()
	for bus, uuid := range map[string]string{"0000:34:00.0": "GPU-bbbb", "0000:1a:00.0": "GPU-aaaa", "0000:b1:00.0": "GPU-cccc"} {
		dir := filepath.Join(proc, "gpus", bus)
		os.MkdirAll(dir, 0o755)
		info := "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 130\nGPU UUID: \t GPU-" + strings.TrimPrefix(uuid, "GPU-") + "\nBus Location: \t " + bus + "\n"
		os.WriteFile(filepath.Join(dir, "information"), []byte(info), 0o444)
	}
	smi := "0, GPU-from-smi-0\n1, GPU-from-smi-1\n"
	tests := []struct {
		name, proc, smi string
		gpu             int
		want            string
	}{
		{"the driver's, nvidia-smi answering", proc, smi, 1, "GPU-bbbb"},
		{"the driver's, nvidia-smi silent", proc, "", 1, "GPU-bbbb"},
		{"the driver's, in bus order", proc, "", 2, "GPU-cccc"},
		{"no driver: nvidia-smi's", filepath.Join(proc, "none"), smi, 0, "GPU-from-smi-0"},
		{"no driver, no nvidia-smi: the index", filepath.Join(proc, "none"), "", 3, "index-3"},
	}
	for _, tt := range tests {
		cmd := exec.Command("bash", "-c", lockfsScript+"\nlock_key \"$1\" \"$2\"; printf %s \"$key\"", "bash", strconv.Itoa(tt.gpu), tt.smi)
		cmd.Env = append(os.Environ(), "GPUDISPATCH_NVIDIA_PROC="+tt.proc)
		out, err := cmd.Output()
		if err != nil || string(out) != tt.want {
			t.Errorf("%s: key %q, %v; want %q", tt.name, out, err, tt.want)
		}
	}
}

// Fair share: a run that holds both GPUs of a machine hears its share (one)
// once another run asked for one of them and found it locked, and hears
// that no one waits any more once that run is gone.
func TestShareSaidWhileAnotherRunWaits(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "locks")
	a := local(t, "workstation", dir, linger)
	held := lockAll(t, a, 2, "runA")
	if n, _ := held[0].Share(); n != -1 {
		t.Errorf("share %d while no one waits, want -1", n)
	}
	b := New(spawn.Local, "workstation", dir, heartbeat, linger, 0, Finding{Login: true})
	lockRefused(t, b, 0, "runB")
	if waiting := waitForShare(t, held[0], 1); !strings.HasPrefix(waiting, "run runB of ") || !strings.HasSuffix(waiting, " waits with 0") {
		t.Errorf("who waits: %q, want run runB, holding none", waiting)
	}
	b.Close() // its holder, and its record, go
	waitForShare(t, held[0], -1)
	for _, l := range held {
		l.Release()
	}
}

// A run that stops waiting (its queue holds nothing more for the machine)
// while its holder stays, holding a GPU of its own, takes its record of
// waiting away at once: the run that gave up GPUs for it hears no share
// within the holders' next looks, and is told so
// (Changed). Asking again makes the record again.
func TestStopWaiting(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "locks")
	a := local(t, "workstation", dir, linger)
	ctx := context.Background()
	held := lockAll(t, a, 3, "runA")
	b := local(t, "workstation", dir, linger)
	own, err := b.Lock(ctx, 3, "runB")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Release()
	lockRefused(t, b, 0, "runB")
	// Four GPUs, two runs of one user: two each; B holds one.
	waitForShare(t, held[0], 2)
	changed := held[0].(executor.ShareWatcher).Changed()
	b.StopWaiting("runB")
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("the share changed, and Changed was not closed")
	}
	waitForShare(t, held[0], -1)
	lockRefused(t, b, 1, "runB")
	waitForShare(t, held[0], 2)
	for _, l := range held {
		l.Release()
	}
}

// A run whose first job needs more GPUs together than its share cannot
// use that share: it waits with none, and the run that holds the GPUs
// keeps them all (no GPU stands idle for a job that cannot start). Its
// record says what it needs, renamed in place as that changes. (The
// host's GPUs are not known here, with no nvidia-smi: the first in the
// line has no turn; see TestTurnTakesGPUsAsTheyFree for one.)
func TestShareNoneCanUse(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "locks")
	a := local(t, "workstation", dir, linger)
	held := lockAll(t, a, 4, "runA")
	b := local(t, "workstation", dir, linger)
	lockRefused(t, b, 0, "runB")
	// Four GPUs, two runs of one user: two each; B holds none.
	waitForShare(t, held[0], 2)
	b.Waiting("runB", executor.Need{GPUs: 3})
	waitForShare(t, held[0], -1)
	if m, _ := filepath.Glob(filepath.Join(dir, "gpudispatch-want-*~runB~*~3")); len(m) != 1 {
		all, _ := filepath.Glob(filepath.Join(dir, "gpudispatch-want-*"))
		t.Errorf("B's record of waiting: %v, want one that says 3", all)
	}
	b.Waiting("runB", executor.Need{GPUs: 2})
	waitForShare(t, held[0], 2)
	for _, l := range held {
		l.Release()
	}
}

// seenGPUs finds n GPUs as a coordinator's look saw them (named by
// UUID): the holders know the machine's GPUs with no nvidia-smi.
func seenGPUs(n int) Finding {
	var gpus []executor.GPU
	for i := range n {
		gpus = append(gpus, executor.GPU{Index: i, UUID: fmt.Sprintf("GPU-turn-%d", i), Name: "Test GPU", MemoryTotalMB: 1000})
	}
	return Finding{Login: true, Seen: func() ([]executor.GPU, bool) { return gpus, true }}
}

// named is this user's lockers in the lock dir dir on a machine of n GPUs
// that nvidia-smi names by UUID (seenGPUs).
func named(t *testing.T, dir string, n int) *Lockers {
	ls := New(spawn.Local, "workstation", dir, heartbeat, linger, 0, seenGPUs(n))
	t.Cleanup(ls.Close)
	return ls
}

// turnOfB starts, on a machine of n GPUs, run A holding them all and
// run B waiting for a job of all n (need says what else: a part of a job
// over several hosts), first in the line, and A waiting for more after
// it; then A lets go of GPU 0. taken counts the GPUs B's holder holds;
// dir is the lock dir.
func turnOfB(t *testing.T, n int, need executor.Need) (a, b *Lockers, held []executor.GPULock, taken func() int, dir string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "locks")
	a, b = named(t, dir, n), named(t, dir, n)
	held = lockAll(t, a, n, "runA")
	lockRefused(t, b, 0, "runB")
	need.GPUs = n
	b.Waiting("runB", need)
	a.Waiting("runA", executor.Need{GPUs: 1}) // it has more jobs, after B
	waitForShare(t, held[n-1], 0)
	held[0].Release()
	taken = func() int {
		m, _ := filepath.Glob(filepath.Join(dir, "gpudispatch-held-GPU-turn-*~runB~*"))
		return len(m)
	}
	return a, b, held, taken, dir
}

// waitTaken waits, up to five seconds, for taken to say n (what).
func waitTaken(t *testing.T, taken func() int, n int, what string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); taken() != n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("B's holder took %d GPUs in 5 s, want %s", taken(), what)
		}
	}
}

// A run whose first job needs more GPUs than its share has its turn when
// it is first in the line of runs waiting: the others' share is what is
// left (none here), and its holder takes each GPU as it frees up, which
// no other run can take back; its coordinator's locks are answered at
// once.
func TestTurnTakesGPUsAsTheyFree(t *testing.T) {
	t.Parallel()
	a, b, held, taken, _ := turnOfB(t, 4, executor.Need{})
	waitTaken(t, taken, 1, "the one A let go of")
	lockRefused(t, a, 0, "runA")
	for _, l := range held[1:] {
		l.Release()
	}
	waitTaken(t, taken, 4, "all four")
	for gpu := range executor.GPUID(4) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		l, err := b.Lock(ctx, gpu, "runB")
		cancel()
		if err != nil {
			t.Fatalf("B's lock of GPU %s, taken for its turn: %v", gpu, err)
		}
		defer l.Release()
	}
}

// A turn whose job does not take up its GPUs (it cannot run on them) is
// given up ten seconds after they were all taken, and the run has no turn
// for a while: the GPUs are let go of, and the other run's share is whole.
func TestTurnGivenUpWhenItsJobDoesNotStart(t *testing.T) {
	t.Parallel()
	a, _, held, taken, _ := turnOfB(t, 2, executor.Need{})
	waitTaken(t, taken, 1, "the one A let go of")
	held[1].Release()
	waitTaken(t, taken, 2, "both")
	full := time.Now()
	for deadline := full.Add(16 * time.Second); taken() != 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("B's holder keeps %d GPUs %v after it took both, with no job on them; want them let go of after ten seconds", taken(), time.Since(full))
		}
	}
	if d := time.Since(full); d < 9*time.Second {
		t.Errorf("B's holder let go of its turn's GPUs %v after it took them all; want ten seconds", d)
	}
	l, err := a.Lock(context.Background(), 0, "runA")
	if err != nil {
		t.Fatalf("A's lock of GPU 0 once B gave up its turn: %v", err)
	}
	l.Release()
}

// A part of a job over several hosts has its turn too, and once its
// holder took all the GPUs it needs it waits for its other hosts, parked
// (its record says so): it keeps them past the ten seconds after which a
// turn whose job does not start is given up, and the other run does not
// take it for a turn kept by a forged time (six seconds); its job takes
// them when its other hosts are ready.
func TestPartParked(t *testing.T) {
	t.Parallel()
	a, b, held, taken, dir := turnOfB(t, 2, executor.Need{Part: true, Since: time.Now()})
	waitTaken(t, taken, 1, "the one A let go of")
	held[1].Release()
	waitTaken(t, taken, 2, "both")
	waitParked(t, dir)
	time.Sleep(12 * time.Second)
	if n := taken(); n != 2 || !parked(dir) {
		t.Fatalf("B's holder keeps %d GPUs 12 s after it took both (parked: %v), want both kept, parked", n, parked(dir))
	}
	// A parked part holds A back from no more than it keeps.
	if n, _, _ := a.Share("runA"); n != -1 {
		t.Fatalf("A's share %d while B's part is parked, want none said", n)
	}
	for gpu := range executor.GPUID(2) {
		l, err := b.Lock(context.Background(), gpu, "runB")
		if err != nil {
			t.Fatalf("B's lock of GPU %s, taken for its part: %v", gpu, err)
		}
		defer l.Release()
	}
	for deadline := time.Now().Add(3 * time.Second); parked(dir); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("B's record still says it is parked once its job took the GPUs")
		}
	}
}

// parked says whether run B's record of waiting in the lock dir dir
// says that its part is parked.
func parked(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "gpudispatch-want-*~runB~*~parked"))
	return len(m) == 1
}

// waitParked waits, up to three seconds, for B's part to be parked.
func waitParked(t *testing.T, dir string) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); !parked(dir); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("B's record of waiting does not say it is parked, with all its GPUs taken")
		}
	}
}

// A parked part whose run's first job for the host changes (the job over
// several hosts went elsewhere, or was cancelled) is parked no more: with
// no turn, the GPUs taken for the part are let go of.
func TestParkedPartUnparkedWhenItsJobChanges(t *testing.T) {
	t.Parallel()
	_, b, held, taken, dir := turnOfB(t, 2, executor.Need{Part: true, Since: time.Now()})
	held[1].Release()
	waitTaken(t, taken, 2, "both")
	waitParked(t, dir)
	b.Waiting("runB", executor.Need{GPUs: 1})
	waitTaken(t, taken, 0, "none: B's first job needs one GPU, which is no turn")
	if parked(dir) {
		t.Error("B's record still says it is parked")
	}
}

// A parked part gives its GPUs up at once for a part whose job began to
// wait before its own and needs them (that job may be waiting on another
// host for B's), and keeps them for one whose job began to wait after.
func TestParkedPartYields(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		since time.Duration // C's job's wait, from B's
		yield bool
	}{
		{"for an older job", -time.Minute, true},
		{"not for a newer one", time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bSince := time.Now()
			_, _, held, taken, dir := turnOfB(t, 2, executor.Need{Part: true, Since: bSince})
			held[1].Release()
			waitTaken(t, taken, 2, "both")
			waitParked(t, dir)
			c := named(t, dir, 2)
			lockRefused(t, c, 0, "runC")
			c.Waiting("runC", executor.Need{GPUs: 2, Part: true, Since: bSince.Add(tc.since)})
			cTook := func() int {
				m, _ := filepath.Glob(filepath.Join(dir, "gpudispatch-held-GPU-turn-*~runC~*"))
				return len(m)
			}
			deadline := time.Now().Add(5 * time.Second)
			for cTook() < 2 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if got := cTook() == 2 && taken() == 0; got != tc.yield {
				t.Errorf("5 s after C waits: B holds %d GPUs, C %d; want C's job to have them: %v", taken(), cTook(), tc.yield)
			}
		})
	}
}

// A run may keep its turn for long when the time is its due (the other
// run had its share while it waited): its record moves back all along as
// its job runs above its share, and its turn is not taken for one kept by
// a forged time. Here A's record is a minute behind B's: B's job holds
// both GPUs for ten seconds, and B still has its turn after it.
func TestTurnKeptWhileDue(t *testing.T) {
	t.Parallel()
	a, b, held, taken, dir := turnOfB(t, 2, executor.Need{})
	recs, _ := filepath.Glob(filepath.Join(dir, "gpudispatch-want-*~runA~*"))
	if len(recs) != 1 {
		t.Fatalf("A's records of waiting: %v, want one", recs)
	}
	// A's holder writes its record's time at its next look, with what A
	// held above its share until it let go of GPU 0: the test sets it
	// after.
	time.Sleep(1500 * time.Millisecond)
	behind := time.Now().Add(time.Minute)
	if err := os.Chtimes(recs[0], behind, behind); err != nil {
		t.Fatal(err)
	}
	held[1].Release()
	waitTaken(t, taken, 2, "both")
	var job []executor.GPULock
	for gpu := range executor.GPUID(2) {
		l, err := b.Lock(context.Background(), gpu, "runB")
		if err != nil {
			t.Fatalf("B's lock of GPU %s, taken for its turn: %v", gpu, err)
		}
		job = append(job, l)
	}
	time.Sleep(10 * time.Second) // B's job, above its share of one
	for _, l := range job {
		l.Release()
	}
	waitTaken(t, taken, 2, "both again: its turn goes on, its time due")
	// And so A's holder says: A keeps none for B (it would keep both had
	// it taken B's turn for a forged one).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		n, _, _ := a.Share("runA")
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("A's share %d once B's job ended, want none: B's turn goes on", n)
		}
	}
}

// A turn may drain for long: the run whose turn it is holds the GPUs it
// took for its job, above its whole share, without moving back in the
// line until its job has them. It keeps its place: not taken for one kept
// by a forged time (which voided the turn of a job whose GPUs took more
// than six seconds to free). Here A's last job on the four GPUs runs
// eight seconds after B's holder took the three others.
func TestTurnKeptWhileItDrains(t *testing.T) {
	t.Parallel()
	a, _, held, taken, _ := turnOfB(t, 4, executor.Need{})
	for _, l := range held[1:3] {
		l.Release()
	}
	waitTaken(t, taken, 3, "the three A let go of")
	time.Sleep(8 * time.Second)
	if n, _, _ := a.Share("runA"); n != 0 {
		t.Fatalf("A's share %d while B's turn drains, want none", n)
	}
	held[3].Release()
	waitTaken(t, taken, 4, "all four")
}

// The GPUs that whole shares leave over go round: three runs on four GPUs
// each have one, and the fourth goes to the first in the line of runs
// waiting for more. A run that holds it moves back in the line by the GPU
// time it has above its whole share (its record's time moves on), so
// that it soon hears a share of one while the others wait for theirs of
// two, and lets the fourth go as its job there ends.
func TestLeftOverGPUGoesRound(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "locks")
	ctx := context.Background()
	a := local(t, "workstation", dir, linger)
	held := lockAll(t, a, 2, "runA")
	for i, run := range []string{"runB", "runC"} {
		ls := local(t, "workstation", dir, linger)
		own, err := ls.Lock(ctx, executor.GPUID(2+i), run)
		if err != nil {
			t.Fatal(err)
		}
		defer own.Release()
		lockRefused(t, ls, 0, run)
	}
	// A, held to its share, has more jobs: it waits too, a while later.
	// Its record, new in the line, takes a time just after the oldest's
	// (B's); holding one GPU more than its whole share, it moves back a
	// second a second, and the turn of B or C, first in the line, makes
	// A's share one.
	time.Sleep(1500 * time.Millisecond)
	a.Waiting("runA", executor.Need{GPUs: 1})
	b := recordTime(dir, "runB")
	if b.IsZero() {
		t.Fatal("run B has no record of waiting")
	}
	await := func(what string, ok func(at time.Time) bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if at := recordTime(dir, "runA"); !at.IsZero() && ok(at) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("run A's record: %s (its time %v, B's %v)", what, recordTime(dir, "runA"), b)
			}
		}
	}
	await("not just after the oldest", func(at time.Time) bool { return at.Before(b.Add(900 * time.Millisecond)) })
	await("not moved back past B", func(at time.Time) bool { return at.After(b.Add(1500 * time.Millisecond)) })
	if waiting := waitForShare(t, held[0], 1); !regexp.MustCompile(`^run run[BC] of \S+ waits with 1$`).MatchString(waiting) {
		t.Errorf("who waits: %q, want run B or C (which came first is a matter of microseconds), holding one", waiting)
	}
	for _, l := range held {
		l.Release()
	}
}

// A run above its whole share moves back in the line by the GPU time it
// held there, however short: a job that ends between two of its holder's
// looks counts whole. (Looks once a second that only saw what was held at
// each counted a whole second for a job that a look caught, and nothing
// for one no look caught: a run of short jobs could keep its place.)
func TestShortHoldCharged(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "locks")
	ctx := context.Background()
	a, b := named(t, dir, 2), named(t, dir, 2)
	held := lockAll(t, a, 2, "runA")
	lockRefused(t, b, 0, "runB")
	a.Waiting("runA", executor.Need{GPUs: 1}) // after B, with one GPU above its share
	// Just after a look that moved A's record back (its first look puts it
	// just after B's, earlier): let go of GPU 1, then hold it again for
	// 0.4 s, all before the next look.
	var before time.Time
	for deadline, last := time.Now().Add(5*time.Second), recordTime(dir, "runA"); ; time.Sleep(5 * time.Millisecond) {
		if at := recordTime(dir, "runA"); !last.IsZero() && at.After(last) {
			before = at
			break
		} else {
			last = at
		}
		if time.Now().After(deadline) {
			t.Fatal("A's record of waiting did not move back in 5 s, holding one GPU above its share")
		}
	}
	held[1].Release()
	time.Sleep(200 * time.Millisecond)
	again, err := a.Lock(ctx, 1, "runA")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	again.Release()
	time.Sleep(2500 * time.Millisecond) // the looks that follow
	// About 0.4 s, and what the holder took to hear the lets-go under load
	// (a look that caught the hold charged a whole second; none, nothing).
	if moved := recordTime(dir, "runA").Sub(before); moved < 300*time.Millisecond || moved > 900*time.Millisecond {
		t.Errorf("A's record moved back by %v after it held one GPU above its share for 0.4 s between two looks, want about 0.4 s", moved)
	}
	held[0].Release()
}

// A run that waits keeps its place when its holder dies: the holder
// started for its next request is told that the run waits, as the one
// before was (the coordinator says so again only when what its first job
// needs changes). Here B, held to its share of one GPU of two with more
// jobs, waits with no lock refused (which would make the record anew).
func TestWaitingToldToANewHolder(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "locks")
	ctx := context.Background()
	a, b := named(t, dir, 2), named(t, dir, 2)
	held := lockAll(t, a, 1, "runA")
	defer held[0].Release()
	mine, err := b.Lock(ctx, 1, "runB")
	if err != nil {
		t.Fatal(err)
	}
	a.Waiting("runA", executor.Need{GPUs: 1})
	b.Waiting("runB", executor.Need{GPUs: 1})
	// holderOfB is the pid in B's record of waiting whose process lives.
	holderOfB := func() int {
		m, _ := filepath.Glob(filepath.Join(dir, "gpudispatch-want-*~runB~*"))
		for _, rec := range m {
			f := strings.Split(filepath.Base(rec), "~")
			if pid, err := strconv.Atoi(f[1]); err == nil && syscall.Kill(pid, 0) == nil {
				return pid
			}
		}
		return 0
	}
	var pid int
	for deadline := time.Now().Add(5 * time.Second); pid == 0; time.Sleep(20 * time.Millisecond) {
		if pid = holderOfB(); pid == 0 && time.Now().After(deadline) {
			t.Fatal("B's holder made no record of waiting")
		}
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-mine.Lost()
	// B's next job's lock starts another holder, and takes the GPU.
	again, err := b.Lock(ctx, 1, "runB")
	if err != nil {
		t.Fatalf("B's lock of GPU 1 after its holder died: %v", err)
	}
	defer again.Release()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if now := holderOfB(); now != 0 && now != pid {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("B's new holder made no record of waiting: B lost its place in the line")
		}
	}
}

// The look of gpudispatch hosts lists the runs that wait in the line's
// order, each with its place and what its first job needs.
func TestProbeSaysTheLine(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "locks")
	held := lockAll(t, local(t, "node", dir, linger), 1, "runA")
	defer held[0].Release()
	b, c := local(t, "node", dir, linger), local(t, "node", dir, linger)
	lockRefused(t, b, 0, "runB")
	for deadline := time.Now().Add(5 * time.Second); recordTime(dir, "runB").IsZero(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("B's refused lock made no record of waiting")
		}
	}
	time.Sleep(20 * time.Millisecond) // C's record comes after B's
	lockRefused(t, c, 0, "runC")
	c.Waiting("runC", executor.Need{GPUs: 2, Part: true, Since: time.Now()})
	// A parked part (a record of a live process: this test's) is out of
	// the line, and says what it keeps.
	recs, _ := filepath.Glob(filepath.Join(dir, "gpudispatch-want-*~runB~*"))
	if len(recs) != 1 {
		t.Fatalf("B's records of waiting: %v", recs)
	}
	host, _, _ := strings.Cut(filepath.Base(recs[0]), "~")
	if err := os.Mkdir(filepath.Join(dir, fmt.Sprintf("%s~%d~runD~dan@lab~3p~1764400000000000~parked", host, os.Getpid())), 0o755); err != nil {
		t.Fatal(err)
	}
	const parked = `run runD of dan@lab keeps 3 GPUs here for a job over several hosts, parked until its other hosts have theirs (fair share)`
	want := []string{
		`^run runB of \S+ waits for its GPUs \(fair share\), first in line$`,
		`^run runC of \S+ waits for its GPUs \(fair share\), number 2 in line, for a job of 2 GPUs together here, a part of a job over several hosts$`,
	}
	var got []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out, err := exec.Command("bash", "-c", ProbeScript(dir, []executor.GPU{{Index: 0}})).Output()
		if err != nil {
			t.Fatal(err)
		}
		got = ReadProbe(string(out), []executor.GPU{{Index: 0}})
		line := slices.DeleteFunc(slices.Clone(got), func(s string) bool { return s == parked })
		if len(got) == 3 && len(line) == 2 && regexp.MustCompile(want[0]).MatchString(line[0]) && regexp.MustCompile(want[1]).MatchString(line[1]) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the runs that wait: %q, want\n%s\nand %q", got, strings.Join(want, "\n"), parked)
		}
	}
}

// recordTime is the time of run's record of waiting in the lock dir dir
// (its place in the line): zero when there is none, or more than one.
func recordTime(dir, run string) time.Time {
	m, _ := filepath.Glob(filepath.Join(dir, "gpudispatch-want-*~"+run+"~*"))
	if len(m) != 1 {
		return time.Time{}
	}
	st, err := os.Stat(m[0])
	if err != nil {
		return time.Time{}
	}
	return st.ModTime()
}

// More runs than GPUs: a run holding one while a run with none waits for
// its turn hears a share of none (it lets the GPU go as its job ends),
// where "at least one each" kept the third run waiting for a queue to
// empty. And a run that waits with no lock hears its share too.
func TestShareOfNone(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "locks")
	ctx := context.Background()
	a := local(t, "workstation", dir, linger)
	heldA := lockAll(t, a, 1, "runA")[0]
	defer heldA.Release()
	b := local(t, "workstation", dir, linger)
	heldB, err := b.Lock(ctx, 1, "runB")
	if err != nil {
		t.Fatal(err)
	}
	defer heldB.Release()
	c := local(t, "workstation", dir, linger)
	lockRefused(t, c, 0, "runC")
	if waiting := waitForShare(t, heldA, 0); !strings.HasPrefix(waiting, "run runC of ") {
		t.Errorf("who waits: %q, want run C", waiting)
	}
	// D waits too, after C: C, with no lock, first in the line for one of
	// the two GPUs, hears its share of one while D waits with none.
	d := local(t, "workstation", dir, linger)
	lockRefused(t, d, 1, "runD")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		n, waiting, _ := c.Share("runC")
		if n == 1 && strings.HasPrefix(waiting, "run runD of ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run C, waiting with no lock, hears share %d (%q), want 1 while D waits", n, waiting)
		}
	}
}

// A run out of fair share (NoShare) leaves no record of waiting, so a run
// that holds the GPUs it wants hears no share; and one that holds GPUs
// hears none either while another run waits.
func TestNoShare(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "locks")
	for _, tc := range []struct {
		name          string
		holder, asker bool // NoShare of each
	}{
		{"the run that waits takes no part", false, true},
		{"the run that holds takes no part", true, false},
	} {
		a := New(spawn.Local, "workstation", dir, heartbeat, linger, 0, Finding{Login: true})
		a.NoShare = tc.holder
		held := lockAll(t, a, 2, "runA")
		b := New(spawn.Local, "workstation", dir, heartbeat, linger, 0, Finding{Login: true})
		b.NoShare = tc.asker
		lockRefused(t, b, 0, "runB")
		time.Sleep(2500 * time.Millisecond) // two of the holders' looks
		if n, _ := held[0].Share(); n != -1 {
			t.Errorf("%s: share %d, want none", tc.name, n)
		}
		b.Close()
		for _, l := range held {
			l.Release()
		}
		a.Close()
	}
}

// lockRefused fails t unless ls's lock of gpu for run is refused because
// another run holds it (the refusal makes run's record of waiting).
func lockRefused(t *testing.T, ls *Lockers, gpu executor.GPUID, run string) {
	t.Helper()
	if _, err := ls.Lock(context.Background(), gpu, run); !errors.Is(err, executor.ErrGPULocked) {
		t.Fatalf("%s asking for GPU %s: %v, want it locked by another run", run, gpu, err)
	}
}

// lockAll locks GPUs 0 to n-1 for run.
func lockAll(t *testing.T, ls *Lockers, n int, run string) []executor.GPULock {
	t.Helper()
	var held []executor.GPULock
	for gpu := range executor.GPUID(n) {
		l, err := ls.Lock(context.Background(), gpu, run)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	return held
}
