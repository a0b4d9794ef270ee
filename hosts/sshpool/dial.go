package sshpool

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
)

// dialer opens SSH connections for the hosts of one run. It is shared by
// their pools: it limits the handshakes under way to one address (several
// ssh_config aliases may name one server) to startupsPerAddr, so that sshd's
// MaxStartups (10:30:100: it starts dropping new connections beyond 10
// unauthenticated ones) never drops one; it keeps one client per jump host,
// and serialises known_hosts appends.
type dialer struct {
	connectTimeout time.Duration
	keepalive      time.Duration

	mu       sync.Mutex
	starting map[string]chan struct{} // per address: tokens to hold while dialing
	bastions map[string]*bastion
}

// startupsPerAddr is how many handshakes with one address may be under way
// at once: under OpenSSH's default MaxStartups of 10, with room for the
// lab's other users.
const startupsPerAddr = 6

type bastion struct {
	client *ssh.Client
	done   chan struct{}
}

func newDialer(connectTimeout, keepalive time.Duration) *dialer {
	return &dialer{connectTimeout: connectTimeout, keepalive: keepalive,
		starting: map[string]chan struct{}{}, bastions: map[string]*bastion{}}
}

// token returns addr's dial tokens, a channel of capacity startupsPerAddr.
func (d *dialer) token(addr string) chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	tok, ok := d.starting[addr]
	if !ok {
		tok = make(chan struct{}, startupsPerAddr)
		d.starting[addr] = tok
	}
	return tok
}

// clientConfig builds what x/crypto needs to log in to t.
func (d *dialer) clientConfig(t Target) (*ssh.ClientConfig, func(), error) {
	keys, closeAgent, err := signers(t)
	if err != nil {
		return nil, nil, err
	}
	check, algos, err := d.hostKeyCheck(t)
	if err != nil {
		closeAgent()
		return nil, nil, err
	}
	return &ssh.ClientConfig{
		User:              t.User,
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(keys...)},
		HostKeyCallback:   check,
		HostKeyAlgorithms: algos,
		Timeout:           cmp.Or(t.ConnectTimeout, d.connectTimeout),
	}, closeAgent, nil
}

// connect opens one new connection to t, through its jump host if it has
// one, within the connect timeout (TCP and SSH handshake together). A
// connection the server closes before its version line is how sshd's
// MaxStartups sheds load (its count of unauthenticated connections lags
// behind the logins the client has finished): connect dials again after a
// jittered backoff until the timeout.
func (d *dialer) connect(ctx context.Context, t Target, cfg *ssh.ClientConfig) (*ssh.Client, error) {
	tok := d.token(t.Addr())
	select {
	case tok <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-tok }()
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(t.ConnectTimeout, d.connectTimeout))
	defer cancel()
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		c, err := d.connectOnce(ctx, t, cfg)
		if !errors.Is(err, errShed) {
			return c, err
		}
		select {
		case <-time.After(backoff/2 + rand.N(backoff)):
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (the server keeps closing new connections: its MaxStartups may be too low for this run)", err)
		}
	}
}

// unresolved says why t's host name cannot be looked up, when t is reached
// directly by a name that is not an address and the lookup fails; else
// nil.
func (d *dialer) unresolved(ctx context.Context, t Target) error {
	if t.ProxyCommand != "" || t.Jump != nil {
		return nil
	}
	host, _, err := net.SplitHostPort(t.Addr())
	if err != nil || net.ParseIP(host) != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(t.ConnectTimeout, d.connectTimeout))
	defer cancel()
	if _, err := net.DefaultResolver.LookupHost(ctx, host); err != nil {
		var dns *net.DNSError
		if errors.As(err, &dns) {
			return d.explain(ctx, err, t.Addr(), false)
		}
	}
	return nil
}

// errShed marks a connection the server closed before its version line.
var errShed = errors.New("connection closed by the server before the SSH handshake")

