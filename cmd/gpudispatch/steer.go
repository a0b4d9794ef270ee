package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/gpudispatch/gpudispatch/dispatch"
)

// steerOptions are the options of cancel, retry, priority and stop.
type steerOptions struct {
	verb   string
	logDir string
	ids    []string
	// priority is priority's N; now is stop --now, detach stop --detach.
	priority int
	now      bool
	detach   bool
}

// steerVerbs are the commands that steer a run, with their arguments, what
// they do, and examples.
var steerVerbs = map[string]struct{ use, short, long, example string }{
	"cancel": {"cancel [flags] ID...", "Cancel jobs: a waiting one leaves the queue, a running one is killed",
		`Cancel jobs of the run whose log dir is -o (gpudispatch serve, or a run
still reading its input): a waiting job leaves the queue, a running one is
killed (TERM to its processes, KILL after the grace). IDs are job numbers or
names, as status shows.`,
		`  gpudispatch cancel -o ~/gpd 17 18        # two jobs of a standing queue
  gpudispatch cancel baseline               # the job named baseline, in gpudispatch-logs`},
	"retry": {"retry [flags] ID...", "Queue again jobs that failed, timed out, were lost or were cancelled",
		`Queue again jobs of the run whose log dir is -o that ended without success
(failed, timed out, lost, cancelled); a job that is waiting, running or
succeeded is not retried. Each new attempt has its own logs (ID.2.out...).
IDs are job numbers or names, as status shows.`,
		`  gpudispatch retry -o ~/gpd 4             # job 4 failed: run it again
  gpudispatch status --failed --json -o ~/gpd | jq -r .job | xargs gpudispatch retry -o ~/gpd`},
	"priority": {"priority [flags] ID N", "Give a waiting job priority N (higher runs first)",
		`Give a waiting job of the run whose log dir is -o the priority N: waiting
jobs with a higher priority start first (default 0; equal ones in the order
they came). ID is a job number or name, as status shows.`,
		`  gpudispatch priority -o ~/gpd 23 10      # job 23 next
  gpudispatch priority -o ~/gpd -- sweep-7 -5   # after the others (-- before a negative N)`},
	"stop": {"stop [flags]", "Stop the run: no new job starts, running jobs finish (--now: killed; --detach: left running)",
		`Stop the run whose log dir is -o, as a Ctrl-C does: no new job starts, the
running jobs finish, then the run ends. With --now the running jobs are
killed too, as a second Ctrl-C does. With --detach the run ends at once and
its running jobs run on where they run, their GPUs locked until they end:
serve --resume (or --resume) on the log dir re-adopts them, as after an
upgrade of gpudispatch.`,
		`  gpudispatch stop -o ~/gpd                # let the running jobs finish
  gpudispatch stop -o ~/gpd --now          # kill them too
  gpudispatch stop -o ~/gpd --detach       # leave them running; then serve --resume`},
}

func newSteerCommand(s streams, verb string, runF func(context.Context, streams, steerOptions) error) *cobra.Command {
	if runF == nil {
		runF = runSteer
	}
	v := viper.New()
	cmd := &cobra.Command{
		Use:   steerVerbs[verb].use,
		Short: steerVerbs[verb].short,
		Long: steerVerbs[verb].long + "\n\n" + exitHelp(func(c exitCode) string {
			switch {
			case verb == "stop" && c.code == exitOK:
				return "the run was told to stop"
			case verb == "stop" && c.code == exitFailed:
				return "" // stop names no job
			}
			return c.steer
		}),
		Example: steerVerbs[verb].example,
		RunE: func(cmd *cobra.Command, args []string) error {
			o := steerOptions{verb: verb, logDir: v.GetString("log-dir"), ids: args}
			switch verb {
			case "stop":
				o.now, o.detach = v.GetBool("now"), v.GetBool("detach")
				if o.now && o.detach {
					return usageError("stop: --now kills the running jobs, --detach leaves them running: give one")
				}
				if len(args) > 0 {
					return usageError("stop takes no argument")
				}
			case "priority":
				if len(args) != 2 {
					return usageError("priority: want a job id and a number: priority 17 5")
				}
				n, err := strconv.Atoi(args[1])
				if err != nil {
					return usageError("priority: %q is not a whole number", args[1])
				}
				o.ids, o.priority = args[:1], n
			default:
				if len(args) == 0 {
					return usageError("%s: which jobs? give their ids (see gpudispatch status)", verb)
				}
			}
			return runF(cmd.Context(), s, o)
		},
	}
	f := cmd.Flags()
	f.StringP("log-dir", "o", "gpudispatch-logs", "the log dir of the run")
	if verb == "stop" {
		f.Bool("now", false, "kill the running jobs too, as a second Ctrl-C does")
		f.Bool("detach", false, "end the run now and leave its running jobs running (serve --resume re-adopts them)")
	}
	bindEnv(v, f)
	return cmd
}

func runSteer(ctx context.Context, s streams, o steerOptions) error {
	client, err := dialRun(o.logDir)
	if err != nil {
		return err
	}
	defer client.Close()
	var answers []dispatch.Answer
	switch o.verb {
	case "stop":
		if o.detach {
			if err := client.Detach(ctx); err != nil {
				return runError(o.logDir, err)
			}
			fmt.Fprintln(s.err, "gpudispatch: detaching: the run ends, its running jobs run on (serve --resume re-adopts them)")
			return nil
		}
		if err := client.Stop(ctx, o.now); err != nil {
			return runError(o.logDir, err)
		}
		if o.now {
			fmt.Fprintln(s.err, "gpudispatch: stopping now: no new job starts, and the running jobs are being killed (TERM, then KILL after the grace period)")
		} else {
			fmt.Fprintln(s.err, "gpudispatch: stopping: no new job starts, the running jobs finish")
		}
		return nil
	case "cancel":
		answers, err = client.Cancel(ctx, o.ids)
	case "retry":
		answers, err = client.Retry(ctx, o.ids)
	case "priority":
		var a dispatch.Answer
		a, err = client.SetPriority(ctx, o.ids[0], o.priority)
		answers = []dispatch.Answer{a}
	}
	if err != nil {
		return runError(o.logDir, err)
	}
	failed := false
	for _, a := range answers {
		if a.Err != "" {
			fmt.Fprintf(textTo(s.err), "gpudispatch: %s %s: %s\n", o.verb, a.ID, a.Err)
			failed = true
			continue
		}
		fmt.Fprintf(s.out, "%s: %s\n", a.ID, a.Message)
	}
	if failed {
		return &exitError{code: exitFailed}
	}
	return nil
}
