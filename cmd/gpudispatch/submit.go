package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"al.essio.dev/pkg/shellescape"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/gpudispatch/gpudispatch/dispatch"
	"github.com/gpudispatch/gpudispatch/dispatch/control"
	"github.com/gpudispatch/gpudispatch/dispatch/snapshot"
	"github.com/gpudispatch/gpudispatch/hosts/codestore"
)

// submitOptions are submit's flags after viper merged GPUDISPATCH_* into
// them.
type submitOptions struct {
	logDir   string
	defaults dispatch.Defaults
	wait     bool
	// sync is --sync (absolute; ""), syncLimit --sync-limit in bytes,
	// keep --keep.
	sync      string
	syncLimit int64
	keep      time.Duration
	files     []string
	// command is what follows "--": one job.
	command []string
}

func newSubmitCommand(s streams, runF func(context.Context, streams, submitOptions) error) *cobra.Command {
	if runF == nil {
		runF = runSubmit
	}
	v := viper.New()
	cmd := &cobra.Command{
		Use:   "submit [flags] [JOBFILE ...] [-- COMMAND [ARG...]]",
		Short: "Add jobs to a gpudispatch serve: from files, standard input, or one command after --",
		Long: `Add job lines to the standing queue of "gpudispatch serve" on the log dir
(-o): from JOBFILEs, from standard input when none, or one job after "--".
After "--", one argument is a shell line as written ('python a.py | tee a.log');
several are one command whose arguments are passed exactly (quoted for the
shell). Lines keep the syntax of a run ("@HOST cmd", "[priority=2 ...] cmd");
--host, --gpus, --priority and --timeout apply to every job whose line does
not say otherwise. It prints the id given to each job queued, one per line,
once they are in the journal; a rejected line is said with its line number
(submit:3: ...) and the others are queued.

` + exitHelp(func(c exitCode) string { return c.submit }),
		Example: `  gpudispatch submit -o ~/gpd < more-jobs.txt
  gpudispatch submit -o ~/gpd --priority 5 -- python train.py --lr 0.1
  gpudispatch submit -o ~/gpd --wait -- 'python eval.py | tee eval.log'   # exits as the job did`,
		RunE: func(cmd *cobra.Command, args []string) error {
			gpus, err := submitGPUs(v.GetString("gpus"))
			if err != nil {
				return err
			}
			host := v.GetString("host")
			if name, gpu, ok := strings.Cut(host, ":"); ok {
				return usageError("submit: --host takes a host name; for GPU %s of %s, begin the job line with @%s:%s", gpu, name, name, gpu)
			}
			o := submitOptions{
				logDir:    v.GetString("log-dir"),
				wait:      v.GetBool("wait"),
				syncLimit: v.GetInt64("sync-limit") << 20,
				keep:      v.GetDuration("keep"),
				defaults: dispatch.Defaults{
					Name: v.GetString("name"), Host: host, GPUs: gpus,
					Priority: v.GetInt("priority"), Timeout: v.GetDuration("timeout"),
				},
			}
			if after := v.GetString("after"); after != "" {
				o.defaults.After = strings.Split(after, ",")
			}
			kind, err := readKind(v)
			if err != nil {
				return err
			}
			o.defaults.Kind = kind
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				o.files, o.command = args[:dash], args[dash:]
				if len(o.command) == 0 {
					return usageError("submit: no command after --")
				}
				if len(o.files) > 0 {
					return usageError("submit: job files or a command after --, not both")
				}
			} else {
				o.files = args
			}
			if dir := v.GetString("sync"); dir != "" {
				abs, err := filepath.Abs(dir)
				if err != nil {
					return usageError("submit: --sync: %v", err)
				}
				o.sync = abs
			}
			switch {
			case o.syncLimit <= 0:
				return usageError("submit: --sync-limit: want a positive number of MiB")
			case o.keep <= 0:
				return usageError("submit: --keep: want a positive duration")
			case o.defaults.Name != "" && o.command == nil:
				return usageError("submit: --name names one job: give it with -- COMMAND")
			case o.defaults.Timeout < 0:
				return usageError("submit: --timeout: want a positive value")
			}
			return runF(cmd.Context(), s, o)
		},
	}
	f := cmd.Flags()
	f.SortFlags = false
	f.StringP("log-dir", "o", "gpudispatch-logs", "the log dir of the gpudispatch serve")
	f.String("name", "", "the job's name (its log files' name); with -- COMMAND only")
	f.String("host", "", "run on this host only (as @HOST)")
	f.String("gpus", "", "how many GPUs of one host each job needs together (default 1); given GPUs: @HOST:GPU")
	f.Int("priority", 0, "higher runs first; equal priorities in arrival order")
	f.Duration("timeout", 0, "each job's wall-clock limit (e.g. 2h)")
	addKindFlags(f)
	f.Bool("wait", false, "wait until the jobs end, and exit as a run would")
	f.String("after", "", "each job waits until these jobs (numbers, names, globs over names) succeeded, as [after=...]")
	f.String("sync", "", "take a snapshot of this directory now and run these jobs in it, on every host")
	f.Int64("sync-limit", snapshot.DefaultLimit>>20, "the largest snapshot --sync takes, in MiB")
	f.Duration("keep", codestore.DefaultKeep, "how long snapshots of code that no run used are kept here")
	bindEnv(v, f)
	return cmd
}

