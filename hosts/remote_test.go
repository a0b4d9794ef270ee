package hosts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"

	"github.com/gpudispatch/gpudispatch/hosts/codestore"
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
	lab, states, err := openAll(context.Background(), inv, Options{Keepalive: 200 * time.Millisecond, Grace: 300 * time.Millisecond, ConnectTimeout: 2 * time.Second, LockDir: l.Dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Close)
	for _, st := range states {
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

// Reap stops a job given up for lost, found by its tag, and returns once
// its group is gone; a tag that is a prefix of a running one is not
// mistaken for it.
func TestRemoteReapStopsTheJob(t *testing.T) {
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 1})
	lab := openLab(t, l)
	r := lab.Runner("node1")
	if _, err := r.Run(context.Background(), executor.Command{Script: "true", Tag: "20261121T1.5Z-0-1"}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(l.Dir, "pid")
	done := make(chan error, 1)
	go func() {
		_, err := r.Run(context.Background(), executor.Command{Script: "echo $BASHPID > " + pidFile + "; sleep 30", Tag: "20261121T1.5Z-1-1"}, io.Discard, io.Discard)
		done <- err
	}()
	pid := waitPid(t, pidFile)
	if err := r.Reap(context.Background(), "20261121T1.5Z-1"); err != nil {
		t.Fatalf("Reap of a tag that only prefixes a running one: %v", err)
	}
	if !sshtest.Running(pid) {
		t.Fatal("Reap of another tag stopped the job")
	}
	if err := r.Reap(context.Background(), "bad tag"); err == nil || !strings.Contains(err.Error(), "bad tag") {
		t.Errorf("Reap with a bad tag: %v", err)
	}
	if err := r.Reap(context.Background(), "20261121T1.5Z-1-1"); err != nil {
		t.Fatalf("Reap of the running job: %v", err)
	}
	sshtest.WaitGone(t, []int{pid}, 0)
	if err := <-done; err == nil {
		t.Error("a job stopped by Reap ended without an error")
	}
}

// A job's life does not hang on its connection: with the host's sshd
// killed, every connection with it, the job runs on; once sshd is back, Run
// takes up its output from the byte it had and returns the job's own exit
// status.
func TestRemoteJobOutlivesItsConnection(t *testing.T) {
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	lab := openLab(t, l)
	r := lab.Runner("node1")
	var out, errs sshtest.Buffer
	done := make(chan error, 1)
	var code int
	go func() {
		var err error
		code, err = r.Run(context.Background(), executor.Command{
			Script: "for i in $(seq 1 40); do echo line $i; echo err $i >&2; sleep 0.1; done; exit 7", Tag: "cut-1-1"}, &out, &errs)
		done <- err
	}()
	waitFor(t, "the first lines", func() bool { return strings.Contains(out.String(), "line 3\n") })
	l.Hosts[0].Cut()
	time.Sleep(time.Second)
	l.Hosts[0].Start()
	select {
	case err := <-done:
		if err != nil || code != 7 {
			t.Fatalf("Run: %d, %v; want the job's own 7", code, err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return after the host came back")
	}
	var wantOut, wantErr strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&wantOut, "line %d\n", i)
		fmt.Fprintf(&wantErr, "err %d\n", i)
	}
	if out.String() != wantOut.String() || errs.String() != wantErr.String() {
		t.Errorf("output\n%q\n%q\nwant every line once, in order", out.String(), errs.String())
	}
}

// A cancel while the job's host is cut off cannot reach the job: Run says
// so (the cause, and ErrCancelUnreached), not that the job was lost, and
// the job runs on until Reap, once the host answers, stops it.
func TestRemoteCancelWhileCutOff(t *testing.T) {
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 1})
	lab := openLab(t, l)
	r := lab.Runner("node1")
	pidFile := filepath.Join(l.Dir, "pid")
	ctx, cancel := context.WithCancelCause(context.Background())
	why := errors.New("cancelled on request")
	done := make(chan error, 1)
	go func() {
		_, err := r.Run(ctx, executor.Command{Script: "echo $BASHPID > " + pidFile + "; sleep 60", Tag: "cutc-1-1"}, io.Discard, io.Discard)
		done <- err
	}()
	pid := waitPid(t, pidFile)
	l.Hosts[0].Cut()
	cancel(why)
	select {
	case err := <-done:
		if !errors.Is(err, why) || !errors.Is(err, executor.ErrCancelUnreached) || errors.Is(err, executor.ErrConnectionLost) {
			t.Fatalf("Run: %v; want the cancel's cause and that it did not reach the host", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its cancel")
	}
	if !sshtest.Running(pid) {
		t.Fatal("the job died with its connection")
	}
	l.Hosts[0].Start()
	if err := r.Reap(context.Background(), "cutc-1-1"); err != nil {
		t.Fatal(err)
	}
	sshtest.WaitGone(t, []int{pid}, 0)
}

// GPU locks over real sshd: named by each host's own GPU UUID (two hosts'
// GPU 1 are two locks), saying the memory others use there, exclusive
// between runs, and lost with the host.
func TestRemoteLockGPU(t *testing.T) {
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 2})
	l.Hosts[0].SetGPUs(sshtest.FakeGPU(0, l.Hosts[0].UUID(0), 0) + sshtest.FakeGPU(1, l.Hosts[0].UUID(1), 1234))
	lab := openLab(t, l)
	ctx := context.Background()
	n1, n2 := lab.Runner("node1"), lab.Runner("node2")
	a, err := n1.LockGPU(ctx, 1, "runA")
	if err != nil {
		t.Fatal(err)
	}
	if a.Key() != l.Hosts[0].UUID(1) || a.UsedMB() != 1234 {
		t.Errorf("key %q, %d MiB used; want the GPU's UUID %q and 1234 MiB", a.Key(), a.UsedMB(), l.Hosts[0].UUID(1))
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

// A run locks the GPUs it just looked at: the holder takes what the look
// found (UUIDs, memory used) and asks nvidia-smi nothing; a holder
// started long after the last look asks it.
func TestRemoteLockTakesTheLook(t *testing.T) {
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 2})
	h := l.Hosts[0]
	h.SetGPUs(sshtest.FakeGPU(0, h.UUID(0), 0) + sshtest.FakeGPU(1, h.UUID(1), 1234))
	lab := openLab(t, l)
	ctx := context.Background()
	if _, err := lab.ProbeGPUs(ctx, "node1"); err != nil {
		t.Fatal(err)
	}
	// What nvidia-smi would say now: the holder does not ask.
	h.SetGPUs(sshtest.FakeGPU(0, h.UUID(0), 0) + sshtest.FakeGPU(1, h.UUID(1), 999))
	calls := filepath.Join(h.Home, "nvidia-smi.calls")
	os.Remove(calls)
	a, err := lab.Runner("node1").LockGPU(ctx, 1, "runA")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(calls); a.Key() != h.UUID(1) || a.UsedMB() != 1234 || len(b) != 0 {
		t.Errorf("key %q, %d MiB used, nvidia-smi asked %q; want %q, the look's 1234 MiB, nothing asked", a.Key(), a.UsedMB(), b, h.UUID(1))
	}
	a.Release()
	// Past freshFor, the look is old: the next holder asks.
	lab.probes.mu.Lock()
	s := lab.probes.last["node1"]
	s.at = s.at.Add(-2 * freshFor)
	lab.probes.last["node1"] = s
	lab.probes.mu.Unlock()
	b, err := lab.Runner("node1").LockGPU(ctx, 1, "runA")
	if err != nil {
		t.Fatal(err)
	}
	if b.UsedMB() != 999 {
		t.Errorf("a holder started after the look went old: %d MiB used, want nvidia-smi's 999", b.UsedMB())
	}
	b.Release()
}

