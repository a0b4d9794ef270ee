package gpulock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// What another user of the machine, mallory, can do to a run's GPU locks
// (the run's user is the tests' own): each hostile thing below leaves every
// file of the run's user unchanged, every innocent process alive, and no
// GPU locked by two runs.

// asUser spawns lock holders as u.
func asUser(u sshtest.User) spawn.Func {
	return func(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
		return spawn.Local(ctx, u.Line(line), stdout, stderr)
	}
}

// victimFile is a file of the run's user that a hostile lock dir points at.
func victimFile(t *testing.T) (path string, check func()) {
	path = filepath.Join(t.TempDir(), "important.txt")
	const content = "precious\n"
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, func() {
		t.Helper()
		if b, err := os.ReadFile(path); err != nil || string(b) != content {
			t.Errorf("%s is now %q (%v), want it untouched", path, b, err)
		}
	}
}

// asMallory runs a shell command as u and fails t if it fails.
func asMallory(t *testing.T, u sshtest.User, script string) {
	t.Helper()
	if out, err := u.Command("/", "bash", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("as %s: %s: %v: %s", u.Name, script, err, out)
	}
}

// The reproduction: mallory makes the lock dir before anyone ran,
// world-writable and not sticky, with a link to a file of the victim's in
// it. The dir is refused with its owner and mode, and the file is untouched.
func TestHostileLockDirRefused(t *testing.T) {
	m := sshtest.NewUser(t, "gpdmallory")
	shared := sshtest.SharedDir(t)
	os.Chmod(shared, 0o777|os.ModeSticky) // as /tmp is
	target, check := victimFile(t)
	dir := filepath.Join(shared, "gpd-locks")
	me := strconv.Itoa(os.Geteuid())
	asMallory(t, m, fmt.Sprintf("mkdir -m 0777 %[1]s && ln -s %[2]s %[1]s/gpudispatch-gpu-index-0.%[3]s && ln -s %[2]s %[1]s/index-0", dir, target, me))
	err := CheckDir(context.Background(), spawn.Local, dir)
	if !errors.Is(err, ErrUnsafeLockDir) || !strings.Contains(err.Error(), dir+" is owned by gpdmallory with mode drwxrwxrwx") {
		t.Errorf("CheckDir: %v, want it refused naming the owner and mode", err)
	}
	_, err = local(t, "node", dir, linger).Lock(context.Background(), 0, "runV")
	if !errors.Is(err, ErrUnsafeLockDir) || !strings.HasPrefix(err.Error(), "node: ") {
		t.Errorf("Lock: %v, want the lock dir refused, naming the host", err)
	}
	// A run's holder, started as the run opens the host, refuses it as
	// CheckDir does.
	err = local(t, "node", dir, linger).Start(context.Background(), "runV", Prologue{})
	if !errors.Is(err, ErrUnsafeLockDir) || !strings.Contains(err.Error(), dir+" is owned by gpdmallory with mode drwxrwxrwx") {
		t.Errorf("Start: %v, want it refused naming the owner and mode", err)
	}
	check()
	// A symbolic link as the lock dir, and a safe-looking dir under one of
	// mallory's, are refused too.
	link := filepath.Join(shared, "link")
	asMallory(t, m, fmt.Sprintf("mkdir -m 1777 %[1]s/m && ln -s %[1]s/m %[2]s && mkdir -m 1777 %[1]s/m/under", shared, link))
	for _, d := range []string{link, filepath.Join(shared, "m", "under")} {
		if err := CheckDir(context.Background(), spawn.Local, d); !errors.Is(err, ErrUnsafeLockDir) {
			t.Errorf("CheckDir(%s): %v, want it refused", d, err)
		}
		if err := local(t, "node", d, linger).Start(context.Background(), "runV", Prologue{}); !errors.Is(err, ErrUnsafeLockDir) {
			t.Errorf("Start(%s): %v, want it refused", d, err)
		}
	}
	// A lock dir of root's, or of one's own, sticky, is fine, and is made
	// when missing.
	for _, d := range []string{shared, filepath.Join(shared, "new")} {
		if err := CheckDir(context.Background(), spawn.Local, d); err != nil {
			t.Errorf("CheckDir(%s): %v", d, err)
		}
	}
}

