package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/gpudispatch/gpudispatch/dispatch"
	"github.com/gpudispatch/gpudispatch/hosts"
	"github.com/gpudispatch/gpudispatch/hosts/codestore"
	"github.com/gpudispatch/gpudispatch/hosts/gpulock"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// labOptions say which hosts to use and how to reach them; run and hosts
// share them.
type labOptions struct {
	inventory string
	gpus      []int // --gpus (run only)
	hosts     []string
	connect   time.Duration
	keepalive time.Duration
	probe     time.Duration // --probe-timeout
	setup     time.Duration // --setup-timeout
	lostAfter time.Duration // --lost-after
	acceptNew bool
	lockDir   string
	keep      time.Duration // --keep
}

func addLabFlags(f *pflag.FlagSet) {
	f.StringP("inventory", "i", "", "inventory file (YAML, TOML or JSON by extension)")
	f.String("hosts", "", "use only these inventory hosts (comma-separated)")
	f.Duration("connect-timeout", hosts.DefaultConnectTimeout, "TCP connect plus SSH handshake limit per host")
	f.Bool("accept-new-host-keys", false, "record the keys of hosts known_hosts does not know yet (as OpenSSH's accept-new); changed keys are always refused")
	f.Duration("probe-timeout", hosts.DefaultProbeTimeout, "how long a host's nvidia-smi (and its GPU locks) may take to answer; one that does not is sick: no new job there until it answers (each ask of its logind has the same limit)")
	f.Duration("setup-timeout", hosts.DefaultSetupTimeout, "how long a job shell's set-up on a host (its login profile, workdir, modules, conda env, venv, setup) may take; one that does not finish is stopped, and the host takes no job until it is tried again")
	f.Duration("keepalive", hosts.DefaultKeepalive, "how often connections are checked for life; a dead connection is noticed within about 3 times this")
	f.Duration("lost-after", hosts.DefaultLostAfter, "how long a host that stopped answering keeps its jobs, presumed running, while this coordinator is awake and reaches other hosts; then they are lost and run elsewhere")
	f.Duration("keep", codestore.DefaultKeep, "how long snapshots of code (--sync) that no run used are kept, on the hosts and here; the next run removes older ones")
	f.String("lock-dir", gpulock.DefaultDir, "where GPU locks live on every host: a directory of root's or yours, sticky if everyone may write in it; every run that must not share GPUs must use the same one")
}

func readLabOptions(v *viper.Viper) (labOptions, error) {
	o := labOptions{
		inventory: v.GetString("inventory"),
		connect:   v.GetDuration("connect-timeout"),
		keepalive: v.GetDuration("keepalive"),
		probe:     v.GetDuration("probe-timeout"),
		setup:     v.GetDuration("setup-timeout"),
		lostAfter: v.GetDuration("lost-after"),
		acceptNew: v.GetBool("accept-new-host-keys"),
		lockDir:   v.GetString("lock-dir"),
		keep:      v.GetDuration("keep"),
	}
	if h := v.GetString("hosts"); h != "" {
		o.hosts = strings.FieldsFunc(h, func(r rune) bool { return r == ',' || r == ' ' })
	}
	if o.connect <= 0 || o.keepalive <= 0 || o.probe <= 0 || o.setup <= 0 || o.lostAfter <= 0 || o.keep <= 0 {
		return o, usageError("--connect-timeout, --keepalive, --probe-timeout, --setup-timeout, --lost-after and --keep: want a positive duration")
	}
	if !strings.HasPrefix(o.lockDir, "/") {
		return o, usageError("--lock-dir %q: want an absolute path (it is a path on every host)", o.lockDir)
	}
	return o, nil
}

// loadInventory finds the lab: --inventory, --gpus, the default places, and
// last this machine's GPUs as nvidia-smi lists them.
func loadInventory(o labOptions) (*inventory.Inventory, error) {
	path := o.inventory
	switch {
	case path != "":
	case o.gpus != nil:
		return inventory.Local(o.gpus), nil
	default:
		found, err := inventory.Find()
		if err != nil {
			return nil, usageError("looking for an inventory: %v", err)
		}
		if found == "" {
			inv := inventory.Local(nil)
			inv.Hosts[0].AutoGPUs = true
			return inv, nil
		}
		path = found
	}
	inv, err := inventory.Load(path)
	if err != nil {
		return nil, usageError("%v", err)
	}
	if err := keepHosts(inv, o.hosts); err != nil {
		return nil, usageError("%v", err)
	}
	return inv, nil
}