// waitPid waits for a job to write its pid to pidFile, and returns it.
func waitPid(t *testing.T, pidFile string) int {
	t.Helper()
	var pid int
	waitFor(t, "the job to start", func() bool {
		b, err := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	return pid
}

// waitFor waits up to 20 s for cond.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 20 s for %s", what)
		}
	}
}

// A host whose jobs need code (sync:) has its code store's shell started
// as it is opened, waiting for the run's snapshot; one without has none,
// and neither has a lab opened to list its hosts.
func TestOpenWarmsTheCodeStore(t *testing.T) {
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	inv, err := inventory.Load(l.Inventory(""))
	if err != nil {
		t.Fatal(err)
	}
	inv.Hosts[0].Sync = t.TempDir()
	t.Setenv("SSH_AUTH_SOCK", "")
	// A lab that will not ship (a listing of the hosts) is opened first,
	// then one that will: only the second starts a store shell.
	for _, warm := range []bool{false, true} {
		lab, states, err := openAll(context.Background(), inv, Options{Keepalive: 200 * time.Millisecond, Grace: 300 * time.Millisecond, ConnectTimeout: 2 * time.Second, LockDir: l.Dir, WarmCode: warm})
		if err != nil {
			t.Fatal(err)
		}
		defer lab.Close()
		for _, st := range states {
			if st.Err != nil {
				t.Fatalf("%s: %v", st.Host.Name, st.Err)
			}
		}
	}
	// storeShells counts the store shells whose HOME is home.
	storeShells := func(home string) int {
		n := 0
		procs, _ := filepath.Glob("/proc/[0-9]*")
		for _, p := range procs {
			cmdline, _ := os.ReadFile(filepath.Join(p, "cmdline"))
			env, _ := os.ReadFile(filepath.Join(p, "environ"))
			if strings.HasSuffix(string(cmdline), "\x00"+codestore.ProcessName+"\x00") && strings.Contains("\x00"+string(env), "\x00HOME="+home+"\x00") {
				n++
			}
		}
		return n
	}
	waitFor(t, "the store shell of "+l.Hosts[0].Name, func() bool { return storeShells(l.Hosts[0].Home) > 0 })
	// Had the first lab started one too, it would have been asked for
	// earlier: both are up well within a second of the first seen.
	time.Sleep(time.Second)
	if n := storeShells(l.Hosts[0].Home); n != 1 {
		t.Errorf("%s (sync:) has %d store shells waiting; want 1 (of the lab that will ship)", l.Hosts[0].Name, n)
	}
	if n := storeShells(l.Hosts[1].Home); n != 0 {
		t.Errorf("%s (no sync:) has %d store shells; want none", l.Hosts[1].Name, n)
	}
}