// In a safe lock dir, whatever mallory puts where the run's lock of GPU 0
// goes makes GPU 0 look busy, saying why; no file is written, no process
// killed, GPU 1 unaffected.
func TestHostileLockEntries(t *testing.T) {
	m := sshtest.NewUser(t, "gpdmallory")
	me := strconv.Itoa(os.Geteuid())
	innocent := exec.Command("sleep", "60")
	if err := innocent.Start(); err != nil {
		t.Fatal(err)
	}
	defer innocent.Process.Kill()
	tests := []struct {
		name, script, wantErr string
	}{
		{"a link to the victim's file", "ln -s %[2]s %[1]s/gpudispatch-gpu-index-0.%[3]s", "is in the place of a lock directory"},
		{"a link to a directory", "ln -s / %[1]s/gpudispatch-gpu-index-0.%[3]s", "is in the place of a lock directory"},
		{"a FIFO", "mkfifo %[1]s/gpudispatch-gpu-index-0.%[3]s", "is in the place of a lock directory"},
		{"a directory of mallory's", "mkdir -m 0777 %[1]s/gpudispatch-gpu-index-0.%[3]s", "was made by another user"},
		{"mallory holding the run's own lock", "exec 9<%[1]s/gpudispatch-gpu-index-0.%[3]s; flock 9; mkdir %[1]s/gpudispatch-held-index-0~%[4]d~runV~x~1; sleep 30 &",
			"is locked by another gpudispatch run: a process that is not a gpudispatch run"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := sshtest.SharedDir(t)
			os.Chmod(dir, 0o777|os.ModeSticky)
			target, check := victimFile(t)
			if strings.Contains(tt.name, "own lock") {
				// The run made its lock before; mallory can open it and flock it.
				os.Mkdir(filepath.Join(dir, "gpudispatch-gpu-index-0."+me), 0o755)
				hold := m.Command("/", "bash", "-c", "exec 9<"+dir+"/gpudispatch-gpu-index-0."+me+"; flock 9; mkdir "+dir+"/gpudispatch-held-index-0~"+strconv.Itoa(innocent.Process.Pid)+"~runV~x~1; echo held; sleep 30")
				out, _ := hold.StdoutPipe()
				if err := hold.Start(); err != nil {
					t.Fatal(err)
				}
				defer hold.Process.Kill()
				buf := make([]byte, 5)
				io.ReadFull(out, buf)
				// A record of the run's own that names an innocent process.
				os.Mkdir(filepath.Join(dir, "gpudispatch-held-index-0~"+strconv.Itoa(innocent.Process.Pid)+"~runV~me~1"), 0o755)
			} else {
				asMallory(t, m, fmt.Sprintf(tt.script, dir, target, me))
			}
			ls := local(t, "node", dir, linger)
			_, err := ls.Lock(context.Background(), 0, "runV")
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "node: ") {
				t.Errorf("GPU 0: %v, want it refused: %q", err, tt.wantErr)
			}
			other, err := ls.Lock(context.Background(), 1, "runV")
			if err != nil {
				t.Fatalf("GPU 1: %v", err)
			}
			other.Release()
			check()
			if !sshtest.Running(innocent.Process.Pid) {
				t.Fatal("an innocent process was killed")
			}
		})
	}
}

// twoUsers are the lock holders of this user and of mallory on one
// machine, in a lock dir like /tmp.
func twoUsers(t *testing.T) (me, them *Lockers) {
	m := sshtest.NewUser(t, "gpdmallory")
	dir := sshtest.SharedDir(t)
	os.Chmod(dir, 0o777|os.ModeSticky)
	them = New(asUser(m), "node", dir, heartbeat, linger, 0, Finding{Login: true})
	t.Cleanup(them.Close)
	return local(t, "node", dir, linger), them
}

