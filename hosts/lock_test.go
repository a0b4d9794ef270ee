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
	l := Local{Supervision: fast, LockDir: dir}
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
	if !errors.Is(err, ErrGPULocked) || !strings.Contains(err.Error(), "run runA of ") {
		t.Fatalf("second lock: %v, want ErrGPULocked naming runA", err)
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
	l := Local{Supervision: fast, LockDir: t.TempDir()}
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
	if waited, least := time.Since(start), 3*fast.Heartbeat+fast.Grace; waited < least {
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
	l := Local{Supervision: fast, LockDir: t.TempDir()}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.LockGPU(ctx, 0, "runA"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}
