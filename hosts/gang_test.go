package hosts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// FreePort finds a port no socket uses on a real host, from 29500 up, and
// never one that something listens on; Address is what the pool connects
// to (the lab's hosts are all 127.0.0.1).
func TestFreePort(t *testing.T) {
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 1})
	lab := openLab(t, l)
	if a := lab.Address("node1"); a != "127.0.0.1" {
		t.Errorf("Address: %q, want the address the pool connects to", a)
	}
	// Every port from 29500 to 32499 but one is taken: that one comes back.
	var lns []net.Listener
	t.Cleanup(func() {
		for _, ln := range lns {
			ln.Close()
		}
	})
	free := 31234
	for p := 29500; p < 32500; p++ {
		if p == free {
			continue
		}
		if ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
			lns = append(lns, ln)
		}
	}
	got := map[int]bool{}
	for range 5 {
		port, err := lab.FreePort(context.Background(), "node1")
		if err != nil {
			t.Fatal(err)
		}
		got[port] = true
	}
	for port := range got {
		if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
			t.Errorf("FreePort said %d, which is in use: %v", port, err)
		} else {
			ln.Close()
		}
	}
	if !got[free] {
		t.Errorf("FreePort said %v, want %d, the one port of the range left free", got, free)
	}
}

// A look for a free port has --probe-timeout: a login profile that hangs
// is said in words, and holds nothing up.
func TestFreePortHung(t *testing.T) {
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 1})
	t.Setenv("SSH_AUTH_SOCK", "")
	inv, err := inventory.Load(l.Inventory(""))
	if err != nil {
		t.Fatal(err)
	}
	lab, _, err := openAll(context.Background(), inv, Options{Keepalive: 200 * time.Millisecond, Grace: 300 * time.Millisecond, ConnectTimeout: 2 * time.Second, LockDir: l.Dir, ProbeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Close)
	os.WriteFile(filepath.Join(l.Hosts[0].Home, ".bash_profile"), []byte("sleep 30\n"), 0o644)
	begin := time.Now()
	_, err = lab.FreePort(context.Background(), "node1")
	if err == nil || !strings.Contains(err.Error(), "node1: the look for a free port did not answer within 1s") || !errors.Is(err, executor.ErrProbeTimeout) {
		t.Errorf("FreePort with a hung profile: %v", err)
	}
	if took := time.Since(begin); took > 15*time.Second {
		t.Errorf("FreePort took %s", took)
	}
}

// A gated command, set up, waits for Go before its line runs, on its
// first line (its own line numbers stand). Two told at once on one host
// each get their own word (a look that joined another's would leave one
// waiting).
func TestGatedCommandWaitsForGo(t *testing.T) {
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 2})
	lab := openLab(t, l)
	tags := []string{"R9-1-1", "R9-2-1"}
	outs := make([]sshtest.Buffer, len(tags))
	running := make(chan struct{}, len(tags))
	done := make(chan error, len(tags))
	for i, tag := range tags {
		go func() {
			c := executor.Command{Script: "echo ran $LINENO", Tag: tag, Gated: true,
				Progress: func(p executor.Progress) {
					if p.Running {
						running <- struct{}{}
					}
				}}
			_, err := lab.Run(context.Background(), "node1", c, &outs[i], io.Discard)
			done <- err
		}()
	}
	for range tags {
		<-running
	}
	time.Sleep(500 * time.Millisecond)
	for i := range outs {
		if outs[i].String() != "" {
			t.Fatalf("the gated line ran before Go: %q", outs[i].String())
		}
	}
	goErrs := make(chan error, len(tags))
	for _, tag := range tags {
		go func() { goErrs <- lab.Go(context.Background(), "node1", tag) }()
	}
	for range tags {
		if err := <-goErrs; err != nil {
			t.Fatal(err)
		}
	}
	for range tags {
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a command told to go still waits")
		}
	}
	for i, tag := range tags {
		if outs[i].String() != "ran 1\n" {
			t.Errorf("after Go: output %q, want \"ran 1\"", outs[i].String())
		}
		if _, err := os.Stat(filepath.Join(l.Hosts[0].Home, ".gpudispatch", "go-"+tag)); err == nil {
			t.Errorf("the gate's file of %s was left behind", tag)
		}
	}
	if err := lab.Go(context.Background(), "node1", "bad tag; rm -rf ~"); err == nil || !strings.Contains(err.Error(), "bad tag") {
		t.Errorf("Go with a tag that is no tag: %v", err)
	}
}