// Two users' runs never hold one GPU, and each learns who holds it; the
// lock goes to the other once released.
func TestLocksBetweenUsers(t *testing.T) {
	me, them := twoUsers(t)
	ctx := context.Background()
	mine, err := me.Lock(ctx, 0, "runV")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := them.Lock(ctx, 0, "runM"); !errors.Is(err, executor.ErrGPULocked) || !strings.Contains(err.Error(), "run runV of ") {
		t.Fatalf("mallory on the victim's GPU: %v, want locked, naming runV", err)
	}
	theirs, err := them.Lock(ctx, 1, "runM")
	if err != nil {
		t.Fatalf("mallory on another GPU: %v", err)
	}
	if _, err := me.Lock(ctx, 1, "runV"); !errors.Is(err, executor.ErrGPULocked) || !strings.Contains(err.Error(), "run runM of ") {
		t.Fatalf("the victim on mallory's GPU: %v, want locked, naming runM", err)
	}
	mine.Release()
	if l, err := them.Lock(ctx, 0, "runM"); err != nil {
		t.Errorf("mallory after the victim let go: %v", err)
	} else {
		l.Release()
	}
	theirs.Release()
}

// Both users asking for one GPU at the same moment: never both get it.
func TestLocksBetweenUsersAtOnce(t *testing.T) {
	me, them := twoUsers(t)
	won := 0
	for round := range 10 {
		gpu := executor.GPUID(round)
		got := make(chan executor.GPULock, 2)
		for _, ls := range []*Lockers{me, them} {
			go func() {
				l, err := ls.Lock(context.Background(), gpu, "run"+strconv.Itoa(round))
				if err != nil && !errors.Is(err, executor.ErrGPULocked) {
					t.Error(err)
				}
				got <- l
			}()
		}
		a, b := <-got, <-got
		if a != nil && b != nil {
			t.Fatalf("round %d: both users hold GPU %d", round, gpu)
		}
		if a != nil || b != nil {
			won++
		}
		for _, l := range []executor.GPULock{a, b} {
			if l != nil {
				l.Release()
			}
		}
	}
	// The lower uid waits for the higher to back off: someone gets the GPU.
	if won < 5 {
		t.Errorf("the GPU went to nobody in %d of 10 rounds", 10-won)
	}
}

