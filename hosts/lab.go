package hosts

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/gpulock"
	"github.com/gpudispatch/gpudispatch/hosts/jobshell"
	"github.com/gpudispatch/gpudispatch/hosts/slurm"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
	"github.com/gpudispatch/gpudispatch/hosts/sshpool"

	"github.com/gpudispatch/gpudispatch/inventory"
)

// Options configure how hosts are reached.
type Options struct {
	// ConnectTimeout bounds the TCP connect plus SSH handshake per host
	// (0: DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// Keepalive is how often connections are checked, and a host that was
	// cut off is looked at again; a connection that does not answer within
	// two more intervals is closed (0: DefaultKeepalive). A job runs on
	// whatever its connection does.
	Keepalive time.Duration
	// Grace is the time between TERM and KILL for a stopped job (0:
	// DefaultGrace).
	Grace time.Duration
	// KeepCode is how long hosts keep snapshots of code that no run used
	// (0: codestore.DefaultKeep).
	KeepCode time.Duration
	// AcceptNewHostKeys records unknown host keys (--accept-new-host-keys).
	AcceptNewHostKeys bool
	// ProbeGPUs asks every host's nvidia-smi, not only `gpus: auto` ones,
	// and which runs hold their GPUs' locks.
	ProbeGPUs bool
	// LockDir is where GPU locks live on every host ("": gpulock.DefaultDir).
	LockDir string
	// NoShare keeps the run out of fair share (gpulock.Lockers.NoShare):
	// it keeps the GPUs it frees, and asks no run to let go of its own.
	NoShare bool
	// ProbeTimeout bounds each look at a host's GPUs (nvidia-smi, their
	// locks) (0: DefaultProbeTimeout).
	ProbeTimeout time.Duration
	// SetupTimeout bounds a job shell's set-up on a host: its login
	// profile, workdir, modules, conda env, venv and setup (0:
	// DefaultSetupTimeout).
	SetupTimeout time.Duration
	// LostAfter is how long a host that stopped answering keeps its jobs,
	// presumed running, while this coordinator is awake and reaches other
	// hosts; then they are lost (0: DefaultLostAfter).
	LostAfter time.Duration
	// Rejoin keeps opening a `gpus: auto` host that is down or sick (its
	// nvidia-smi fails or hangs) at start, every RejoinEvery, until it
	// answers: it stays pending meanwhile, as a host with listed GPUs
	// stays in, down, and comes back. Unset (hosts, a dry run), it is left
	// out with the reason.
	Rejoin bool
	// Run is the run's id, for a run: each host's GPU lock holder for it
	// is started as the host is opened, and checks its lock dir (hosts,
	// a dry run: "", and a check of its own).
	Run string
	// WarmCode starts, as each host that syncs code is opened, the shell
	// of its code store, so that the first snapshot shipped there waits
	// for no session and no bash: for a caller about to ship. Unset, a
	// host holds no session it may never use.
	WarmCode bool
}

// Defaults for Options: a dead connection is noticed within about 30 s, a
// silent host's jobs are lost after 5 min, and a job gets 10 s to exit
// after TERM.
const (
	DefaultKeepalive      = 10 * time.Second
	DefaultGrace          = 10 * time.Second
	DefaultConnectTimeout = 10 * time.Second
	// DefaultProbeTimeout is longer than nvidia-smi takes on a busy
	// 8-GPU server (a second or two), far shorter than one stuck in a
	// driver that lost a GPU.
	DefaultProbeTimeout = 20 * time.Second
	// DefaultSetupTimeout is far longer than a conda env takes to activate
	// from a slow NFS home (seconds), far shorter than a sweep waits for a
	// profile that never finishes.
	DefaultSetupTimeout = 2 * time.Minute
	// DefaultLostAfter is Slurm's SlurmdTimeout: a host is not called
	// dead for less.
	DefaultLostAfter = 5 * time.Minute
)

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
	GPUs   []executor.GPU
	GPUErr error
	// LockErr is why the GPUs' locks could not be looked at (ProbeGPUs).
	LockErr error
	// Waiting are the runs that wait for the host's GPUs held by others
	// (fair share), each "run ID of USER@HOST" (ProbeGPUs).
	Waiting []string
	// Kept is the user's jobs that the host keeps with no coordinator (asked
	// with ProbeGPUs); KeptErr is why they could not be listed.
	Kept    []jobshell.Kept
	KeptErr error
	// Slurm is what a cluster's sinfo and squeue said, for a host with a
	// slurm block.
	Slurm *slurm.Info
	// Warnings say what of the host's ssh_config gpudispatch does not
	// follow.
	Warnings []string
	// mends is set when Err is one that may mend by itself: the host did
	// not answer (as for Retrying), or its nvidia-smi failed or hung.
	mends bool
}

