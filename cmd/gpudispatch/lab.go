package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/gpudispatch/gpudispatch/cmd/gpudispatch/internal/labfeed"
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
	noShare   bool          // --no-share (run and serve only)
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
		noShare:   v.GetBool("no-share"),
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

// startHosts opens the lab for run (labfeed.Start; a dry run: ""), warns
// of the hosts that cannot be used, and says why none can.
func startHosts(ctx context.Context, s streams, o labOptions, inv *inventory.Inventory, run string) (*hosts.Lab, []hosts.HostState, <-chan hosts.HostState, error) {
	ho := hostOptions(o)
	ho.Run = run
	lab, states, settled, warnings, err := labfeed.Start(ctx, inv, labfeed.Options{
		Hosts: ho, DryRun: run == "", Progress: progress(s), Width: terminalWidth(s.err),
		Implicit: o.inventory == "" && o.gpus == nil,
	})
	if err != nil {
		return nil, nil, nil, usageError("%v", err)
	}
	for _, w := range warnings {
		fmt.Fprintf(s.err, "gpudispatch: warning: %s\n", w)
	}
	return lab, states, settled, nil
}

// progress is where a line that says what is waited for goes: s.err on a
// terminal, else nowhere (nil).
func progress(s streams) io.Writer {
	if isTerminal(s.err) {
		return s.err
	}
	return nil
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
		NoShare:           o.noShare,
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