// submitGPUs reads submit's --gpus: a number of GPUs, not ids as run's
// --gpus takes ("" is the default, 1).
func submitGPUs(v string) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	switch {
	case err == nil && n > 0:
		return n, nil
	case strings.ContainsAny(v, ", "):
		return 0, usageError("submit: --gpus %s: submit's --gpus is how many GPUs each job needs (--gpus 2); to put a job on given GPUs, begin its line with @HOST:GPU", v)
	}
	return 0, usageError("submit: --gpus %s: want how many GPUs each job needs, a number from 1", v)
}

func runSubmit(ctx context.Context, s streams, o submitOptions) error {
	var batches []dispatch.Batch
	switch {
	case o.command != nil:
		line, err := commandLine(o.command)
		if err != nil {
			return usageError("submit: %v", err)
		}
		batches = append(batches, dispatch.Batch{Text: line})
	case len(o.files) == 0 || slices.Equal(o.files, []string{"-"}):
		if isTerminal(s.in) {
			fmt.Fprintln(s.err, "gpudispatch: reading jobs from the terminal, one per line; end with Ctrl-D")
		}
		text, err := io.ReadAll(s.in)
		if err != nil {
			return usageError("submit: standard input: %v", err)
		}
		batches = append(batches, dispatch.Batch{Text: string(text)})
	default:
		for _, name := range o.files {
			text, err := os.ReadFile(name)
			if err != nil {
				return usageError("submit: job file: %v", err)
			}
			batches = append(batches, dispatch.Batch{Source: name, Text: string(text)})
		}
	}
	client, err := dialRun(o.logDir)
	if err != nil {
		return err
	}
	defer client.Close()
	if o.sync != "" {
		// The code as it is now: later edits reach none of these jobs.
		code := &snapshots{limit: o.syncLimit, keep: o.keep, w: textTo(s.err)}
		snap, err := code.take(ctx, o.sync)
		if err != nil {
			return usageError("submit: %v", err)
		}
		o.defaults.Snapshot, o.defaults.SyncDir = snap.ID, snap.Dir
	}
	var ids []string
	rejected := false
	o.defaults.Env = callerEnv(os.Environ())
	for _, b := range batches {
		b.Defaults = o.defaults
		got, err := client.Submit(ctx, b)
		if err != nil {
			return runError(o.logDir, err)
		}
		for _, id := range got.IDs {
			fmt.Fprintln(s.out, id)
		}
		for _, e := range got.Errors {
			fmt.Fprintln(textTo(s.err), "gpudispatch:", e)
		}
		ids = append(ids, got.IDs...)
		rejected = rejected || len(got.Errors) > 0
	}
	if !o.wait {
		if rejected {
			return &exitError{code: exitFailed}
		}
		return nil
	}
	return waitFor(ctx, s, client, o.logDir, ids, rejected)
}

// callerEnv is the environment a submit hands to its jobs (local hosts run
// them with it): all of it but what a shell keeps for itself.
func callerEnv(environ []string) []string {
	env := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "PWD", "OLDPWD", "SHLVL", "_":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// commandLine is the job line of a command given after "--": one argument
// is a shell line as written, several are quoted so that the job runs
// exactly those arguments.
func commandLine(args []string) (string, error) {
	for _, a := range args {
		if strings.ContainsAny(a, "\n\r") {
			return "", errors.New("a command after -- cannot hold a line break: put a multi-line job in a job file")
		}
	}
	if len(args) == 1 {
		return args[0], nil
	}
	return shellescape.QuoteCommand(args), nil
}

// waitFor waits until the jobs ids have ended, prints how each ended, and
// exits as a run would. Ctrl-C ends the wait, not the jobs.
func waitFor(ctx context.Context, s streams, client *control.Client, logDir string, ids []string, rejected bool) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	events, err := client.Wait(ctx, ids)
	if ctx.Err() != nil {
		fmt.Fprintln(s.err, "gpudispatch: stopped waiting; the jobs go on in the queue")
		return &exitError{code: exitInterrupted}
	}
	if err != nil {
		return runError(logDir, err)
	}
	report := &dispatch.TextReporter{W: textTo(s.err)}
	code := exitOK
	if rejected {
		code = exitFailed
	}
	for _, e := range events {
		report.Report(e)
		switch {
		case e.Event == dispatch.EventCancelled:
			code = exitInterrupted
		case e.Event != dispatch.EventFinished && code == exitOK:
			code = exitFailed
		}
	}
	return exitWith(code)
}
