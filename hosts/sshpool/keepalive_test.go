package sshpool

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// hungServer accepts one SSH connection and then never reads from it again,
// like a host that froze: requests get no answer.
func hungServer(t *testing.T) string {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(signer)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		t.Cleanup(func() { c.Close() })
		// Handshake, then leave the channels and requests unread: the
		// server's side of the connection stalls.
		ssh.NewServerConn(c, cfg)
	}()
	return l.Addr().String()
}

// A connection whose server stops answering is closed by keepAlive within
// about three intervals, which ends every wait on it.
func TestKeepAliveClosesHungConnection(t *testing.T) {
	t.Parallel()
	client, err := ssh.Dial("tcp", hungServer(t), &ssh.ClientConfig{
		User: "x", HostKeyCallback: ssh.InsecureIgnoreHostKey(), // an in-process test server
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		client.Wait()
		close(done)
	}()
	start := time.Now()
	go keepAlive(client, alive{100 * time.Millisecond, 2}, done)
	select {
	case <-done:
		if d := time.Since(start); d < 200*time.Millisecond {
			t.Errorf("closed after %v, before the keepalive could have timed out", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a hung connection was not closed")
	}
}

// Opening a session on a connection that dies meanwhile returns, even when
// x/crypto's own wait would not (the channel is never answered): here the
// server never answers, and the connection is declared dead.
func TestNewSessionGivesUpOnDeadConnection(t *testing.T) {
	t.Parallel()
	client, err := ssh.Dial("tcp", hungServer(t), &ssh.ClientConfig{
		User: "x", HostKeyCallback: ssh.InsecureIgnoreHostKey(), // an in-process test server
	})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c := &conn{client: client, done: make(chan struct{})}
	got := make(chan error, 1)
	go func() {
		_, err := c.newSession()
		got <- err
	}()
	time.Sleep(100 * time.Millisecond) // the open is under way, unanswered
	close(c.done)
	select {
	case err := <-got:
		if !errors.Is(err, errDiedOpening) {
			t.Errorf("err = %v, want errDiedOpening", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("newSession still waits on a connection that is gone")
	}
}
