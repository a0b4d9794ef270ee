package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/gpudispatch/gpudispatch/cmd/gpudispatch/internal/labfeed"
	"github.com/gpudispatch/gpudispatch/dispatch"
	"github.com/gpudispatch/gpudispatch/dispatch/snapshot"
	"github.com/gpudispatch/gpudispatch/hosts"
)

// hostsOptions are hosts's flags after viper merged GPUDISPATCH_* into them.
type hostsOptions struct {
	labOptions
	json, verbose bool
	// check asks for a look at each host from inside a job; command is
	// then run there too, when not "".
	check   bool
	command string
	// clean removes the snapshots of code no process runs in, on the hosts
	// and here.
	clean bool
}

func newHostsCommand(s streams, runF func(context.Context, streams, hostsOptions) error) *cobra.Command {
	if runF == nil {
		runF = runHosts
	}
	v := viper.New()
	cmd := &cobra.Command{
		Use:   "hosts [flags]",
		Short: "Connect to every host, ask nvidia-smi for its GPUs and print the slot table",
		Long: `Connect to every inventory host at once, ask nvidia-smi for its GPUs and
print a line per host (with the reason when it is down) and a line per GPU:
its name, memory, utilisation, slots, and whether it is busy with other
people's work (another gpudispatch run's lock, compute processes, more than
the inventory's busy_memory_mb used).

With --check, look at each host from inside a job instead, in the
environment a job gets there (login shell, workdir, conda/venv/modules,
setup) on one of its GPUs: the shell, the head of PATH, python3 -V, the
active env, the driver and CUDA versions, the free space in the workdir,
and whether the user lingers (systemd keeps their processes after logout).
With CMD, run it there too and show its output: a broken host is found
before a sweep fails on it.

` + exitHelp(func(c exitCode) string { return c.hosts }),
		Example: `  gpudispatch hosts -i lab.yaml            # who is up, their GPUs and slots
  gpudispatch hosts -i lab.yaml --json     # one JSON object per host
  gpudispatch hosts -i lab.yaml --check    # what a job gets on each host
  gpudispatch hosts -i lab.yaml --clean    # remove the snapshots of code
  gpudispatch hosts -i lab.yaml --check 'python -c "import torch; print(torch.cuda.is_available())"'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			lab, err := readLabOptions(v)
			if err != nil {
				return err
			}
			o := hostsOptions{labOptions: lab, json: v.GetBool("json"), verbose: v.GetBool("verbose"), check: v.GetBool("check"), clean: v.GetBool("clean")}
			if o.check && o.clean {
				return usageError("hosts: --check or --clean, not both")
			}
			if len(args) > 0 {
				if !o.check {
					return usageError("hosts takes a command only with --check (hosts --check CMD)")
				}
				o.command = args[0]
			}
			return runF(cmd.Context(), s, o)
		},
	}
	f := cmd.Flags()
	f.SortFlags = false
	addLabFlags(f)
	f.Bool("json", false, "one JSON object per host")
	f.BoolP("verbose", "v", false, "also each host's SSH server and each GPU's UUID")
	f.Bool("check", false, "look at each host from inside a job (and run CMD there, when given)")
	f.Bool("clean", false, "remove the snapshots of code (--sync) from every host and from here, but those a process runs in")
	bindEnv(v, f)
	completeHosts(cmd, v)
	return cmd
}

func runHosts(ctx context.Context, s streams, o hostsOptions) error {
	inv, err := loadInventory(o.labOptions)
	if err != nil {
		return err
	}
	opts := hostOptions(o.labOptions)
	opts.ProbeGPUs = true
	opts.WarmCode = o.check // --check ships each sync: host its snapshot
	lab, settled, err := hosts.Start(ctx, inv, opts)
	if err != nil {
		return usageError("%v", err)
	}
	defer lab.Close()
	states := labfeed.Settle(lab, inv, settled, progress(s), terminalWidth(s.err))
	if o.check {
		// A host that syncs code is looked at in the snapshot, as its jobs
		// would run.
		code := &snapshots{limit: snapshot.DefaultLimit, keep: o.keep, w: textTo(s.err)}
		snaps, err := code.forHosts(ctx, inv)
		if err != nil {
			return err
		}
		return checkHosts(ctx, s, lab, states, snaps, o)
	}
	if o.clean {
		return cleanHosts(ctx, s, lab, states)
	}
	if o.json {
		err = hosts.WriteJSON(s.out, states, inv.BusyMemoryMB)
	} else {
		err = hosts.WriteTable(s.out, states, inv.BusyMemoryMB, hosts.TableOptions{Width: terminalWidth(s.out), Verbose: o.verbose})
	}
	if err != nil {
		return err
	}
	for _, st := range states {
		if st.Err != nil {
			return &exitError{code: exitFailed}
		}
	}
	return nil
}

// checkHosts looks at each host that is up from inside a job, all at once
// (in the snapshot of the code it syncs, from snaps), and prints what it
// found; a host that is down or fails its check makes
// the exit status 1.
func checkHosts(ctx context.Context, s streams, lab *hosts.Lab, states []hosts.HostState, snaps map[string]*snapshot.Snapshot, o hostsOptions) error {
	checks := make([]hosts.EnvCheck, len(states))
	var wg sync.WaitGroup
	for i, st := range states {
		h := st.Host
		switch {
		case st.Err != nil:
			checks[i] = hosts.EnvCheck{Host: h.Name, Err: st.Err}
		case h.Slurm != nil:
			checks[i] = hosts.EnvCheck{Host: h.Name, Note: "not checked: a Slurm cluster, whose jobs run where Slurm puts them (try one job there)"}
		default:
			gpu := -1
			if len(st.GPUs) > 0 {
				gpu = st.GPUs[0].Index
			} else if len(h.GPUs) > 0 {
				gpu = h.GPUs[0]
			}
			p := dispatch.HostPrelude(h)
			if s := snaps[h.Sync]; s != nil {
				p.Code = s.Code()
			}
			wg.Go(func() {
				checks[i] = lab.CheckEnv(ctx, h.Name, gpu, p, h.Env, o.command)
			})
		}
	}
	wg.Wait()
	var err error
	if o.json {
		err = hosts.WriteChecksJSON(s.out, checks)
	} else {
		err = hosts.WriteChecks(textTo(s.out), checks)
	}
	if err != nil {
		return err
	}
	for _, c := range checks {
		if c.Err != nil {
			return &exitError{code: exitFailed}
		}
	}
	return nil
}

// cleanHosts removes the snapshots of code from each host that is up, all
// at once, and from this machine's store, and says what went; a host that
// is down or fails makes the exit status 1.
func cleanHosts(ctx context.Context, s streams, lab *hosts.Lab, states []hosts.HostState) error {
	said := make([]string, len(states))
	bad := make([]bool, len(states))
	var wg sync.WaitGroup
	for i, st := range states {
		h := st.Host
		switch {
		case st.Err != nil:
			said[i], bad[i] = st.Err.Error(), true
			continue
		}
		wg.Go(func() {
			out, err := lab.CleanCode(ctx, h.Name)
			if err != nil {
				said[i], bad[i] = err.Error(), true
				return
			}
			said[i] = h.Name + ": " + out
		})
	}
	wg.Wait()
	w := textTo(s.out)
	for _, line := range said {
		fmt.Fprintln(w, line)
	}
	if cache, err := os.UserCacheDir(); err == nil {
		snapshot.Prune(filepath.Join(cache, "gpudispatch", "code"), 0)
		fmt.Fprintln(w, "this machine: removed the content kept for snapshots")
	}
	if slices.Contains(bad, true) {
		return &exitError{code: exitFailed}
	}
	return nil
}