// RejoinEvery is how often a `gpus: auto` host that is down or sick at
// start is opened again (Options.Rejoin).
const RejoinEvery = 10 * time.Second

// Lab is the hosts of a run. It runs jobs on them (it implements
// executor.Executor) and takes in hosts added to the inventory (Update).
//
// A host is opened in the background (Start): until it is settled (up,
// down and retried, or left out) it is pending. The Executor's calls for a
// pending host wait for it to settle, so no caller has to know.
type Lab struct {
	opts Options
	// cfg is the ssh_config, read once a remote host needs it.
	cfg       *sshpool.Config
	cfgLoaded bool
	pools     *sshpool.Pools
	// stop ends the opening of hosts; opening counts the hosts being
	// opened, which Close waits for; turns bounds how many are opened at
	// once (openAtOnce).
	stop    context.CancelFunc
	opening sync.WaitGroup
	turns   chan struct{}

	mu sync.RWMutex
	// inv is the inventory as last given (Start, Update).
	inv *inventory.Inventory
	// runners holds every host that was ever in the run: a host removed from
	// the inventory keeps its runner, so that its running jobs finish.
	runners map[string]Runner
	// pending holds the hosts being opened, each with a channel closed once
	// it is settled, and what is being done to open it.
	pending map[string]chan struct{}
	doing   map[string]Opening
	// autoGPUs holds the GPUs found on the `gpus: auto` hosts.
	autoGPUs map[string][]int
	// probes holds, per host, the look at its GPUs under way, if any.
	probes probes
	// untried holds the hosts of Start not yet settled nor found down or
	// sick (Options.Rejoin); tried is closed once none is left.
	untried map[string]bool
	tried   chan struct{}
}

// openAtOnce is how many hosts are opened at once. A handshake and the
// first looks at a host are CPU work at both ends: a hundred at once share
// the CPU, and the first host would be ready only when all are. A host
// that hangs holds a turn until --connect-timeout.
const openAtOnce = 8

// Start opens the hosts of inv in the background, openAtOnce at a time in
// inventory order, and returns without waiting for any: each host's state comes on the channel as soon
// as the host is settled (up; down and Retrying; or left out with the
// reason), and the channel is closed after the last. A host that refuses
// us (login, host key) or whose GPUs cannot be found is left out; one that
// cannot be reached stays in, Retrying. An error means nothing could be
// tried (a broken ssh_config).
func Start(ctx context.Context, inv *inventory.Inventory, o Options) (*Lab, <-chan HostState, error) {
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
		o.LockDir = gpulock.DefaultDir
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = DefaultProbeTimeout
	}
	if o.SetupTimeout <= 0 {
		o.SetupTimeout = DefaultSetupTimeout
	}
	lab := &Lab{opts: o, cfg: &sshpool.Config{}, pools: sshpool.NewPools(o.ConnectTimeout, o.Keepalive),
		runners: map[string]Runner{}, pending: map[string]chan struct{}{}, doing: map[string]Opening{}, autoGPUs: map[string][]int{},
		turns: make(chan struct{}, openAtOnce), untried: map[string]bool{}, tried: make(chan struct{})}
	for _, h := range inv.Hosts {
		lab.untried[h.Name] = true
	}
	if len(lab.untried) == 0 {
		close(lab.tried)
	}
	if err := lab.loadSSHConfig(inv); err != nil {
		return nil, nil, err
	}
	ctx, lab.stop = context.WithCancel(ctx)
	lab.inv = inv
	return lab, lab.openAll(ctx, inv, inv.Hosts), nil
}

// Collect waits for the states of hs that settled brings (see Start), and
// returns them in hs's order.
func Collect(hs []inventory.Host, settled <-chan HostState) []HostState {
	byName := map[string]HostState{}
	for st := range settled {
		byName[st.Host.Name] = st
	}
	states := make([]HostState, 0, len(hs))
	for _, h := range hs {
		states = append(states, byName[h.Name])
	}
	return states
}

