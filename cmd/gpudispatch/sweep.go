package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpudispatch/gpudispatch/dispatch/sweep"
)

const sweepHelp = `Print one command per configuration of a parameter grid, for gpudispatch to run:

  gpudispatch sweep "python train.py --lr {lr} --bs {bs}" -p lr 1e-3 1e-4 -p bs 32 64 \
    | gpudispatch --inventory lab.yaml

{NAME} in the template is replaced by each value of -p NAME (shell-quoted when
it holds spaces, quotes or other shell characters); ${NAME} is left for the
shell. The whole grid is printed in random order, so a sweep cut short has
covered the space evenly.

Options:
  -p, --parameter NAME V1 V2 ...   a parameter and its values (every word up to the next option)
  --samples N, --n-samples N       N distinct configurations drawn uniformly (all when N exceeds the grid)
  --seed S                         a fixed random order and draw
  --ordered                        grid order: the last -p varies fastest
  --sampling-mode grid|shuffled_grid   simple_hypersearch's spelling of --ordered / the default
  --                               every word after it is a value of the last -p

GPUDISPATCH_SAMPLES, GPUDISPATCH_SEED, GPUDISPATCH_ORDERED and
GPUDISPATCH_SAMPLING_MODE set the options of the same names; the command
line wins.
`

// sweepExamples are sweep's examples; its help, which sweep prints itself
// (it parses its own arguments), ends with them.
const sweepExamples = `  gpudispatch sweep "python train.py --lr {lr} --bs {bs}" -p lr 1e-3 1e-4 -p bs 32 64 > jobs.txt
  gpudispatch sweep "[name=lr{lr}] python train.py --lr {lr}" -p lr 0.1 0.01 --ordered
  gpudispatch sweep "python train.py --seed {s}" -p s $(seq 1 100) --samples 10 | gpudispatch -i lab.yaml`

func newSweepCommand(s streams) *cobra.Command {
	return &cobra.Command{
		Use:     "sweep TEMPLATE -p NAME V1 V2 ... [-p ...] [--samples N] [--seed S] [--ordered]",
		Short:   "Print a command per configuration of a parameter grid",
		Long:    sweepHelp,
		Example: sweepExamples,
		// -p takes several values, which pflag cannot express: the sweep
		// package parses its own arguments.
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			return runSweep(s, append(sweepEnv(os.Getenv), args...))
		},
	}
}

// sweepEnv turns GPUDISPATCH_SAMPLES, _SEED, _ORDERED and _SAMPLING_MODE
// into the options they stand for, to be put before the command line's,
// which win. -p has no variable: its values are words.
func sweepEnv(getenv func(string) string) []string {
	var args []string
	for _, name := range []string{"samples", "seed", "sampling-mode"} {
		if v := getenv("GPUDISPATCH_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))); v != "" {
			args = append(args, "--"+name+"="+v)
		}
	}
	if ordered, _ := strconv.ParseBool(getenv("GPUDISPATCH_ORDERED")); ordered {
		args = append(args, "--ordered")
	}
	return args
}

// runSweep prints the configurations args ask for.
func runSweep(s streams, args []string) error {
	a, err := sweep.ParseArgs(args)
	if err != nil {
		return usageError("sweep: %v", err)
	}
	if a.Help {
		fmt.Fprint(s.out, sweepHelp+"\nExamples:\n"+sweepExamples+"\n")
		return nil
	}
	tpl, unused, err := sweep.Compile(a.Template, a.Params)
	if err != nil {
		return usageError("sweep: %v", err)
	}
	for _, name := range unused {
		fmt.Fprintf(s.err, "gpudispatch: sweep: warning: {%s} is not in the template: each command repeats once per value of -p %s\n", name, name)
	}
	if err := tpl.Write(s.out, a.Options); err != nil {
		return &exitError{code: exitFailed, err: fmt.Errorf("sweep: %w", err)}
	}
	return nil
}
