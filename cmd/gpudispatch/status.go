package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"golang.org/x/term"

	"github.com/gpudispatch/gpudispatch/dispatch"
)

// statusOptions are status's flags after viper merged GPUDISPATCH_* into
// them.
type statusOptions struct {
	logDir            string
	failed, json, all bool
}

func newStatusCommand(s streams, runF func(context.Context, streams, statusOptions) error) *cobra.Command {
	if runF == nil {
		runF = runStatus
	}
	v := viper.New()
	cmd := &cobra.Command{
		Use:   "status [LOGDIR]",
		Short: "Summarise a run from the journal in its log dir (default gpudispatch-logs)",
		Long: `Print a line per job of the journal in LOGDIR (or -o; default gpudispatch-logs):
its id, state, host:gpu, attempts, exit status, duration, command and log
(for a waiting job, why it waits, when the run is live), then the totals. It
only reads, so it works while the run is going on. It shows the latest run
of the log dir, with the runs it resumed (a job run again by --resume shows
its latest attempt), and its exit status is that run's; --all shows every
run. On a terminal the commands are
cut to fit its width; piped or redirected, every value is printed whole.

` + exitHelp(func(c exitCode) string { return c.status }),
		Example: `  gpudispatch status                       # the latest run in gpudispatch-logs
  gpudispatch status -o ~/gpd --failed     # what did not succeed, with its log
  gpudispatch status --all --json | jq -r 'select(.state == "failed") | .stderr'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o := statusOptions{logDir: v.GetString("log-dir"), failed: v.GetBool("failed"), json: v.GetBool("json"), all: v.GetBool("all")}
			if len(args) == 1 {
				o.logDir = args[0]
			}
			return runF(cmd.Context(), s, o)
		},
	}
	f := cmd.Flags()
	f.StringP("log-dir", "o", "gpudispatch-logs", "the log dir of the run")
	f.Bool("failed", false, "list only the jobs that ended without success")
	f.Bool("json", false, "one JSON object per job")
	f.Bool("all", false, "every run of the log dir, not only the latest (and the runs it resumed)")
	bindEnv(v, f)
	return cmd
}

func runStatus(ctx context.Context, s streams, o statusOptions) error {
	// The live run, when there is one, adds why each waiting job waits;
	// else (or if it cannot answer) the journal says the rest.
	st, err := liveStatus(ctx, o.logDir)
	live := st != nil && err == nil
	if !live {
		st, err = dispatch.ReadStatus(o.logDir, time.Now())
	}
	if errors.Is(err, os.ErrNotExist) {
		return usageError("no journal in %s: give the log dir of a run (its -o)", o.logDir)
	}
	if err != nil {
		return usageError("%v", err)
	}
	warn := textTo(s.err)
	if owner := dispatch.JournalOwner(o.logDir); owner != "" {
		fmt.Fprintf(warn, "gpudispatch: warning: the journal in %s is %s's, not yours: what it says was written by them\n", o.logDir, owner)
	}
	for _, d := range st.Damaged {
		fmt.Fprintf(warn, "gpudispatch: warning: %s; the line was skipped\n", d)
	}
	earlier := 0
	if !o.all {
		st, earlier = st.Latest()
	}
	jobs := st.Jobs
	if o.failed {
		jobs = st.Unsuccessful()
	}
	if o.json {
		err = st.WriteJSON(s.out, jobs)
	} else {
		err = st.WriteTable(s.out, jobs, terminalWidth(s.out))
	}
	if err != nil {
		return err
	}
	if earlier > 0 && !o.json {
		fmt.Fprintf(warn, "gpudispatch: %s of earlier runs in %s not shown (status --all shows them)\n", dispatch.Count(earlier, "job"), o.logDir)
	}
	if open := st.Counts()[dispatch.StateRunning] + st.Counts()[dispatch.StateWaiting]; open > 0 && !live {
		fmt.Fprintf(warn, "gpudispatch: no gpudispatch is running on %s: the %s shown running or waiting lost their coordinator (killed, or its machine asleep). "+
			"Run it again with --resume -o %s (serve --resume for a standing queue): it follows the jobs still running on Slurm clusters and runs the others again\n",
			o.logDir, dispatch.Count(open, "job"), o.logDir)
	}
	for _, j := range st.Jobs {
		if !j.Succeeded() {
			return &exitError{code: exitFailed}
		}
	}
	return nil
}

// terminalWidth is the width of the terminal w writes to, or 0 when w is
// not a terminal (a pipe, a file).
func terminalWidth(w any) int {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return 0
	}
	width, _, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 0
	}
	return width
}