// loadSSHConfig reads inv's ssh_config once a remote host needs it: a
// local-only lab must run whatever the user's ~/.ssh/config holds.
func (l *Lab) loadSSHConfig(inv *inventory.Inventory) error {
	if l.cfgLoaded {
		return nil
	}
	for _, h := range inv.Hosts {
		if !h.Local {
			cfg, err := sshpool.LoadConfig(inv.SSHConfig)
			if err != nil {
				return err
			}
			l.cfg, l.cfgLoaded = cfg, true
			return nil
		}
	}
	return nil
}

// openAll opens hs at once, each on a goroutine of its own, and sends each
// one's state once it is settled; the channel is closed after the last.
func (l *Lab) openAll(ctx context.Context, inv *inventory.Inventory, hs []inventory.Host) <-chan HostState {
	settled := make(chan HostState, len(hs))
	var all sync.WaitGroup
	l.mu.Lock()
	for _, h := range hs {
		done := make(chan struct{})
		l.pending[h.Name] = done
		l.doing[h.Name] = Opening{Doing: "waiting for its turn (hosts are opened " + strconv.Itoa(cap(l.turns)) + " at a time)", Since: time.Now()}
		all.Add(1)
		l.opening.Go(func() {
			defer all.Done()
			st, r := l.openUntil(ctx, inv, h)
			l.mu.Lock()
			if st.Err == nil || st.Retrying {
				l.runners[h.Name] = r
				if h.AutoGPUs {
					l.autoGPUs[h.Name] = st.Host.GPUs
				}
			}
			delete(l.pending, h.Name)
			delete(l.doing, h.Name)
			l.mu.Unlock()
			close(done)
			settled <- st
			// After its state is sent: one waiting on Tried finds it.
			l.triedOnce(h.Name)
		})
	}
	l.mu.Unlock()
	go func() {
		all.Wait()
		close(settled)
	}()
	return settled
}

// openUntil opens h in its turn; with Options.Rejoin, a `gpus: auto` host
// that is down or sick is opened again every RejoinEvery until it answers
// or ctx ends, pending meanwhile, with the reason in what is being done.
func (l *Lab) openUntil(ctx context.Context, inv *inventory.Inventory, h inventory.Host) (HostState, Runner) {
	for {
		var st HostState
		var r Runner
		select {
		case l.turns <- struct{}{}:
			st, r = l.open(ctx, inv, h)
			<-l.turns
		case <-ctx.Done():
			return HostState{Host: h, Err: ctx.Err()}, nil
		}
		if !l.opts.Rejoin || !h.AutoGPUs || !st.mends || ctx.Err() != nil {
			return st, r
		}
		l.step(h.Name, st.Addr, fmt.Sprintf("down or sick, tried again every %s: %v", RejoinEvery, st.Err))
		l.triedOnce(h.Name)
		select {
		case <-time.After(RejoinEvery):
		case <-ctx.Done():
			return HostState{Host: h, Addr: st.Addr, Err: st.Err}, nil
		}
	}
}

// triedOnce notes that the host named name was tried once: settled, or
// found down or sick and tried again in the background.
func (l *Lab) triedOnce(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.untried[name] {
		return
	}
	delete(l.untried, name)
	if len(l.untried) == 0 {
		close(l.tried)
	}
}

// Tried is closed once every host of Start was tried once: settled, or
// (Options.Rejoin) found down or sick and tried again in the background.
// A caller that waits for a host to be up learns there that none is.
func (l *Lab) Tried() <-chan struct{} { return l.tried }

// Update makes inv the lab's inventory: hosts it adds are opened (at once)
// and their states returned once all are settled; hosts it keeps keep
// their connections and the GPUs `gpus: auto` found, and take inv's GPU
// list and settings otherwise. Hosts it drops keep their runners, so that
// their running jobs finish; the run gives them no new job. Connection
// settings of a host already in the run do not change.
func (l *Lab) Update(ctx context.Context, inv *inventory.Inventory) (added []HostState, err error) {
	if err := l.loadSSHConfig(inv); err != nil {
		return nil, err
	}
	var fresh []inventory.Host
	l.mu.Lock()
	l.inv = inv
	for _, h := range inv.Hosts {
		if l.runners[h.Name] == nil && l.pending[h.Name] == nil {
			fresh = append(fresh, h)
		}
	}
	l.mu.Unlock()
	return Collect(fresh, l.openAll(ctx, inv, fresh)), nil
}

