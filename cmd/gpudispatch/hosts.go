package main

import (
	"context"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/gpudispatch/gpudispatch/hosts"
)

// hostsOptions are hosts's flags after viper merged GPUDISPATCH_* into them.
type hostsOptions struct {
	labOptions
	json, verbose bool
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

` + exitHelp(func(c exitCode) string { return c.hosts }),
		Example: `  gpudispatch hosts -i lab.yaml            # who is up, their GPUs and slots
  gpudispatch hosts -i lab.yaml --json     # one JSON object per host`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			lab, err := readLabOptions(v)
			if err != nil {
				return err
			}
			return runF(cmd.Context(), s, hostsOptions{labOptions: lab, json: v.GetBool("json"), verbose: v.GetBool("verbose")})
		},
	}
	f := cmd.Flags()
	f.SortFlags = false
	addLabFlags(f)
	f.Bool("json", false, "one JSON object per host")
	f.BoolP("verbose", "v", false, "also each host's SSH server and each GPU's UUID")
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
	lab, settled, err := hosts.Start(ctx, inv, opts)
	if err != nil {
		return usageError("%v", err)
	}
	defer lab.Close()
	states := settleAll(s, lab, inv, settled)
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
