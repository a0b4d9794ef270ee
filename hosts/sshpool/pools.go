package sshpool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Pools hands out one Pool per server to the hosts of a run: inventory
// hosts that resolve to the same target but for their names (ssh_config
// aliases of one server) share it, so that fifty aliases of two servers
// cost two handshakes. Host keys are checked by address, so nothing is lost.
// A pool lives while a host uses it.
type Pools struct {
	dialer *dialer

	mu    sync.Mutex
	pools map[string]*shared // by Target.Key
}

// shared is the pool of one server and how its first connection went.
type shared struct {
	p       *Pool
	ready   chan struct{} // closed once the first connection attempt ended
	version string        // the server's banner
	err     error         // why the first attempt failed
	users   int           // hosts of the run that use it
}

// NewPools returns the pools of a run, whose connections are made within
// connectTimeout (TCP connect plus handshake) and checked every keepalive.
func NewPools(connectTimeout, keepalive time.Duration) *Pools {
	return &Pools{dialer: newDialer(connectTimeout, keepalive), pools: map[string]*shared{}}
}

// Acquire returns the pool of t's server, made and connected by the first
// host to ask, with the server's banner; the caller must Release it. When
// the pool's first connection failed, the pool is returned with the error:
// it keeps trying in the background. No pool (and why) means none could be
// made: nothing to release.
func (ps *Pools) Acquire(ctx context.Context, t Target) (p *Pool, version string, err error) {
	key := t.Key()
	ps.mu.Lock()
	sp, ok := ps.pools[key]
	if !ok {
		sp = &shared{ready: make(chan struct{})}
		ps.pools[key] = sp
	}
	sp.users++
	ps.mu.Unlock()
	if ok {
		select {
		case <-sp.ready:
		case <-ctx.Done():
			ps.Release(t)
			return nil, "", ctx.Err()
		}
		if sp.p == nil {
			ps.Release(t)
			return nil, "", sp.err
		}
		return sp.p, sp.version, sp.err
	}
	defer close(sp.ready)
	sshCfg, closeAgent, err := ps.dialer.clientConfig(t)
	if err != nil {
		// A name that resolves nowhere is said first, as ssh does: no key
		// would help a typo.
		err = cmp.Or(ps.dialer.unresolved(ctx, t), err)
		sp.err = err
		ps.Release(t)
		return nil, "", err
	}
	// The pool keeps the agent connection: later connections sign with it.
	sp.p = newPool(t, sshCfg, ps.dialer, closeAgent)
	if sp.version, err = sp.p.connect(ctx); err != nil {
		sp.err = err
		if !errors.As(err, new(*ReasonError)) {
			sp.err = fmt.Errorf("connect %s: %w", t.Addr(), err)
		}
	}
	return sp.p, sp.version, sp.err
}

// Release is a host letting go of the pool of t's server: the last one
// closes it.
func (ps *Pools) Release(t Target) {
	key := t.Key()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	sp := ps.pools[key]
	if sp == nil {
		return
	}
	if sp.users--; sp.users > 0 {
		return
	}
	delete(ps.pools, key)
	if sp.p != nil {
		sp.p.Close()
	}
}

// Close closes every pool's connections and the jump hosts'.
func (ps *Pools) Close() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, sp := range ps.pools {
		if sp.p != nil {
			sp.p.Close()
		}
	}
	ps.dialer.close()
}