// connectOnce dials t once within ctx.
func (d *dialer) connectOnce(ctx context.Context, t Target, cfg *ssh.ClientConfig) (*ssh.Client, error) {
	var conn net.Conn
	var err error
	switch {
	case t.ProxyCommand != "":
		conn, err = proxyConn(t)
	case t.Jump != nil:
		var b *ssh.Client
		if b, err = d.bastion(ctx, *t.Jump); err != nil {
			return nil, fmt.Errorf("jump host %s: %w", t.Jump.Name, err)
		}
		conn, err = b.DialContext(ctx, "tcp", t.Addr())
	default:
		conn, err = (&net.Dialer{}).DialContext(ctx, "tcp", t.Addr())
		if err == nil {
			conn = quickAck(conn)
		}
	}
	addr := t.Addr()
	if t.ProxyCommand != "" {
		addr += " (through its ProxyCommand)"
	}
	if err != nil {
		return nil, d.explain(ctx, err, addr, false)
	}
	// x/crypto's handshake takes no context: a deadline and a watcher bound it.
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	bw := &bannerWatch{Conn: conn}
	c, chans, reqs, err := ssh.NewClientConn(bw, t.Addr(), cfg)
	if !stop() || err != nil {
		conn.Close()
		if err == nil {
			return nil, ctx.Err()
		}
		said, banner := bw.preBanner()
		// sshd's MaxStartups closes a connection before its greeting; a
		// ProxyCommand that ends does too, and is not retried.
		if !banner && t.ProxyCommand == "" && ctx.Err() == nil && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
			if said != "" {
				err = fmt.Errorf("%w (it said %q)", err, said)
			}
			err = fmt.Errorf("%w: %w", errShed, err)
		}
		return nil, d.explain(ctx, err, addr, banner)
	}
	bw.done.Store(true)
	conn.SetDeadline(time.Time{})
	return ssh.NewClient(c, chans, reqs), nil
}

// ReasonError is why a host could not be reached, in words a user acts on
// (which address, what to check or change), wrapping the network's own
// error.
type ReasonError struct {
	Reason string
	Err    error
}

func (e *ReasonError) Error() string { return e.Reason }
func (e *ReasonError) Unwrap() error { return e.Err }

// explain puts err, from dialing addr or the SSH handshake with it within
// ctx (the connect timeout), in words; greeted says whether the server sent
// its SSH version line. Errors it has no words for are returned as they are.
func (d *dialer) explain(ctx context.Context, err error, addr string, greeted bool) error {
	timeout := d.connectTimeout.String()
	// The connection's deadline is the context's: either may fire first.
	timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
	var dns *net.DNSError
	var reason string
	switch {
	case errors.As(err, &dns) && dns.IsNotFound:
		reason = fmt.Sprintf("no such host name %s (a typo? not on the VPN? no HostName for it in ssh_config?)", dns.Name)
	case errors.As(err, &dns):
		reason = fmt.Sprintf("the name %s could not be looked up (%s): is the network or the VPN up?", dns.Name, dns.Err)
	case errors.Is(err, syscall.ECONNREFUSED):
		reason = fmt.Sprintf("%s refused the connection: no SSH server listens there (a wrong port? the host still booting?)", addr)
	case errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH):
		reason = fmt.Sprintf("no route to %s: is the network or the VPN up?", addr)
	case timedOut && greeted:
		reason = fmt.Sprintf("%s greeted but the SSH handshake did not finish within %s (--connect-timeout): the host is overloaded, or the network drops packets", addr, timeout)
	case timedOut && errors.Is(err, errShed):
		return err
	case timedOut:
		reason = fmt.Sprintf("no SSH greeting from %s within %s (--connect-timeout): the host hangs, a firewall drops the packets, or what listens there is not an SSH server", addr, timeout)
	default:
		return err
	}
	return &ReasonError{Reason: reason, Err: err}
}

// bannerWatch keeps the first bytes a server sends, to tell a server that
// closed the connection before its version line (sshd's MaxStartups writes
// "Exceeded MaxStartups" and closes) from one that failed later. x/crypto
// reads from a goroutine of its own once the version lines are exchanged.
type bannerWatch struct {
	net.Conn
	// done is set once the handshake is over: the connection's reads for
	// the rest of its life then cost nothing more.
	done atomic.Bool
	mu   sync.Mutex
	head []byte
}

