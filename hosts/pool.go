package hosts

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/crypto/ssh"
)

// pool holds the connections to one host and hands out sessions on them.
// When a server refuses another session (OpenSSH's MaxSessions, 10 by
// default), the pool learns that connection's limit and opens another
// connection, so a busy host never fails a job for want of a session.
type pool struct {
	target Target
	cfg    *ssh.ClientConfig
	dialer *dialer
	// closeAgent releases the ssh-agent connection cfg signs with.
	closeAgent func()

	mu     sync.Mutex
	conns  []*conn
	closed bool
}

// conn is one connection and what the pool knows of it.
type conn struct {
	client *ssh.Client
	open   int // sessions open on it
	limit  int // sessions the server allows on it; 0 until one was refused
	done   chan struct{}
}

func (c *conn) alive() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// add starts watching a new connection.
func (p *pool) add(client *ssh.Client) *conn {
	c := &conn{client: client, done: make(chan struct{})}
	go func() {
		client.Wait()
		close(c.done)
	}()
	go keepAlive(client, p.dialer.keepalive, c.done)
	p.conns = append(p.conns, c)
	return c
}

// connect opens a first connection, to learn early whether the host is
// reachable; it returns the server's version string.
func (p *pool) connect(ctx context.Context) (string, error) {
	client, err := p.dialer.connect(ctx, p.target, p.cfg)
	if err != nil {
		return "", err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.add(client)
	return string(client.ServerVersion()), nil
}

// session opens a session on a connection with room, opening a new
// connection when none has. release must be called once the session ends.
func (p *pool) session(ctx context.Context) (*ssh.Session, func(), error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		c := p.reserve()
		if c == nil {
			client, err := p.dialer.connect(ctx, p.target, p.cfg)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: %v", ErrConnectionLost, err)
			}
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				client.Close()
				return nil, nil, errors.New("connection pool closed")
			}
			p.add(client)
			p.mu.Unlock()
			continue
		}
		s, err := c.client.NewSession()
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
	}
}

// reserve picks a live connection with room and counts a session on it;
// nil means a new connection is needed.
func (p *pool) reserve() *conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	live := p.conns[:0]
	for _, c := range p.conns {
		if c.alive() {
			live = append(live, c)
		}
	}
	clear(p.conns[len(live):])
	p.conns = live
	for _, c := range p.conns {
		if c.limit == 0 || c.open < c.limit {
			c.open++
			return c
		}
	}
	return nil
}

func (p *pool) unreserve(c *conn) {
	p.mu.Lock()
	c.open--
	p.mu.Unlock()
}

// close closes every connection; sessions on them end.
func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, c := range p.conns {
		c.client.Close()
	}
	p.closeAgent()
}
