package sshpool

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// hungServer accepts one SSH connection and then never reads from it again,
// like a host that froze: requests get no answer. With answers, it
// answers requests (with a failure, as OpenSSH does a keepalive).
func hungServer(t *testing.T, answers ...bool) string {
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
		_, chans, reqs, err := ssh.NewServerConn(c, cfg)
		if err == nil && len(answers) > 0 && answers[0] {
			go ssh.DiscardRequests(reqs)
			for ch := range chans {
				ch.Reject(ssh.Prohibited, "no sessions here")
			}
		}
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

// WaitUp does not take a connection that no longer answers for the host
// being up: one made before WaitUp was called must answer a keepalive
// first (a frozen host's is alive until its keepalives go unanswered, and
// a run that waited for the host said it was back at once). One that
// answers is taken at once.
func TestWaitUpWantsAnAnswer(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		answers bool
	}{{"frozen", false}, {"answering", true}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			client, err := ssh.Dial("tcp", hungServer(t, tt.answers), &ssh.ClientConfig{
				User: "x", HostKeyCallback: ssh.InsecureIgnoreHostKey(), // an in-process test server
			})
			if err != nil {
				t.Fatal(err)
			}
			p := newPool(Target{Name: "h", Hostname: "127.0.0.1", Port: 1}, &ssh.ClientConfig{}, newDialer(time.Second, 10*time.Second), func() {})
			t.Cleanup(p.Close)
			p.mu.Lock()
			p.add(client)
			p.mu.Unlock()
			time.Sleep(10 * time.Millisecond) // made before WaitUp is called
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			start := time.Now()
			err = p.WaitUp(ctx)
			switch {
			case tt.answers && (err != nil || time.Since(start) > 500*time.Millisecond):
				t.Errorf("WaitUp with a connection that answers: %v after %v, want nil at once", err, time.Since(start))
			case !tt.answers && !errors.Is(err, context.DeadlineExceeded):
				t.Errorf("WaitUp with a frozen host's connection: %v, want it waiting still when its context ended", err)
			}
		})
	}
}
