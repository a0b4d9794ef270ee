package hosts

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gpudispatch/gpudispatch/inventory"
)

// Options configure how hosts are reached.
type Options struct {
	// ConnectTimeout bounds the TCP connect plus SSH handshake per host
	// (0: DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// Keepalive is how often connections are checked and jobs' wrappers
	// hear from the coordinator; a connection that does not answer within
	// two more intervals is closed, and a wrapper that hears nothing for
	// three kills its job (0: DefaultKeepalive).
	Keepalive time.Duration
	// Grace is the time between TERM and KILL for a stopped job (0:
	// DefaultGrace).
	Grace time.Duration
	// AcceptNewHostKeys records unknown host keys (--accept-new-host-keys).
	AcceptNewHostKeys bool
	// ProbeGPUs asks every host's nvidia-smi, not only `gpus: auto` ones,
	// and which runs hold their GPUs' locks.
	ProbeGPUs bool
	// LockDir is where GPU locks live on every host ("": DefaultLockDir).
	LockDir string
}

// HostState is what opening a host found.
type HostState struct {
	Host inventory.Host
	// Addr is user@host:port for SSH hosts, "local" for local ones.
	Addr string
	// Err is why the host cannot be used now, or nil.
	Err error
	// Retrying is set when Err is a failure to reach the host that may mend
	// (refused or timed-out connection, not a refused login or host key): the
	// host stays in the run, down, and its pool keeps trying to connect.
	Retrying bool
	// ServerVersion is the SSH server's banner.
	ServerVersion string
	// GPUs is what nvidia-smi reported (nil when it was not asked or failed);
	// GPUErr is why it failed.
	GPUs   []GPU
	GPUErr error
	// LockErr is why the GPUs' locks could not be looked at (ProbeGPUs).
	LockErr error
}

// Lab is the hosts of a run, opened.
type Lab struct {
	// Inventory holds the hosts of the run, with `gpus: auto` resolved: those
	// that are up and those that are Retrying.
	Inventory *inventory.Inventory
	// Runners runs jobs on them.
	Runners Set
	// States has one entry per inventory host, in inventory order.
	States []HostState
	dialer *dialer
	pools  []*pool
}

// Open connects to every host of inv at once. A host that refuses us (login,
// host key) or whose GPUs cannot be found is left out with the reason in its
// state; one that cannot be reached stays in, Retrying. An error means
// nothing could be tried (a broken ssh_config).
func Open(ctx context.Context, inv *inventory.Inventory, o Options) (*Lab, error) {
	// Only remote hosts need ssh_config: a local-only lab must run whatever
	// the user's ~/.ssh/config holds.
	if o.Keepalive <= 0 {
		o.Keepalive = DefaultKeepalive
	}
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.LockDir == "" {
		o.LockDir = DefaultLockDir
	}
	cfg := &sshConfig{}
	for _, h := range inv.Hosts {
		if !h.Local {
			var err error
			if cfg, err = loadSSHConfig(inv.SSHConfig); err != nil {
				return nil, err
			}
			break
		}
	}
	lab := &Lab{
		States: make([]HostState, len(inv.Hosts)),
		dialer: newDialer(o.ConnectTimeout, o.Keepalive),
	}
	runners := make([]Runner, len(inv.Hosts))
	pools := make([]*pool, len(inv.Hosts))
	var wg sync.WaitGroup
	for i, h := range inv.Hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lab.States[i], runners[i], pools[i] = open(ctx, inv, cfg, h, lab.dialer, o)
		}()
	}
	wg.Wait()
	usable := *inv
	usable.Hosts = nil
	lab.Runners = Set{}
	for i, st := range lab.States {
		if pools[i] != nil {
			lab.pools = append(lab.pools, pools[i])
		}
		if st.Err == nil || st.Retrying {
			usable.Hosts = append(usable.Hosts, st.Host)
			lab.Runners[st.Host.Name] = runners[i]
		}
	}
	lab.Inventory = &usable
	return lab, nil
}

// open readies one host: a runner for it, its GPUs, or why not.
func open(ctx context.Context, inv *inventory.Inventory, cfg *sshConfig, h inventory.Host, d *dialer, o Options) (HostState, Runner, *pool) {
	st := HostState{Host: h, Addr: "local"}
	sup := Supervision{Heartbeat: o.Keepalive, Grace: o.Grace}
	var r Runner = Local{Supervision: sup, LockDir: o.LockDir}
	var p *pool
	if !h.Local {
		t, err := resolve(inv, cfg, h, o.AcceptNewHostKeys)
		st.Addr = t.User + "@" + t.Addr()
		if t.Jump != nil {
			st.Addr += " via " + t.Jump.Name
		}
		if err != nil {
			st.Err = err
			return st, nil, nil
		}
		sshCfg, closeAgent, err := d.clientConfig(t)
		if err != nil {
			st.Err = err
			return st, nil, nil
		}
		// The pool keeps the agent connection: later connections sign with it.
		p = newPool(t, sshCfg, d, closeAgent)
		r = &Remote{name: h.Name, pool: p, supervision: sup, lockDir: o.LockDir}
		if st.ServerVersion, err = p.connect(ctx); err != nil {
			st.Err = fmt.Errorf("connect %s: %w", t.Addr(), err)
			// A host whose GPUs are still to be found cannot be given slots.
			if refused(err) || h.AutoGPUs {
				p.close()
				return st, nil, nil
			}
			st.Retrying = true
			return st, r, p
		}
	}
	if h.AutoGPUs || o.ProbeGPUs {
		st.GPUs, st.GPUErr = ProbeGPUs(ctx, r)
		if o.ProbeGPUs && st.GPUErr == nil {
			st.LockErr = ProbeLocks(ctx, r, o.LockDir, st.GPUs)
		}
		if h.AutoGPUs {
			switch {
			case st.GPUErr != nil:
				st.Err = fmt.Errorf("gpus: auto: %w", st.GPUErr)
			case len(st.GPUs) == 0:
				st.Err = fmt.Errorf("gpus: auto: nvidia-smi lists no GPU")
			}
			if st.Err != nil {
				if p != nil {
					p.close()
				}
				return st, nil, nil
			}
			st.Host.GPUs = nil
			for _, g := range st.GPUs {
				st.Host.GPUs = append(st.Host.GPUs, g.Index)
			}
			st.Host.AutoGPUs = false
		}
	}
	return st, r, p
}

// Absent lists the hosts that are not up, and why: down ones are in the run
// (Retrying) and may come back; left-out ones are not in it.
func (l *Lab) Absent() (down, leftOut map[string]error) {
	down, leftOut = map[string]error{}, map[string]error{}
	for _, st := range l.States {
		switch {
		case st.Retrying:
			down[st.Host.Name] = st.Err
		case st.Err != nil:
			leftOut[st.Host.Name] = st.Err
		}
	}
	return down, leftOut
}

// Close closes every connection.
func (l *Lab) Close() {
	for _, p := range l.pools {
		p.close()
	}
	l.dialer.close()
}
