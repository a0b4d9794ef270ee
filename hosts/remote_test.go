package hosts

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// openLab opens the hosts of a real-sshd lab with short supervision times.
func openLab(t testing.TB, l *sshtest.Lab) *Lab {
	t.Helper()
	t.Setenv("SSH_AUTH_SOCK", "")
	inv, err := inventory.Load(l.Inventory(""))
	if err != nil {
		t.Fatal(err)
	}
	lab, err := Open(context.Background(), inv, Options{Keepalive: 200 * time.Millisecond, Grace: 300 * time.Millisecond, ConnectTimeout: 2 * time.Second, LockDir: l.Dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Close)
	for _, st := range lab.States {
		if st.Err != nil {
			t.Fatalf("%s: %v", st.Host.Name, st.Err)
		}
	}
	return lab
}

func runTrue(r Runner) error {
	code, err := r.Run(context.Background(), executor.Command{Script: "true"}, io.Discard, io.Discard)
	if err == nil && code != 0 {
		err = errors.New("exit status not 0")
	}
	return err
}

// A host whose sshd dies is down: jobs fail at once with ErrHostDown (they
// did not start) and WaitUp blocks, until sshd is back; then jobs run again
// without anyone having to reopen anything.
func TestRemoteHostDownAndBack(t *testing.T) {
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 1})
	lab := openLab(t, l)
	r := lab.Runner("node1")
	if err := runTrue(r); err != nil {
		t.Fatal(err)
	}
	l.Hosts[0].Stop()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := runTrue(r)
		if errors.Is(err, executor.ErrHostDown) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with sshd gone, Run still says %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := r.WaitUp(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitUp on a down host: %v", err)
	}
	l.Hosts[0].Start()
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := r.WaitUp(ctx); err != nil {
		t.Fatalf("WaitUp after sshd came back: %v", err)
	}
	if err := runTrue(r); err != nil {
		t.Fatalf("after the host came back: %v", err)
	}
}

// Reap finds a job by its tag on the host and returns only once it is gone,
// also when it runs in a shell started for an earlier job; a tag that is a
// prefix of a running one is not mistaken for it.
func TestRemoteReapWaitsForTaggedJob(t *testing.T) {
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 1})
	lab := openLab(t, l)
	r := lab.Runner("node1")
	if _, err := r.Run(context.Background(), executor.Command{Script: "true", Tag: "20261121T1.5Z-0-1"}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	started := filepath.Join(l.Dir, "started")
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := r.Run(ctx, executor.Command{Script: "echo > " + started + "; sleep 30", Tag: "20261121T1.5Z-1-1"}, io.Discard, io.Discard)
		done <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the job never started")
		}
	}
	short, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	if err := r.Reap(short, "20261121T1.5Z-1-1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Reap of a running job returned %v", err)
	}
	if err := r.Reap(context.Background(), "20261121T1.5Z-1"); err != nil {
		t.Fatalf("Reap of a tag that only prefixes a running one: %v", err)
	}
	if err := r.Reap(context.Background(), "bad tag"); err == nil || !strings.Contains(err.Error(), "bad tag") {
		t.Errorf("Reap with a bad tag: %v", err)
	}
	stop()
	<-done
	long, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := r.Reap(long, "20261121T1.5Z-1-1"); err != nil {
		t.Fatalf("Reap after the job ended: %v", err)
	}
}

// GPU locks over real sshd: named by each host's own GPU UUID (two hosts'
// GPU 1 are two locks), exclusive between runs, and lost with the host.
func TestRemoteLockGPU(t *testing.T) {
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 2})
	lab := openLab(t, l)
	ctx := context.Background()
	n1, n2 := lab.Runner("node1"), lab.Runner("node2")
	a, err := n1.LockGPU(ctx, 1, "runA")
	if err != nil {
		t.Fatal(err)
	}
	if a.Key() != l.Hosts[0].UUID(1) {
		t.Errorf("key %q, want the GPU's UUID %q", a.Key(), l.Hosts[0].UUID(1))
	}
	b, err := n2.LockGPU(ctx, 1, "runA")
	if err != nil {
		t.Fatalf("node2's GPU 1: %v", err)
	}
	if _, err := n1.LockGPU(ctx, 1, "runB"); !errors.Is(err, executor.ErrGPULocked) || !strings.Contains(err.Error(), "run runA") {
		t.Fatalf("runB on node1:1: %v, want locked by runA", err)
	}
	a.Release()
	c, err := n1.LockGPU(ctx, 1, "runB")
	if err != nil {
		t.Fatalf("runB after runA released: %v", err)
	}
	l.Hosts[1].Stop()
	select {
	case <-b.Lost():
	case <-time.After(10 * time.Second):
		t.Error("the lock on a host that died is not reported lost")
	}
	c.Release()
}