// Usable is the lab's inventory as a run may use it now: the hosts that
// are up or Retrying, `gpus: auto` resolved, and the hosts still pending,
// as the inventory gives them (a pending `gpus: auto` host has no GPU yet),
// which opening names. Left-out hosts are not in it.
func (l *Lab) Usable() (usable *inventory.Inventory, opening []string) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	inv := *l.inv
	inv.Hosts = nil
	for _, h := range l.inv.Hosts {
		switch {
		case l.runners[h.Name] != nil:
			if h.AutoGPUs {
				h.GPUs, h.AutoGPUs = l.autoGPUs[h.Name], false
			}
		case l.pending[h.Name] != nil:
			opening = append(opening, h.Name)
		default:
			continue // left out
		}
		inv.Hosts = append(inv.Hosts, h)
	}
	return &inv, opening
}

// Opening is a host being opened: what is being done, since when.
type Opening struct {
	Name string
	// Addr is user@host:port for SSH hosts, "local" for local ones, once
	// known.
	Addr  string
	Doing string // "connecting", "asking nvidia-smi for its GPUs"…
	Since time.Time
}

// Pending lists the hosts still being opened, in inventory order.
func (l *Lab) Pending() []Opening {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out []Opening
	for _, h := range l.inv.Hosts {
		if l.pending[h.Name] != nil {
			o := l.doing[h.Name]
			o.Name = h.Name
			out = append(out, o)
		}
	}
	return out
}

// step says what is being done to open host h, reached at addr.
func (l *Lab) step(h, addr, doing string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.doing[h] = Opening{Addr: addr, Doing: doing, Since: time.Now()}
}

