// Package sshpool is gpudispatch's SSH transport: it works out how to reach
// a host (Resolve: inventory entry, ssh_config, defaults, OpenSSH defaults;
// the ssh_config resolved by OpenSSH's own ssh -G where it is installed, so
// that Match, Include and first-value-wins are ssh's, else parsed here),
// checks host keys against known_hosts (unknown: refused unless accepting
// new keys; changed: always refused), and keeps a pool of connections per
// server that hands out sessions.
//
// A pool learns a connection's MaxSessions from the server's refusal and
// then opens another connection. Hosts that resolve to the same server but
// for their names (ssh_config aliases) share one pool (Pools): host keys are
// checked by address. The dialer shared by all pools allows at most
// startupsPerAddr (6) handshakes at once per address, so that sshd's
// MaxStartups (10) rarely drops one; a connection it drops anyway (closed
// before the server's version line) is dialed again after a jittered
// backoff within the connect timeout. It keeps one client per jump host.
// Every connection has an owner goroutine that sends keepalives and closes
// it when the server stops answering; Pools.Close closes them all.
//
// Health: a server is up while one of its connections lives. When the last
// one dies the pool redials at once, then with exponential backoff and
// jitter (long after a refused login or host key, for sshd's
// PerSourcePenalties); meanwhile Session fails at once with an error
// wrapping executor.ErrHostDown, and WaitUp blocks.
package sshpool