// keepHosts keeps only the hosts --hosts names, when it names some.
func keepHosts(inv *inventory.Inventory, names []string) error {
	if names == nil {
		return nil
	}
	var keep []inventory.Host
	for _, name := range names {
		h := inv.HostNamed(name)
		if h == nil {
			return fmt.Errorf("--hosts: %s is not a host of %s", name, inv.File)
		}
		keep = append(keep, *h)
	}
	inv.Hosts = keep
	return nil
}

// reloadInterval is how often the inventory file is looked at during a run:
// an edit takes effect within about three of these (the promise: within 2 s).
const reloadInterval = 400 * time.Millisecond

// labUpdates sends a run what changes in its lab, one change at a time,
// each with the hosts as the lab has them then (so that none undoes an
// earlier one): hosts that finish being opened, and edits of the
// inventory file.
type labUpdates struct {
	lab *hosts.Lab
	o   labOptions
	// sync is --sync, which an edit does not undo; code takes the
	// snapshots of the directories an edit names for sync.
	sync string
	code *snapshots
	mu   sync.Mutex
	ch   chan dispatch.Update
}

func (u *labUpdates) send(ctx context.Context, upd dispatch.Update) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if upd.Err == nil {
		upd.Inventory, _ = u.lab.Usable()
	}
	select {
	case u.ch <- upd:
	case <-ctx.Done():
	}
}

// opened sends each host of settled as it is settled, until ctx ends.
func (u *labUpdates) opened(ctx context.Context, settled <-chan hosts.HostState) {
	for {
		select {
		case st, ok := <-settled:
			if !ok {
				return
			}
			upd := dispatch.Update{Opened: []string{st.Host.Name}, Warnings: st.Warnings}
			upd.Down, upd.LeftOut = absent([]hosts.HostState{st})
			u.send(ctx, upd)
		case <-ctx.Done():
			return
		}
	}
}

// watch sends each edit of the inventory file, with the hosts it adds
// opened, until ctx ends.
func (u *labUpdates) watch(ctx context.Context, inv *inventory.Inventory) {
	inventory.Watch(ctx, inv.File, inv.Digest, reloadInterval, func(inv *inventory.Inventory, err error) {
		var upd dispatch.Update
		if err == nil {
			err = keepHosts(inv, u.o.hosts)
		}
		if err == nil {
			syncTo(inv, u.sync)
			upd.Snapshots, err = u.code.forHosts(ctx, inv)
		}
		if err == nil {
			var added []hosts.HostState
			if added, err = u.lab.Update(ctx, inv); err == nil {
				upd.Down, upd.LeftOut = absent(added)
			}
		}
		upd.Err = err
		u.send(ctx, upd)
	})
}

// absent is hosts.Absent with each reason naming the host's address.
func absent(states []hosts.HostState) (down, leftOut map[string]error) {
	down, leftOut = hosts.Absent(states)
	for _, st := range states {
		for _, m := range []map[string]error{down, leftOut} {
			if why := m[st.Host.Name]; why != nil {
				m[st.Host.Name] = fmt.Errorf("%s: %w", st.Addr, why)
			}
		}
	}
	return down, leftOut
}

// settleAll waits for every host of settled, in inv's order; on a terminal
// it keeps a line on s.err saying which hosts it still waits for, and what
// for, and clears it at the end.
func settleAll(s streams, lab *hosts.Lab, inv *inventory.Inventory, settled <-chan hosts.HostState) []hosts.HostState {
	all := make(chan []hosts.HostState, 1)
	go func() { all <- hosts.Collect(inv.Hosts, settled) }()
	var tick <-chan time.Time
	if isTerminal(s.err) {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		tick = t.C
	}
	shown := false
	for {
		select {
		case states := <-all:
			if shown {
				fmt.Fprint(s.err, "\r\033[K")
			}
			return states
		case <-tick:
			pending := lab.Pending()
			if len(pending) == 0 {
				continue // all answered: the states are on their way
			}
			fmt.Fprintf(s.err, "\r\033[K%s", dispatch.Clip(waitingLine(len(inv.Hosts)-len(pending), len(inv.Hosts), pending), terminalWidth(s.err)))
			shown = true
		}
	}
}

// waitingLine says how many of total hosts answered, and what the first
// of those still opening are doing.
func waitingLine(answered, total int, pending []hosts.Opening) string {
	var waits []string
	for _, p := range pending[:min(len(pending), 3)] {
		waits = append(waits, fmt.Sprintf("%s (%s, %s)", p.Name, p.Doing, dispatch.RoundDuration(time.Since(p.Since))))
	}
	if len(pending) > 3 {
		waits = append(waits, fmt.Sprintf("%d more", len(pending)-3))
	}
	return fmt.Sprintf("gpudispatch: %d/%d hosts answered; waiting for %s", answered, total, strings.Join(waits, ", "))
}

