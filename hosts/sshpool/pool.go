package sshpool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"

	"golang.org/x/crypto/ssh"
)

// Pool holds the connections to one host, hands out sessions on them and
// knows whether the host can be reached.
//
// When a server refuses another session (OpenSSH's MaxSessions, 10 by
// default), the pool learns that connection's limit and opens another
// connection, so a busy host never fails a job for want of a session.
//
// The host is up while one of its connections is alive (WaitUp, which a
// run calls to learn that a host it lost is back, wants it to answer as
// well). When the last one dies (server gone, keepalive unanswered) the
// pool dials again at once; if
// that fails the host is down: sessions fail at once with ErrHostDown, and
// the pool redials with exponential backoff and jitter until it succeeds or
// is closed. After a refused login or host key the wait is long, so that a
// lab's sshd never locks us out (OpenSSH's PerSourcePenalties).
type Pool struct {
	target Target
	cfg    *ssh.ClientConfig
	dialer *dialer
	// closeAgent releases the ssh-agent connection cfg signs with.
	closeAgent func()
	// bg bounds the dials the pool makes on its own; close cancels it.
	bg     context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	conns   []*conn
	closed  bool
	dialing bool  // a connection attempt is under way
	down    error // why the last attempt failed; nil once one succeeds
	fails   int   // attempts failed in a row
	// changed is closed, and replaced, whenever a connection comes or goes,
	// an attempt ends or a session is given back.
	changed chan struct{}
}

// conn is one connection and what the pool knows of it.
type conn struct {
	client *ssh.Client
	open   int // sessions open on it
	limit  int // sessions the server allows on it; 0 until one was refused
	done   chan struct{}
	dialed time.Time // when it was made
}

// errDiedOpening is newSession's error when the connection died while a
// session was being opened.
var errDiedOpening = errors.New("connection lost while opening a session")

// newSession opens a session on c. x/crypto's NewSession can wait forever
// when the connection dies just as the session's channel is opened: the
// mux drops its channels when its reader stops, and a channel registered
// just after that is never answered nor dropped. So it gives up once the
// connection is known to be gone (and closes a session that still comes).
func (c *conn) newSession() (*ssh.Session, error) {
	type opened struct {
		s   *ssh.Session
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		s, err := c.client.NewSession()
		ch <- opened{s, err}
	}()
	select {
	case o := <-ch:
		return o.s, o.err
	case <-c.done:
		go func() {
			if o := <-ch; o.s != nil {
				o.s.Close()
			}
		}()
		return nil, errDiedOpening
	}
}

func (c *conn) alive() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// errPoolClosed is returned once the run has closed its connections.
var errPoolClosed = errors.New("connection pool closed")

func newPool(t Target, cfg *ssh.ClientConfig, d *dialer, closeAgent func()) *Pool {
	bg, cancel := context.WithCancel(context.Background())
	return &Pool{target: t, cfg: cfg, dialer: d, closeAgent: closeAgent,
		bg: bg, cancel: cancel, changed: make(chan struct{})}
}

// notify wakes everyone waiting on a change. p.mu is held.
func (p *Pool) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// add starts watching a new connection. p.mu is held.
func (p *Pool) add(client *ssh.Client) {
	c := &conn{client: client, done: make(chan struct{}), dialed: time.Now()}
	go func() {
		client.Wait()
		close(c.done)
		p.mu.Lock()
		defer p.mu.Unlock()
		if !p.closed && !p.dialing && !p.live() {
			p.redial()
		}
		p.notify()
	}()
	go keepAlive(client, p.dialer.aliveFor(p.target), c.done)
	p.conns = append(p.conns, c)
}

// live drops dead connections and reports whether one is left. p.mu is held.
func (p *Pool) live() bool {
	kept := p.conns[:0]
	for _, c := range p.conns {
		if c.alive() {
			kept = append(kept, c)
		}
	}
	clear(p.conns[len(kept):])
	p.conns = kept
	return len(kept) > 0
}

// Live reports whether the host has a live connection now.
func (p *Pool) Live() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.live()
}

// redial starts a connection attempt of the pool's own. p.mu is held.
func (p *Pool) redial() {
	p.dialing = true
	go p.dial(p.bg)
}

// dial makes one connection attempt and returns its client; p.dialing was
// set by the caller. A failure marks the host down and schedules the next
// attempt, unless it came from ctx ending.
func (p *Pool) dial(ctx context.Context) (*ssh.Client, error) {
	client, err := p.dialer.connect(ctx, p.target, p.cfg)
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.notify()
	p.dialing = false
	switch {
	case p.closed:
		if client != nil {
			client.Close()
		}
		return nil, errPoolClosed
	case err == nil:
		p.add(client)
		p.down, p.fails = nil, 0
		return client, nil
	case ctx.Err() != nil:
		return nil, err
	}
	p.down = err
	p.fails++
	time.AfterFunc(retryAfter(p.fails, err), func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if !p.closed && !p.dialing {
			p.redial()
		}
	})
	return nil, err
}

