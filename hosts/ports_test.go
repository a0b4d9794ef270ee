package hosts

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
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
