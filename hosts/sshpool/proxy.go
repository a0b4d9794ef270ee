package sshpool

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// proxyConn starts t's ProxyCommand (as ssh does: sh -c, its stdin and
// stdout the connection) and returns the connection through it. Closing the
// connection ends the command.
func proxyConn(t Target) (net.Conn, error) {
	// Pipes of our own, not exec's: an *os.File pipe takes deadlines, which
	// bound the SSH handshake.
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	c := &cmdConn{in: inW, out: outR, addr: t.Addr()}
	c.cmd = exec.Command("/bin/sh", "-c", t.ProxyCommand)
	c.cmd.Stdin, c.cmd.Stdout, c.cmd.Stderr = inR, outW, &c.stderr
	err = c.cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("ProxyCommand %q: %w", t.ProxyCommand, err)
	}
	c.exited = make(chan struct{})
	go func() {
		c.cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// cmdConn is a connection through a command's stdin and stdout.
type cmdConn struct {
	cmd     *exec.Cmd
	in      *os.File // the command's stdin
	out     *os.File // its stdout
	addr    string   // the server's host:port, as ssh_config names it
	stderr  lockedBuffer
	exited  chan struct{}
	closing sync.Once
}

func (c *cmdConn) Read(p []byte) (int, error) {
	n, err := c.out.Read(p)
	if err != nil && n == 0 {
		if said := strings.TrimSpace(c.stderr.String()); said != "" {
			return 0, fmt.Errorf("%w (ProxyCommand said: %s)", err, said)
		}
	}
	return n, err
}

func (c *cmdConn) Write(p []byte) (int, error) { return c.in.Write(p) }

// Close ends the command: its stdin closes, and it is killed if it does
// not exit within a second.
func (c *cmdConn) Close() error {
	c.closing.Do(func() {
		c.in.Close()
		c.out.Close()
		select {
		case <-c.exited:
		case <-time.After(time.Second):
			c.cmd.Process.Kill()
		}
	})
	return nil
}

func (c *cmdConn) LocalAddr() net.Addr { return proxyAddr("ProxyCommand") }

// RemoteAddr is the server's host:port as ssh_config names it: host keys
// are looked up by it.
func (c *cmdConn) RemoteAddr() net.Addr { return proxyAddr(c.addr) }

func (c *cmdConn) SetDeadline(t time.Time) error {
	c.in.SetWriteDeadline(t)
	return c.out.SetReadDeadline(t)
}
func (c *cmdConn) SetReadDeadline(t time.Time) error  { return c.out.SetReadDeadline(t) }
func (c *cmdConn) SetWriteDeadline(t time.Time) error { return c.in.SetWriteDeadline(t) }

// proxyAddr names the ends of a connection through a command.
type proxyAddr string

func (a proxyAddr) Network() string { return "proxycommand" }
func (a proxyAddr) String() string  { return string(a) }

// lockedBuffer is a buffer that one goroutine writes (the command's
// stderr) while another reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 4096 {
		return len(p), nil
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