// Backoff between connection attempts to a host that is down.
const (
	retryFirst = time.Second
	retryMax   = 30 * time.Second
	// retryRefused follows a refused login or host key: the user has to act,
	// and sshd penalises sources that keep failing.
	retryRefused = 5 * time.Minute
)

// retryAfter is the wait before attempt n+1 after n failed in a row:
// exponential from retryFirst up to retryMax, or retryRefused, with ±50%
// jitter so that hosts behind one switch do not all redial at once.
func retryAfter(n int, err error) time.Duration {
	d := retryMax
	if n < 6 {
		d = min(retryFirst<<(n-1), retryMax)
	}
	if Refused(err) {
		d = retryRefused
	}
	return time.Duration(float64(d) * (0.5 + rand.Float64()))
}

// Refused reports a failure that trying again soon will not mend: the
// server rejected our keys, or its host key is unknown or changed.
func Refused(err error) bool {
	return errors.Is(err, ErrHostKeyChanged) || errors.Is(err, ErrHostKeyUnknown) ||
		err != nil && strings.Contains(err.Error(), "unable to authenticate")
}

// NoSuchHost reports whether err says that the host's name resolves
// nowhere (no DNS answer, no HostName in ssh_config): at start, a typo or a
// name only a VPN knows, which a retry does not mend.
func NoSuchHost(err error) bool {
	var dns *net.DNSError
	return errors.As(err, &dns) && dns.IsNotFound
}

// connect makes the first connection, to learn early whether the host is
// reachable; it returns the server's version string. On failure the pool
// keeps trying in the background until it is closed.
func (p *Pool) connect(ctx context.Context) (string, error) {
	p.mu.Lock()
	p.dialing = true
	p.mu.Unlock()
	client, err := p.dial(ctx)
	if err != nil {
		return "", err
	}
	return string(client.ServerVersion()), nil
}

// Session opens a session on a connection with room, opening a new
// connection when none has. release must be called once the session ends.
// While the host is down it fails at once with an error wrapping
// ErrHostDown.
func (p *Pool) Session(ctx context.Context) (*ssh.Session, func(), error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, nil, errPoolClosed
		}
		if c := p.reserve(); c != nil {
			p.mu.Unlock()
			s, err := c.newSession()
			if err == nil {
				return s, func() { p.unreserve(c) }, nil
			}
			p.mu.Lock()
			c.open--
			var refused *ssh.OpenChannelError
			if errors.As(err, &refused) {
				// This connection is full: remember how full.
				c.limit = max(c.open, 1)
			} else {
				c.client.Close()
			}
			p.mu.Unlock()
			continue
		}
		switch {
		case p.dialing || p.down != nil && len(p.conns) > 0:
			// Wait for the attempt under way, or for a session to end on
			// the connections that are full.
			ch := p.changed
			p.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		case p.down != nil:
			err := p.down
			p.mu.Unlock()
			return nil, nil, fmt.Errorf("%w: %v", executor.ErrHostDown, err)
		default:
			p.dialing = true
			p.mu.Unlock()
			if _, err := p.dial(ctx); err != nil && ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
		}
	}
}

// reserve picks a live connection with room and counts a session on it;
// nil means there is none. p.mu is held.
func (p *Pool) reserve() *conn {
	p.live()
	for _, c := range p.conns {
		if c.limit == 0 || c.open < c.limit {
			c.open++
			return c
		}
	}
	return nil
}

func (p *Pool) unreserve(c *conn) {
	p.mu.Lock()
	c.open--
	p.notify()
	p.mu.Unlock()
}

// WaitUp returns once the host answers, dialing when nothing else is, or
// when ctx ends or the pool is closed. A connection made before WaitUp was
// called must answer a keepalive first: one to a host that froze is alive
// until its keepalives go unanswered, and a run waiting for the host to
// come back took it for the host being up again at once.
func (p *Pool) WaitUp(ctx context.Context) error {
	since := time.Now()
	for {
		p.mu.Lock()
		switch {
		case p.closed:
			p.mu.Unlock()
			return errPoolClosed
		case p.live():
			c := p.conns[len(p.conns)-1] // the newest
			p.mu.Unlock()
			if !c.dialed.Before(since) || ping(ctx, c.client, p.dialer.aliveFor(p.target).wait(), c.done) {
				return nil
			}
			// Closed for want of an answer (or ctx ended): once it is
			// gone, the pool dials again.
			select {
			case <-c.done:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		case !p.dialing && p.down == nil:
			p.redial()
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close closes every connection and stops redialing; sessions end.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.cancel()
	for _, c := range p.conns {
		c.client.Close()
	}
	p.notify()
	p.closeAgent()
}

// Hostname is the address the pool connects to: ssh_config's HostName for
// the host (or the inventory's hostname:), else its name.
func (p *Pool) Hostname() string { return p.target.Hostname }