func (b *bannerWatch) Read(p []byte) (int, error) {
	n, err := b.Conn.Read(p)
	if b.done.Load() {
		return n, err
	}
	b.mu.Lock()
	if room := 256 - len(b.head); room > 0 {
		b.head = append(b.head, p[:min(n, room)]...)
	}
	b.mu.Unlock()
	return n, err
}

// preBanner returns what the server sent before its version line, and
// whether it sent that line at all.
func (b *bannerWatch) preBanner() (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	before, _, found := bytes.Cut(b.head, []byte("SSH-"))
	return strings.TrimSpace(string(before)), found
}

// bastion returns the client for jump host j, connecting once for all the
// hosts behind it (forwarded channels are not limited by MaxSessions).
func (d *dialer) bastion(ctx context.Context, j Target) (*ssh.Client, error) {
	key := j.User + "@" + j.Addr()
	d.mu.Lock()
	b := d.bastions[key]
	d.mu.Unlock()
	if b != nil {
		select {
		case <-b.done:
		default:
			return b.client, nil
		}
	}
	cfg, closeAgent, err := d.clientConfig(j)
	if err != nil {
		return nil, err
	}
	defer closeAgent()
	c, err := d.connect(ctx, j, cfg)
	if err != nil {
		return nil, err
	}
	nb := &bastion{client: c, done: make(chan struct{})}
	go func() {
		c.Wait()
		close(nb.done)
	}()
	go keepAlive(c, d.aliveFor(j), nb.done)
	d.mu.Lock()
	if old := d.bastions[key]; old != nil && old != b {
		// Another host connected to it meanwhile: use that one.
		d.mu.Unlock()
		c.Close()
		return old.client, nil
	}
	d.bastions[key] = nb
	d.mu.Unlock()
	return c, nil
}

// close closes the jump host connections.
func (d *dialer) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, b := range d.bastions {
		b.client.Close()
	}
}

// alive is how a connection is kept alive: a keepalive every interval,
// and the connection given up once missed of them went unanswered.
type alive struct {
	interval time.Duration
	missed   int
}

// aliveFor is t's keepalive: ssh_config's ServerAliveInterval and
// ServerAliveCountMax where it sets them (3 unanswered, as ssh), else
// --keepalive and two intervals.
func (d *dialer) aliveFor(t Target) alive {
	if t.AliveInterval > 0 {
		return alive{t.AliveInterval, cmp.Or(t.AliveCountMax, 3)}
	}
	return alive{d.keepalive, cmp.Or(t.AliveCountMax, 2)}
}

// keepAlive asks the server for a reply every a.interval (ping); a
// connection whose a.missed keepalives in a row go unanswered (each given
// an interval) is closed. It returns when done closes.
func keepAlive(c *ssh.Client, a alive, done <-chan struct{}) {
	t := time.NewTicker(a.interval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		if !ping(context.Background(), c, a.wait(), done) {
			return
		}
	}
}

// wait is how long a keepalive's answer is waited for before the
// connection is given up: an interval per keepalive that may go unanswered.
func (a alive) wait() time.Duration { return time.Duration(a.missed) * a.interval }

// ping asks the server for a reply and waits up to wait for it: true once
// it came (OpenSSH answers keepalive@openssh.com with a failure, which
// proves it alive all the same). When none comes in time, or the
// connection failed, the connection is closed, which ends every wait on it
// (golang/go#19338), and ping says false; so it does, leaving the
// connection be, once done closes or ctx ends.
func ping(ctx context.Context, c *ssh.Client, wait time.Duration, done <-chan struct{}) bool {
	answered := make(chan error, 1)
	go func() {
		_, _, err := c.SendRequest("keepalive@openssh.com", true, nil)
		answered <- err
	}()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case err := <-answered:
		if err != nil {
			c.Close()
			return false
		}
		return true
	case <-timer.C:
		c.Close()
		return false
	case <-done:
		return false
	case <-ctx.Done():
		return false
	}
}