// startHosts opens every host in the background, its code store ready to
// ship to, and waits for the first one that is up; a dry run ships
// nothing and waits for every host. It warns of those that cannot be
// used. The hosts not settled yet come on the channel returned. When no
// host can be used, the run cannot start.
func startHosts(ctx context.Context, s streams, o labOptions, inv *inventory.Inventory, dryRun bool) (*hosts.Lab, []hosts.HostState, <-chan hosts.HostState, error) {
	opts := hostOptions(o)
	opts.WarmCode, opts.Rejoin = !dryRun, !dryRun
	lab, settled, err := hosts.Start(ctx, inv, opts)
	if err != nil {
		return nil, nil, nil, usageError("%v", err)
	}
	var states []hosts.HostState
	if dryRun {
		states = settleAll(s, lab, inv, settled)
	} else {
		states = firstUp(lab, settled)
	}
	var down, warnings []string
	up := false
	for _, st := range states {
		warnings = append(warnings, st.Warnings...)
		if st.Err == nil {
			up = true
			continue
		}
		d := fmt.Sprintf("%s (%s): %v", st.Host.Name, st.Addr, st.Err)
		down = append(down, d)
		if st.Retrying {
			warnings = append(warnings, d+"; retrying in the background, jobs pinned to it wait for it")
		} else {
			warnings = append(warnings, "leaving out "+d)
		}
	}
	if !up {
		for _, p := range lab.Pending() {
			// gpus: auto hosts down or sick, tried again in the background.
			down = append(down, fmt.Sprintf("%s (%s): %s", p.Name, p.Addr, p.Doing))
		}
		lab.Close()
		if len(states) == 1 && errors.Is(states[0].Err, hosts.ErrNoNvidiaSMI) && o.inventory == "" && o.gpus == nil {
			return nil, nil, nil, usageError("no inventory and no nvidia-smi here: say which GPUs to use with --gpus 0,1 or describe your hosts with --inventory lab.yaml")
		}
		return nil, nil, nil, usageError("no host can be used:\n  %s", strings.Join(down, "\n  "))
	}
	for _, w := range warnings {
		fmt.Fprintf(s.err, "gpudispatch: warning: %s\n", w)
	}
	return lab, states, settled, nil
}

// firstUp returns the states of the hosts settled until one is up, or
// until every host was tried once and none is (the rest being `gpus: auto`
// hosts down or sick, opened again in the background).
func firstUp(lab *hosts.Lab, settled <-chan hosts.HostState) []hosts.HostState {
	var states []hosts.HostState
	// got takes one state off settled, and reports whether the wait is over.
	got := func(st hosts.HostState, ok bool) bool {
		if ok {
			states = append(states, st)
		}
		return !ok || st.Err == nil
	}
	tried := lab.Tried()
	for {
		select {
		case st, ok := <-settled:
			if got(st, ok) {
				return states
			}
		case <-tried:
			tried = nil
			// Those settled as the last was tried are on their way.
			for drained := false; !drained; {
				select {
				case st, ok := <-settled:
					if got(st, ok) {
						return states
					}
				default:
					drained = true
				}
			}
			if len(lab.Pending()) > 0 {
				return states // none up: each one left is down or sick
			}
		}
	}
}

func hostOptions(o labOptions) hosts.Options {
	return hosts.Options{
		ConnectTimeout:    o.connect,
		Keepalive:         o.keepalive,
		ProbeTimeout:      o.probe,
		SetupTimeout:      o.setup,
		LostAfter:         o.lostAfter,
		AcceptNewHostKeys: o.acceptNew,
		LockDir:           o.lockDir,
		KeepCode:          o.keep,
	}
}

// completeHosts makes the shell complete --hosts with the inventory's host
// names (after the commas already typed).
func completeHosts(cmd *cobra.Command, v *viper.Viper) {
	err := cmd.RegisterFlagCompletionFunc("hosts", func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		path := v.GetString("inventory")
		if path == "" {
			path, _ = inventory.Find()
		}
		if path == "" {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		inv, err := inventory.Load(path)
		if err != nil {
			cobra.CompDebugln(err.Error(), false)
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		typed := ""
		if i := strings.LastIndexByte(toComplete, ','); i >= 0 {
			typed = toComplete[:i+1]
		}
		var names []string
		for _, h := range inv.Hosts {
			if !slices.Contains(strings.Split(typed, ","), h.Name) {
				names = append(names, typed+h.Name)
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	})
	if err != nil {
		panic(err) // only on a programming error: the flag was just defined
	}
}
