//go:build unix

package sshtest

import (
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The lab works with OpenSSH's own client: aliases, strict host keys, the
// client key, per-host homes and the fake nvidia-smi on the login PATH.
func TestLabWithOpenSSHClient(t *testing.T) {
	l := Start(t, Options{Hosts: 2, GPUs: 3})
	for _, h := range l.Hosts {
		out, err := exec.Command("ssh", "-F", l.SSHConfig, "-o", "BatchMode=yes", h.Name,
			`bash -lc 'echo "$FAKE_HOST $HOME $(nvidia-smi -L | wc -l)"'`).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", h.Name, err, out)
		}
		if got, want := strings.TrimSpace(string(out)), h.Name+" "+h.Home+" 3"; got != want {
			t.Errorf("%s: got %q, want %q", h.Name, got, want)
		}
	}
	l.Hosts[0].Stop()
	if err := exec.Command("ssh", "-F", l.SSHConfig, "-o", "BatchMode=yes", "-o", "ConnectTimeout=2", "node1", "true").Run(); err == nil {
		t.Error("node1 still answers after Stop")
	}
	l.Hosts[0].Start()
	if out, err := exec.Command("ssh", "-F", l.SSHConfig, "-o", "BatchMode=yes", "node1", "true").CombinedOutput(); err != nil {
		t.Errorf("node1 after restart: %v\n%s", err, out)
	}
}

// A host restarted while its port is still held (by a process of its last
// sshd that has not died yet) comes up once the port is free.
func TestStartWaitsForItsPort(t *testing.T) {
	l := Start(t, Options{Hosts: 1, GPUs: 1})
	h := l.Hosts[0]
	h.Stop()
	ln, err := net.Listen("tcp", h.Addr())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(500 * time.Millisecond)
		ln.Close()
	}()
	h.Start()
	if out, err := exec.Command("ssh", "-F", l.SSHConfig, "-o", "BatchMode=yes", h.Name, "true").CombinedOutput(); err != nil {
		t.Errorf("%s after its port was freed: %v\n%s", h.Name, err, out)
	}
}