// open readies one host: a runner for it, its GPUs, or why not.
func (l *Lab) open(ctx context.Context, inv *inventory.Inventory, h inventory.Host) (st HostState, opened Runner) {
	o := l.opts
	st = HostState{Host: h, Addr: "local"}
	sup := jobshell.Supervision{Heartbeat: o.Keepalive, Grace: o.Grace, SetupLimit: o.SetupTimeout, KeepCode: o.KeepCode}
	switch {
	case h.Local:
		// This machine's jobs get the coordinator's environment as it is,
		// as xargs would give it: no profile resets an activated env.
		sup.Login = jobshell.LoginNone
	case h.Login == inventory.LoginPerJob:
		sup.Login = jobshell.LoginPerJob
	}
	// A GPU lock holder takes the GPUs the run just looked at.
	seen := func() ([]executor.GPU, bool) { return l.probes.seen(h.Name) }
	var r machine = &Local{Supervision: sup, LockDir: o.LockDir, NoShare: o.NoShare, Name: h.Name, ProbeTimeout: o.ProbeTimeout, seen: seen}
	// A host left out (no Runner) lets go of its pool.
	release := func() {}
	defer func() {
		if opened == nil {
			release()
		}
	}()
	var login spawn.Func = spawn.Local
	waitUp := func(context.Context) error { return nil }
	l.step(h.Name, st.Addr, "starting")
	if h.Local {
		if err := spawn.LocalSupported(); err != nil {
			st.Err = err
			return st, nil
		}
	} else {
		t, err := sshpool.Resolve(inv, l.cfg, h, o.AcceptNewHostKeys)
		if len(t.Unhonoured) > 0 {
			st.Warnings = append(st.Warnings, fmt.Sprintf("%s: ssh_config sets %s, which gpudispatch does not follow: it may connect otherwise than ssh %s does", h.Name, strings.Join(t.Unhonoured, ", "), h.Name))
		}
		st.Addr = t.User + "@" + t.Addr()
		if t.Jump != nil {
			st.Addr += " via " + t.Jump.Name
		}
		if err != nil {
			st.Err = err
			return st, nil
		}
		l.step(h.Name, st.Addr, "connecting")
		p, version, err := l.pools.Acquire(ctx, t)
		if p == nil {
			st.Err = err
			return st, nil
		}
		release = func() { l.pools.Release(t) }
		quiet := &silence{lostAfter: cmp.Or(o.LostAfter, DefaultLostAfter), tick: cmp.Or(o.Keepalive, DefaultKeepalive),
			othersAnswer: func() bool { return l.othersAnswer(h.Name) }}
		rem := newRemote(h.Name, p, sup, o.LockDir, o.NoShare, o.ProbeTimeout, quiet, seen)
		r, login, waitUp = rem, rem.spawn, p.WaitUp
		if st.ServerVersion = version; err != nil {
			st.Err = err
			// A host whose GPUs are still to be found cannot be given slots
			// (Options.Rejoin opens it again later), and a name that
			// resolves nowhere is a typo, or a name only a VPN knows: left
			// out at once, so that its pinned jobs are rejected rather than
			// wait for it.
			if sshpool.Refused(err) || sshpool.NoSuchHost(err) || h.AutoGPUs {
				st.mends = !sshpool.Refused(err) && !sshpool.NoSuchHost(err)
				return st, nil
			}
			st.Retrying = true
			return st, r
		}
	}
	if h.Slurm != nil {
		c := slurm.New(slurm.Options{Name: h.Name, Slurm: *h.Slurm, Spawn: login, WaitUp: waitUp,
			Heartbeat: o.Keepalive, Grace: o.Grace, KeepCode: o.KeepCode})
		// A bad partition, account or option leaves the cluster out; a login
		// node that cannot be reached now is down, as any host.
		l.step(h.Name, st.Addr, "asking Slurm whether it takes jobs")
		info, err := c.Check(ctx)
		st.Slurm = &info
		if err != nil {
			st.Err = fmt.Errorf("%s: %w", h.Name, err)
			if errors.Is(err, executor.ErrHostDown) {
				st.Retrying = true
				return st, c
			}
			return st, nil
		}
		return st, c
	}
	if rem, ok := r.(*Remote); ok {
		// Every use of a host looks at its GPUs first (a run, to know which
		// are idle; hosts and a dry run, to list them), through a job shell
		// that sets up nothing: it starts now, beside the checks below, so
		// that the look waits for no session and no login profile.
		rem.shells.Warm(ctx, executor.Prelude{})
	}
	// What the host keeps with no coordinator, and whether it would, and
	// whether another user of the host could turn the run's GPU locks
	// against it (with a lock dir they could redirect, the host is left
	// out). A run's GPU lock holder there starts now, lists the jobs
	// first, then checks the lock dir: no session for either. Else the
	// lister is a session of its own, beside the looks below, which do
	// not depend on it (a host left out below does not wait for its
	// answer: it ends with the host's connection, or on its own).
	type keptAnswer struct {
		report jobshell.KeptReport
		err    error
	}
	kept := make(chan keptAnswer, 1)
	l.step(h.Name, st.Addr, "checking its GPU lock dir")
	if o.Run != "" {
		var report jobshell.KeptReport
		first := gpulock.Prologue{Script: jobshell.KeptScript, Args: jobshell.KeptArgs(o.ProbeTimeout), Each: report.Add}
		if err := r.startLocks(ctx, o.Run, first); err != nil {
			st.Err = err
			return st, nil
		}
		kept <- keptAnswer{report: report}
	} else {
		go func() {
			r, err := jobshell.ListKept(ctx, login, o.ProbeTimeout)
			kept <- keptAnswer{r, err}
		}()
		if err := r.checkLockDir(ctx); err != nil {
			st.Err = err
			return st, nil
		}
	}
	if rem, ok := r.(*Remote); ok && h.Sync != "" && o.WarmCode {
		// Its code store's shell starts while the host is looked at.
		rem.shells.WarmCode()
	}
	if h.AutoGPUs || o.ProbeGPUs {
		l.step(h.Name, st.Addr, "asking nvidia-smi for its GPUs")
		st.GPUs, st.GPUErr = l.probes.gpus(ctx, h.Name, r, o.ProbeTimeout)
		if o.ProbeGPUs && st.GPUErr == nil {
			st.Waiting, st.LockErr = l.probes.locks(ctx, h.Name, r, o.LockDir, st.GPUs, o.ProbeTimeout)
		}
		if h.AutoGPUs {
			switch {
			case errors.Is(st.GPUErr, executor.ErrProbeTimeout):
				st.Err = fmt.Errorf("gpus: auto: %w: its GPUs are unknown, so the host is left out of this run", st.GPUErr)
			case st.GPUErr != nil:
				st.Err = fmt.Errorf("gpus: auto: %w", st.GPUErr)
			case len(st.GPUs) == 0:
				st.Err = fmt.Errorf("gpus: auto: nvidia-smi lists no GPU")
			}
			if st.Err != nil {
				// A driver that fails or hangs may mend; no nvidia-smi at
				// all, or no GPU, will not.
				st.mends = st.GPUErr != nil && !errors.Is(st.GPUErr, ErrNoNvidiaSMI)
				return st, nil
			}
			st.Host.GPUs = nil
			for _, g := range st.GPUs {
				if g.Error != "" {
					// Left out alone: the host's other GPUs stay.
					st.Warnings = append(st.Warnings, fmt.Sprintf("%s: GPU %d is left out: nvidia-smi says %q", h.Name, g.Index, g.Error))
					continue
				}
				st.Host.GPUs = append(st.Host.GPUs, g.Index)
			}
			if len(st.Host.GPUs) == 0 {
				st.Err = fmt.Errorf("gpus: auto: nvidia-smi cannot reach any of its GPUs: %s", st.GPUs[0].Error)
				return st, nil
			}
			st.Host.AutoGPUs = false
		}
	}
	l.step(h.Name, st.Addr, "listing the jobs it keeps")
	k := <-kept
	st.Kept, st.KeptErr = k.report.Jobs, k.err
	switch {
	case k.report.KillsAtLogout:
		st.Warnings = append(st.Warnings, fmt.Sprintf("%s: systemd there kills your processes when your last session ends (KillUserProcesses=yes) and you have no linger: a job left running with no gpudispatch would die then; run loginctl enable-linger on %s", h.Name, h.Name))
	case k.report.LogindSilent:
		st.Warnings = append(st.Warnings, fmt.Sprintf("%s: its logind did not answer within %s (--probe-timeout): whether systemd there kills your processes when your last session ends is not known; loginctl enable-linger on %s makes sure it does not", h.Name, o.ProbeTimeout, h.Name))
	}
	return st, r
}

