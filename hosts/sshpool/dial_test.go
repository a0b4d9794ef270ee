package sshpool

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// A host that cannot be reached is told in words a user acts on, naming
// the address and what to check, never in the network stack's own words
// ("use of closed network connection", "i/o timeout").
func TestUnreachableInWords(t *testing.T) {
	t.Parallel()
	// listen returns a loopback address whose server does what serve says
	// with each connection.
	listen := func(serve func(net.Conn)) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go serve(c)
				t.Cleanup(func() { c.Close() })
			}
		}()
		return l.Addr().String()
	}
	hung := listen(func(net.Conn) {})
	greets := listen(func(c net.Conn) { c.Write([]byte("SSH-2.0-OpenSSH_9.2\r\n")) })
	closed := func() string {
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		defer l.Close()
		return l.Addr().String()
	}()
	d := newDialer(300*time.Millisecond, time.Second)
	cfg := &ssh.ClientConfig{User: "u", HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: time.Second}
	for _, tc := range []struct {
		name, addr, want string
	}{
		{"a server that never speaks", hung, "no SSH greeting from " + hung + " within 300ms (--connect-timeout)"},
		{"a server that greets, then hangs", greets, greets + " greeted but the SSH handshake did not finish within 300ms (--connect-timeout)"},
		{"no server on the port", closed, closed + " refused the connection: no SSH server listens there"},
	} {
		host, port, _ := net.SplitHostPort(tc.addr)
		p, _ := strconv.Atoi(port)
		_, err := d.connect(context.Background(), Target{Name: "n", Hostname: host, Port: p, User: "u"}, cfg)
		var re *ReasonError
		if !errors.As(err, &re) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q...", tc.name, err, tc.want)
		}
	}
	// The words for what the loopback cannot show.
	ctx := context.Background()
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&net.DNSError{Err: "no such host", Name: "nodee2", IsNotFound: true}, "no such host name nodee2 (a typo? not on the VPN?"},
		{&net.OpError{Op: "dial", Err: syscall.EHOSTUNREACH}, "no route to 10.9.9.9:22: is the network or the VPN up?"},
		{errors.New("something else"), "something else"},
	} {
		got := d.explain(ctx, tc.err, "10.9.9.9:22", false)
		if !strings.HasPrefix(got.Error(), tc.want) || !errors.Is(got, tc.err) {
			t.Errorf("explain(%v) = %v, want %q... wrapping it", tc.err, got, tc.want)
		}
		// A name that resolves nowhere is left out at once, not retried.
		if dns, ok := tc.err.(*net.DNSError); NoSuchHost(got) != (ok && dns.IsNotFound) {
			t.Errorf("NoSuchHost(%v) = %v", got, NoSuchHost(got))
		}
	}
}
