//go:build linux

package sshpool

import (
	"net"
	"syscall"
)

// quickAck makes c, a TCP connection, acknowledge at once what it reads;
// other connections are returned as they are. sshd leaves Nagle's
// algorithm on for sessions without a terminal, so a reply it writes in
// two packets waits with the second for the first's ACK, which Linux
// delays by 40 ms when the reader has nothing to send: each connection's
// first session took 40 ms more to open than its own round trips.
// TCP_QUICKACK does not stay set (the kernel goes back to delaying ACKs),
// so it is set again before each read: a system call on a read of a
// packet or more.
func quickAck(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	return &quickAckConn{TCPConn: tc, raw: raw}
}

// quickAckConn is a TCP connection that acknowledges at once what it reads.
type quickAckConn struct {
	*net.TCPConn
	raw syscall.RawConn
}

func (c *quickAckConn) Read(p []byte) (int, error) {
	c.raw.Control(func(fd uintptr) {
		syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 1)
	})
	return c.TCPConn.Read(p)
}
