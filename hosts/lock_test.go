package hosts

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Two runs cannot hold one GPU; the second learns who holds it; the lock is
// free again once released, and other GPUs are not affected.
func TestLockGPULocal(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "locks")
	l := &Local{Supervision: fast, LockDir: dir, Name: "workstation"}
	ctx := context.Background()
	a, err := l.LockGPU(ctx, 0, "runA")
	if err != nil {
		t.Fatal(err)
	}
	if a.Key() != "index-0" {
		t.Errorf("key %q, want index-0 (no nvidia-smi here)", a.Key())
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o777 || st.Mode()&os.ModeSticky == 0 {
		t.Errorf("lock dir: %v %v, want world-writable and sticky", st.Mode(), err)
	}
	_, err = l.LockGPU(ctx, 0, "runB")
	if !errors.Is(err, ErrGPULocked) || !strings.HasPrefix(err.Error(), "workstation: GPU 0 (index-0) is locked by another gpudispatch run: run runA of ") {
		t.Fatalf("second lock: %v, want ErrGPULocked naming the host and runA", err)
	}
	other, err := l.LockGPU(ctx, 1, "runB")
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
	b, err := l.LockGPU(ctx, 0, "runB")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	b.Release()
}

// A holder that stops hearing its coordinator keeps the lock a while (for
// the jobs' wrappers to kill their jobs), then dies and frees it.
func TestLockOutlivesSilentCoordinatorBriefly(t *testing.T) {
	t.Parallel()
	// A linger of 2 s: the check right after must not race it on a loaded
	// machine (a lock attempt starts a login shell).
	sup := Supervision{Heartbeat: fast.Heartbeat, Grace: 2 * time.Second}
	l := &Local{Supervision: sup, LockDir: t.TempDir()}
	ctx := context.Background()
	a, err := l.LockGPU(ctx, 3, "runA")
	if err != nil {
		t.Fatal(err)
	}
	held := a.(*heldLock)
	close(held.stop) // the coordinator freezes: no more heartbeats
	start := time.Now()
	if _, err := l.LockGPU(ctx, 3, "runB"); !errors.Is(err, ErrGPULocked) {
		t.Fatalf("right after: %v, want still locked", err)
	}
	select {
	case <-a.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the holder never gave up")
	}
	// 3 missed heartbeats, then the linger of grace + 2 heartbeats.
	if waited, least := time.Since(start), 3*sup.Heartbeat+sup.Grace; waited < least {
		t.Errorf("the lock went after %v, before the jobs' wrappers give up (%v)", waited, least)
	}
	b, err := l.LockGPU(ctx, 3, "runB")
	if err != nil {
		t.Fatalf("after the holder died: %v", err)
	}
	b.Release()
}

func TestLockCancelled(t *testing.T) {
	t.Parallel()
	l := &Local{Supervision: fast, LockDir: t.TempDir()}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.LockGPU(ctx, 0, "runA"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// The run whose coordinator lost its holder (a dropped connection) takes its
// lingering lock over at once on its next attempt; another run still finds
// it taken.
func TestLockTakenOverBySameRun(t *testing.T) {
	t.Parallel()
	slow := Supervision{Heartbeat: fast.Heartbeat, Grace: 20 * time.Second} // a long linger
	l := &Local{Supervision: slow, LockDir: t.TempDir()}
	ctx := context.Background()
	a, err := l.LockGPU(ctx, 0, "runA")
	if err != nil {
		t.Fatal(err)
	}
	close(a.(*heldLock).stop) // the connection is gone: no more heartbeats
	time.Sleep(4 * slow.Heartbeat)
	if _, err := l.LockGPU(ctx, 0, "runB"); !errors.Is(err, ErrGPULocked) {
		t.Fatalf("another run while the old holder lingers: %v, want locked", err)
	}
	start := time.Now()
	b, err := l.LockGPU(ctx, 0, "runA")
	if err != nil {
		t.Fatalf("the same run again: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the takeover took %v: it waited for the linger", took)
	}
	select {
	case <-a.Lost():
	case <-time.After(5 * time.Second):
		t.Error("the lingering holder is still there")
	}
	if _, err := l.LockGPU(ctx, 0, "runB"); !errors.Is(err, ErrGPULocked) {
		t.Errorf("another run after the takeover: %v, want locked", err)
	}
	b.Release()
}
