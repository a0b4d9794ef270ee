//go:build linux

package sshpool

import (
	"io"
	"net"
	"syscall"
	"testing"
)

// quickAckOn reports whether c acknowledges at once (Linux leaves
// "pingpong" mode, where it delays ACKs, only when told or after a while).
func quickAckOn(t *testing.T, c *net.TCPConn) bool {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var on int
	var serr error
	raw.Control(func(fd uintptr) { on, serr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK) })
	if serr != nil {
		t.Fatal(serr)
	}
	return on == 1
}

// TestQuickAck: a connection that answers each reply at once (as the
// coordinator does a job shell's) is put by Linux in the mode that delays
// ACKs; a read through quickAck takes it out of it, so that sshd's second
// small packet does not wait 40 ms for the first's ACK. A connection that
// is no TCP connection is left as it is.
func TestQuickAck(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		s, err := l.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		s.(*net.TCPConn).SetNoDelay(false) // as sshd's non-terminal sessions
		b := make([]byte, 1)
		for {
			if _, err := s.Write([]byte("x")); err != nil {
				return
			}
			if _, err := io.ReadFull(s, b); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc := c.(*net.TCPConn)
	b := make([]byte, 1)
	exchange := func(r io.Reader) {
		for range 8 {
			if _, err := io.ReadFull(r, b); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write(b); err != nil {
				t.Fatal(err)
			}
		}
	}
	exchange(c)
	if quickAckOn(t, tc) {
		t.Fatal("after replies at once, a plain connection should delay its ACKs (pingpong mode); this kernel does not, so the test proves nothing")
	}
	q := quickAck(c)
	if _, err := io.ReadFull(q, b); err != nil {
		t.Fatal(err)
	}
	if !quickAckOn(t, tc) {
		t.Error("a read through quickAck left the connection delaying its ACKs")
	}
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if quickAck(p1) != p1 {
		t.Error("quickAck wrapped a connection that is no TCP connection")
	}
}
