package main

import (
	"errors"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpudispatch/gpudispatch/dispatch"
)

func newStatusCommand(s streams) *cobra.Command {
	var failed, asJSON bool
	cmd := &cobra.Command{
		Use:   "status [LOGDIR]",
		Short: "Summarise a run from the journal in its log dir (default gpudispatch-logs)",
		Long: `Print a line per job of the journal in LOGDIR (default gpudispatch-logs): its
id, state, host:gpu, attempts, exit status, duration, command and log, then the
totals. It only reads, so it works while the run is going on. A job run again
by --resume shows its latest run.

` + exitHelp(func(c exitCode) string { return c.status }),
		Args: cobra.MaximumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			dir := "gpudispatch-logs"
			if len(args) == 1 {
				dir = args[0]
			}
			st, err := dispatch.ReadStatus(dir, time.Now())
			if errors.Is(err, os.ErrNotExist) {
				return usageError("no journal in %s: give the log dir of a run (its -o)", dir)
			}
			if err != nil {
				return usageError("%v", err)
			}
			jobs := st.Jobs
			if failed {
				jobs = st.Unsuccessful()
			}
			write := st.WriteTable
			if asJSON {
				write = st.WriteJSON
			}
			if err := write(s.out, jobs); err != nil {
				return err
			}
			for _, j := range st.Jobs {
				if !j.Succeeded() {
					return &exitError{code: exitFailed}
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&failed, "failed", false, "list only the jobs that ended without success")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per job")
	return cmd
}