// machine is a host's Runner as open readies it.
type machine interface {
	Runner
	// checkLockDir checks that the machine's lock dir is one no other user
	// can turn against this one, and makes it when it is missing.
	checkLockDir(ctx context.Context) error
	// startLocks starts run's GPU lock holder there, which takes first,
	// then checks the lock dir as checkLockDir does
	// (gpulock.Lockers.Start): the run's first lock finds it ready.
	startLocks(ctx context.Context, run string, first gpulock.Prologue) error
}

// Absent lists the hosts of states that are not up, and why: down ones
// are in the run (Retrying) and may come back; left-out ones are not in it.
func Absent(states []HostState) (down, leftOut map[string]error) {
	down, leftOut = map[string]error{}, map[string]error{}
	for _, st := range states {
		switch {
		case st.Retrying:
			down[st.Host.Name] = st.Err
		case st.Err != nil:
			leftOut[st.Host.Name] = st.Err
		}
	}
	return down, leftOut
}

// Close ends the opening of hosts, the job shells, and every connection.
func (l *Lab) Close() {
	if l.stop != nil {
		l.stop()
	}
	l.opening.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	// All at once: a runner may wait a while as it closes (a cluster's
	// agent, a content store's work on its host), and a run with several
	// sick hosts must not wait for each in turn.
	var wg sync.WaitGroup
	for _, r := range l.runners {
		if c, ok := r.(interface{ Close() }); ok {
			wg.Go(c.Close)
		}
	}
	wg.Wait()
	l.pools.Close()
}

// runner is host's runner, or nil. A pending host is waited for until it
// is settled, or ctx ends.
func (l *Lab) runner(ctx context.Context, host string) Runner {
	l.mu.RLock()
	r, wait := l.runners[host], l.pending[host]
	l.mu.RUnlock()
	if r != nil || wait == nil {
		return r
	}
	select {
	case <-wait:
	case <-ctx.Done():
		return nil
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.runners[host]
}

// Runner returns the runner of host, or nil when it is not in the run; a
// pending host is waited for.
func (l *Lab) Runner(host string) Runner { return l.runner(context.Background(), host) }

// othersAnswer reports whether a remote host of the run other than name has
// a live connection.
func (l *Lab) othersAnswer(name string) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	for n, r := range l.runners {
		if rem, ok := r.(*Remote); ok && n != name && rem.pool.Live() {
			return true
		}
	}
	return false
}