// The probe of `gpudispatch hosts` names who holds a lock, reads nothing
// of mallory's and never blocks on a FIFO.
func TestProbeAmongHostileEntries(t *testing.T) {
	m := sshtest.NewUser(t, "gpdmallory")
	dir := sshtest.SharedDir(t)
	os.Chmod(dir, 0o777|os.ModeSticky)
	asMallory(t, m, fmt.Sprintf("mkfifo %[1]s/gpudispatch-gpu-index-1.%[2]d && ln -s /etc/shadow %[1]s/gpudispatch-gpu-index-2.%[2]d", dir, m.UID))
	l, err := local(t, "node", dir, linger).Lock(context.Background(), 0, "runV")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	gpus := []executor.GPU{{Index: 0}, {Index: 1}, {Index: 2}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out, errs bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", "-c", ProbeScript(dir, gpus))
	cmd.Stdout, cmd.Stderr = &out, &errs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Run(); err != nil {
		t.Fatalf("probe: %v: %s", err, errs.String())
	}
	ReadProbe(out.String(), gpus)
	if !strings.HasPrefix(gpus[0].LockedBy, "run runV of ") || gpus[1].LockedBy != "" || gpus[2].LockedBy != "" {
		t.Errorf("probe: %+v, want only GPU 0 locked, by runV", gpus)
	}
}

// Fair share between users: a machine's GPUs are shared between users
// first, then between one user's runs. This user's run holds the four
// GPUs; mallory's two runs wait for them: this run keeps half (two), not a
// third (one) as a share between three runs would be.
func TestShareBetweenUsers(t *testing.T) {
	me, them := twoUsers(t)
	held := lockAll(t, me, 4, "runV")
	for _, run := range []string{"runM1", "runM2"} {
		if _, err := them.Lock(context.Background(), 0, run); !errors.Is(err, executor.ErrGPULocked) {
			t.Fatalf("mallory's %s: %v, want locked", run, err)
		}
	}
	waitForShare(t, held[0], 2)
	for _, l := range held {
		l.Release()
	}
}

// A forged demand is one user more at most: mallory's ten records of
// waiting, each naming a run of its own, take this user's run down to half
// of the machine's four GPUs, not to a share of one in eleven; and a record
// whose process is gone counts for no one.
func TestShareForgedDemand(t *testing.T) {
	m := sshtest.NewUser(t, "gpdmallory")
	dir := sshtest.SharedDir(t)
	os.Chmod(dir, 0o777|os.ModeSticky)
	held := lockAll(t, local(t, "node", dir, linger), 4, "runV")
	// A record of a process that is gone first: no share is heard for it.
	asMallory(t, m, fmt.Sprintf(`mkdir -m 755 %s/gpudispatch-want-index-0~999999~dead~evil`, dir))
	time.Sleep(2500 * time.Millisecond) // two of the holder's looks
	if n, _ := held[0].Share(); n != -1 {
		t.Fatalf("share %d for a dead run's record, want none", n)
	}
	asMallory(t, m, fmt.Sprintf(`sleep 60 >/dev/null 2>&1 & for k in 1 2 3 4 5 6 7 8 9 10; do mkdir -m 755 %s/gpudispatch-want-index-0~$!~fake$k~evil; done`, dir))
	waitForShare(t, held[0], 2)
	for _, l := range held {
		l.Release()
	}
}

// A forged turn is void: mallory's record of waiting for all four GPUs,
// older than any, has its turn, and this run takes no new job on a GPU it
// lets go of; but no holder takes that GPU for mallory, so within a few
// seconds the turn is found forged, and this run's share is whole again.
func TestForgedTurnVoid(t *testing.T) {
	m, dir, open := turnLab(t, 4)
	held := lockAll(t, open(), 4, "runV")
	asMallory(t, m, fmt.Sprintf(`sleep 60 >/dev/null 2>&1 & r=%s/gpudispatch-want-GPU-turn-0~$!~evil~evil~4; mkdir -m 755 $r && touch -d @1700000000 $r`, dir))
	waitForShare(t, held[1], 0)
	held[0].Release()
	start := time.Now()
	for deadline := start.Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if n, _ := held[1].Share(); n == -1 {
			break
		}
		if time.Now().After(deadline) {
			n, _ := held[1].Share()
			t.Fatalf("share %d 10 s after a GPU stood idle under mallory's turn, want none (the turn void)", n)
		}
	}
	if d := time.Since(start); d < 3*time.Second {
		t.Errorf("the turn was void %v after the GPU stood idle; want four seconds of looks first", d)
	}
	for _, l := range held[1:] {
		l.Release()
	}
}

