package connlimit

import (
	"container/list"
	"context"
	"net"
	"sync"
	"sync/atomic"
)

// Listener is a net.Listener that keeps at most a fixed number of its
// connections open.
type Listener struct {
	net.Listener
	max int

	mu   sync.Mutex
	open *list.List // of *conn, oldest first
}

// New caps l at most open connections (at least 1).
func New(l net.Listener, most int) *Listener {
	return &Listener{Listener: l, max: max(most, 1), open: list.New()}
}

// Accept waits for the next connection, making room for it as the package
// doc says.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		nc := &conn{Conn: c, l: l}
		l.mu.Lock()
		var evict *conn
		if l.open.Len() >= l.max {
			for e := l.open.Front(); e != nil; e = e.Next() {
				if old := e.Value.(*conn); !old.trusted.Load() {
					evict = old
					break
				}
			}
			if evict == nil {
				l.mu.Unlock()
				c.Close()
				continue
			}
			l.forget(evict)
		}
		nc.elem = l.open.PushBack(nc)
		l.mu.Unlock()
		if evict != nil {
			evict.Conn.Close()
		}
		return nc, nil
	}
}

// Open is how many connections are open now.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open.Len()
}

// forget drops c from the open list; l.mu is held.
func (l *Listener) forget(c *conn) {
	if c.elem != nil {
		l.open.Remove(c.elem)
		c.elem = nil
	}
}

// conn is a connection the Listener counts until it is closed.
type conn struct {
	net.Conn
	l       *Listener
	elem    *list.Element // guarded by l.mu; nil once forgotten
	trusted atomic.Bool
}

func (c *conn) Close() error {
	c.l.mu.Lock()
	c.l.forget(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// connKey is the context key under which Context keeps a connection.
type connKey struct{}

// Context is for http.Server.ConnContext: it keeps the connection in the
// requests' context, for Trust.
func Context(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// Trust marks the connection that ctx's request came on (see Context) as
// trusted: it is not closed to make room for others.
func Trust(ctx context.Context) {
	if c, ok := ctx.Value(connKey{}).(*conn); ok {
		c.trusted.Store(true)
	}
}
