package labfeed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch"
	"github.com/gpudispatch/gpudispatch/dispatch/snapshot"
	"github.com/gpudispatch/gpudispatch/hosts"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// Options say how Start opens the lab.
type Options struct {
	// Hosts is how each host is reached and opened.
	Hosts hosts.Options
	// DryRun waits for every host, and ships no code.
	DryRun bool
	// Progress, when not nil (a terminal), gets Settle's waiting line,
	// cut to Width columns.
	Progress io.Writer
	Width    int
	// Implicit says the run names no inventory and no GPUs (it looked at
	// this machine's nvidia-smi): a failure to find one is said so.
	Implicit bool
}

// Start opens every host of inv in the background, its code store ready
// to ship to, and waits for the first one that is up; a dry run ships
// nothing and waits for every host (Settle). It returns the states
// settled so far, the hosts not settled yet on the channel, and what a
// user should be warned of. When no host can be used, the run cannot
// start: the error says why for each.
func Start(ctx context.Context, inv *inventory.Inventory, o Options) (*hosts.Lab, []hosts.HostState, <-chan hosts.HostState, []string, error) {
	opts := o.Hosts
	opts.WarmCode, opts.Rejoin = !o.DryRun, !o.DryRun
	lab, settled, err := hosts.Start(ctx, inv, opts)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	var states []hosts.HostState
	if o.DryRun {
		states = Settle(lab, inv, settled, o.Progress, o.Width)
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
		if len(states) == 1 && errors.Is(states[0].Err, hosts.ErrNoNvidiaSMI) && o.Implicit {
			return nil, nil, nil, nil, errors.New("no inventory and no nvidia-smi here: say which GPUs to use with --gpus 0,1 or describe your hosts with --inventory lab.yaml")
		}
		return nil, nil, nil, nil, fmt.Errorf("no host can be used:\n  %s", strings.Join(down, "\n  "))
	}
	return lab, states, settled, warnings, nil
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

// Settle waits for every host of settled, in inv's order; with progress
// (a terminal) it keeps a line there saying which hosts it still waits
// for, and what for, cut to width, and clears it at the end.
func Settle(lab *hosts.Lab, inv *inventory.Inventory, settled <-chan hosts.HostState, progress io.Writer, width int) []hosts.HostState {
	all := make(chan []hosts.HostState, 1)
	go func() { all <- hosts.Collect(inv.Hosts, settled) }()
	var tick <-chan time.Time
	if progress != nil {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		tick = t.C
	}
	shown := false
	for {
		select {
		case states := <-all:
			if shown {
				fmt.Fprint(progress, "\r\033[K")
			}
			return states
		case <-tick:
			pending := lab.Pending()
			if len(pending) == 0 {
				continue // all answered: the states are on their way
			}
			fmt.Fprintf(progress, "\r\033[K%s", dispatch.Clip(waitingLine(len(inv.Hosts)-len(pending), len(inv.Hosts), pending), width))
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

// Absent is hosts.Absent with each reason naming the host's address.
func Absent(states []hosts.HostState) (down, leftOut map[string]error) {
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

// reloadInterval is how often the inventory file is looked at for edits.
const reloadInterval = 400 * time.Millisecond

// Feed sends a run what changes in its lab (Updates), one change at a
// time, each with the hosts as the lab has them then.
type Feed struct {
	lab *hosts.Lab
	// edited readies an edited inventory for the run (the hosts it may
	// use, --sync) and takes the snapshots of the directories it names
	// for sync that have none yet.
	edited func(context.Context, *inventory.Inventory) (map[string]*snapshot.Snapshot, error)
	mu     sync.Mutex
	ch     chan dispatch.Update
}

// NewFeed is the Feed of lab's changes; edited readies an edit of the
// inventory as the run's command does.
func NewFeed(lab *hosts.Lab, edited func(context.Context, *inventory.Inventory) (map[string]*snapshot.Snapshot, error)) *Feed {
	return &Feed{lab: lab, edited: edited, ch: make(chan dispatch.Update)}
}

// Updates is what the run reads (dispatch.Options.Updates).
func (f *Feed) Updates() <-chan dispatch.Update { return f.ch }

func (f *Feed) send(ctx context.Context, upd dispatch.Update) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if upd.Err == nil {
		upd.Inventory, _ = f.lab.Usable()
	}
	select {
	case f.ch <- upd:
	case <-ctx.Done():
	}
}

// Opened sends each host of settled as it is settled, until ctx ends.
func (f *Feed) Opened(ctx context.Context, settled <-chan hosts.HostState) {
	for {
		select {
		case st, ok := <-settled:
			if !ok {
				return
			}
			upd := dispatch.Update{Opened: []string{st.Host.Name}, Warnings: st.Warnings}
			upd.Down, upd.LeftOut = Absent([]hosts.HostState{st})
			f.send(ctx, upd)
		case <-ctx.Done():
			return
		}
	}
}

// Watch sends each edit of inv's file, with the hosts it adds opened,
// until ctx ends.
func (f *Feed) Watch(ctx context.Context, inv *inventory.Inventory) {
	inventory.Watch(ctx, inv.File, inv.Digest, reloadInterval, func(inv *inventory.Inventory, err error) {
		var upd dispatch.Update
		if err == nil {
			upd.Snapshots, err = f.edited(ctx, inv)
		}
		if err == nil {
			var added []hosts.HostState
			if added, err = f.lab.Update(ctx, inv); err == nil {
				upd.Down, upd.LeftOut = Absent(added)
			}
		}
		upd.Err = err
		f.send(ctx, upd)
	})
}