// A turn kept by a forged time is void too: mallory holds both GPUs by
// locks of her own, with records that say her run does, and her record of
// waiting for both says it is older than any, so that her turn never
// passes on (a run's moves back as its job runs). Once that is found, her
// turn is over: when she then waits with none, this run keeps no GPU for
// her (share 0 were her turn still on).
func TestTurnKeptByAForgedTimeVoid(t *testing.T) {
	m, dir, open := turnLab(t, 2)
	ls := open()
	asMallory(t, m, fmt.Sprintf(`cd %s && for g in 0 1; do mkdir -m 755 gpudispatch-gpu-GPU-turn-$g.$(id -u); done
sleep 60 >/dev/null 2>&1 &
r=gpudispatch-want-GPU-turn-0~$!~evil~evil~2; mkdir -m 755 $r && touch -d @1700000000 $r
flock -x gpudispatch-gpu-GPU-turn-0.$(id -u) flock -x gpudispatch-gpu-GPU-turn-1.$(id -u) sleep 60 >/dev/null 2>&1 &
echo $! >evil.pid
for g in 0 1; do mkdir -m 755 gpudispatch-held-GPU-turn-$g~$!~evil~evil~1; done`, dir))
	lockRefused(t, ls, 0, "runV")
	ls.Waiting("runV", executor.Need{GPUs: 1}) // as its coordinator says
	time.Sleep(9 * time.Second)                // her turn, served, at looks six seconds apart
	// She lets go of her records (her locks stay: the inner flock lives
	// on), and waits with none: within two of this holder's looks it
	// would keep none for her turn (share 0), were it not void.
	asMallory(t, m, fmt.Sprintf(`cd %s && kill $(cat evil.pid) && rmdir gpudispatch-held-GPU-turn-*~evil~*`, dir))
	time.Sleep(2500 * time.Millisecond)
	for range 10 {
		if n, _, _ := ls.Share("runV"); n != -1 {
			t.Fatalf("share %d with mallory waiting with none, her turn kept by a forged time; want none said (the turn void)", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A place in the line kept by a forged time is lost: on three GPUs,
// mallory holds two by locks of her own, with records that say her run
// does, and her record of waiting says it is older than any, so that the
// GPU that whole shares leave over (one each) stays hers (a run's record
// moves back as it holds above its whole share). Once that is found,
// her records count as the newest in the line: when she lets go of one
// and waits for it, this run keeps none for her (a share of one were her
// place kept), and has the one left over itself.
func TestLineKeptByAForgedTimeLost(t *testing.T) {
	m, dir, open := turnLab(t, 3)
	ls := open()
	own, err := ls.Lock(context.Background(), 2, "runV")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Release()
	asMallory(t, m, fmt.Sprintf(`cd %s && for g in 0 1; do mkdir -m 755 gpudispatch-gpu-GPU-turn-$g.$(id -u); done
sleep 60 >/dev/null 2>&1 &
r=gpudispatch-want-GPU-turn-0~$!~evil~evil~1; mkdir -m 755 $r && touch -d @1700000000 $r
for g in 0 1; do
  flock -x gpudispatch-gpu-GPU-turn-$g.$(id -u) sleep 60 >/dev/null 2>&1 &
  echo $! >evil$g.pid
  mkdir -m 755 gpudispatch-held-GPU-turn-$g~$!~evil~evil~1
done`, dir))
	lockRefused(t, ls, 0, "runV")
	ls.Waiting("runV", executor.Need{GPUs: 1}) // as its coordinator says
	time.Sleep(9 * time.Second)                // her place kept, at looks six seconds apart
	asMallory(t, m, fmt.Sprintf(`cd %s && kill $(cat evil1.pid) && rmdir gpudispatch-held-GPU-turn-1~*~evil~*`, dir))
	time.Sleep(2500 * time.Millisecond)
	for range 10 {
		if n, why, _ := ls.Share("runV"); n != -1 {
			t.Fatalf("share %d (%s) with mallory waiting with one of three GPUs, her place in the line kept by a forged time; want none said (the one left over this run's)", n, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A run may stay first in the line for long while it holds the GPU that
// whole shares leave over, when its time is its due (the others came
// later): its record moves back all along, and it keeps its place, not
// taken for one kept by a forged time. Here mallory's run (a real one)
// holds two of three GPUs, and this user's record is a minute behind
// hers: after ten seconds she lets go of one and waits for it, and this
// run keeps it for her (a share of one).
func TestLineKeptWhileDue(t *testing.T) {
	m, dir, open := turnLab(t, 3)
	ctx := context.Background()
	a := New(asUser(m), "node", dir, heartbeat, linger, 0, seenGPUs(3))
	t.Cleanup(a.Close)
	b := open()
	held := lockAll(t, a, 2, "runM")
	own, err := b.Lock(ctx, 2, "runV")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Release()
	a.Waiting("runM", executor.Need{GPUs: 1})
	lockRefused(t, b, 0, "runV")
	b.Waiting("runV", executor.Need{GPUs: 1})
	time.Sleep(1500 * time.Millisecond) // this run's first look puts its record just after hers
	recs, _ := filepath.Glob(filepath.Join(dir, "gpudispatch-want-*~runV~*"))
	if len(recs) != 1 {
		t.Fatalf("this run's records of waiting: %v, want one", recs)
	}
	behind := time.Now().Add(time.Minute)
	if err := os.Chtimes(recs[0], behind, behind); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Second) // hers first, above her whole share of one
	held[1].Release()
	waitForShare(t, own, 1)
	held[0].Release()
}

// A forged record of holding a GPU does not keep a turn from taking it:
// mallory's record says a run of hers holds GPU 1, with no lock; B's
// holder takes both GPUs for B's turn as A lets go of them.
func TestForgedHoldDoesNotStallATurn(t *testing.T) {
	m, dir, open := turnLab(t, 2)
	a, b := open(), open()
	held := lockAll(t, a, 2, "runA")
	lockRefused(t, b, 0, "runB")
	b.Waiting("runB", executor.Need{GPUs: 2})
	a.Waiting("runA", executor.Need{GPUs: 1})
	waitForShare(t, held[0], 0)
	asMallory(t, m, fmt.Sprintf(`sleep 60 >/dev/null 2>&1 & mkdir -m 755 %s/gpudispatch-held-GPU-turn-1~$!~evil~evil~1`, dir))
	for _, l := range held {
		l.Release()
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		m, _ := filepath.Glob(filepath.Join(dir, "gpudispatch-held-GPU-turn-*~runB~*"))
		if len(m) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B's holder took %v for its turn in 5 s, want both GPUs", m)
		}
	}
}

// A forged parked part holds nothing back: mallory's records say that a
// run of hers keeps two of the four GPUs for a job over several hosts
// (parked, and held: but by no lock of hers) while another run of hers
// waits for one. Were the records believed, this run would keep one GPU
// (the two left, split between the two users); its user's locks hold
// none, so she is one user more: this run keeps its equal share, two.
func TestForgedParkHoldsNothingBack(t *testing.T) {
	m, dir, open := turnLab(t, 4)
	held := lockAll(t, open(), 4, "runV")
	asMallory(t, m, fmt.Sprintf(`cd %s || exit
sleep 60 >/dev/null 2>&1 &
for g in 0 1; do mkdir -m 755 gpudispatch-held-GPU-turn-$g~$!~evil1~evil~1; done
mkdir -m 755 gpudispatch-want-GPU-turn-0~$!~evil1~evil~2p~1700000000000000~parked
r=gpudispatch-want-GPU-turn-0~$!~evil2~evil~1; mkdir -m 755 $r && touch -d @1700000000 $r`, dir))
	waitForShare(t, held[0], 2)
	time.Sleep(2500 * time.Millisecond) // two more looks: it stays
	if n, why := held[0].Share(); n != 2 {
		t.Fatalf("share %d (%s) with mallory's forged parked part, want 2", n, why)
	}
	for _, l := range held {
		l.Release()
	}
}

// turnLab is mallory, a lock dir she shares with this user, and a way to
// open this user's lockers there on a machine of n GPUs named by UUID.
func turnLab(t *testing.T, n int) (m sshtest.User, dir string, open func() *Lockers) {
	m = sshtest.NewUser(t, "gpdmallory")
	dir = sshtest.SharedDir(t)
	os.Chmod(dir, 0o777|os.ModeSticky)
	return m, dir, func() *Lockers {
		ls := New(spawn.Local, "node", dir, heartbeat, linger, 0, seenGPUs(n))
		t.Cleanup(ls.Close)
		return ls
	}
}

// waitForShare waits, up to five seconds, for l's share to be want, and
// returns who it says waits.
func waitForShare(t *testing.T, l executor.GPULock, want int) string {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		n, waiting := l.Share()
		if n == want {
			return waiting
		}
		if time.Now().After(deadline) {
			t.Fatalf("share %d, want %d", n, want)
		}
	}
}
