package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/gpudispatch/gpudispatch/cmd/gpudispatch/internal/labfeed"
	"github.com/gpudispatch/gpudispatch/dispatch"
	"github.com/gpudispatch/gpudispatch/dispatch/control"
	"github.com/gpudispatch/gpudispatch/dispatch/live"
	"github.com/gpudispatch/gpudispatch/dispatch/snapshot"
	"github.com/gpudispatch/gpudispatch/dispatch/web"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// runOptions are run's flags after viper merged GPUDISPATCH_* into them.
type runOptions struct {
	labOptions
	logDir  string
	resume  bool
	retries int
	// retryFailed is --retry-failed.
	retryFailed int
	timeout     time.Duration
	// kind is --model, --vram and --tags.
	kind dispatch.Kind
	// hostDown is --host-down-timeout.
	hostDown time.Duration
	skipBusy bool
	// maxGPUs is --max-gpus (0: the inventory's max_gpus).
	maxGPUs int
	recheck time.Duration
	// hooks are --on-job-end, --on-run-end and --hook-timeout.
	hooks   dispatch.Hooks
	dryRun  bool
	json    bool
	quiet   bool
	verbose bool
	files   []string
	// serve is gpudispatch serve: a standing queue, no input.
	serve bool
	// listen is where the web page is served ("" for none).
	listen string
	// sync is --sync (absolute; "" for the inventory's sync:), syncLimit
	// --sync-limit in bytes.
	sync      string
	syncLimit int64
	// returnLimit is --return-limit, in bytes.
	returnLimit int64
}

func newRunCommand(s streams, runF func(context.Context, streams, runOptions) error) *cobra.Command {
	cmd := runLikeCommand(s, runF, false)
	cmd.Use = "run [flags] [JOBFILE ...]"
	cmd.Short = "Run jobs from files, or from standard input when none or \"-\""
	cmd.Long = `Run one shell command per line on every free host:gpu slot.

Job lines: "cmd", "@HOST cmd", "@HOST:GPU cmd", or "[OPTIONS] cmd", with options
host=H gpu=G gpus=N nodes=N name=NAME timeout=DUR priority=N prefer=HOST[:GPU]
mem=SIZE model=A100|H100 vram=SIZE tags=T,... after=ID,... after_any=ID,...
return=PATH,... conda=ENV retries=N. A job starts as soon as its line arrives and a
slot is free. Every flag can also be set as GPUDISPATCH_<FLAG> (e.g.
GPUDISPATCH_LOG_DIR).

` + exitHelp(func(c exitCode) string { return c.run })
	cmd.Example = `  gpudispatch --gpus 0,1,2 < jobs.txt               # the GPUs of this machine
  gpudispatch -i lab.yaml jobs.txt                  # the GPUs of several servers, over SSH
  gpudispatch -i lab.yaml --resume jobs.txt         # again, skipping the jobs that succeeded
  gpudispatch -i lab.yaml --dry-run jobs.txt        # where each job would run
  tail -f -n 0 gpu.queue | gpudispatch --gpus 0,1   # a queue: append lines to gpu.queue`
	cmd.Args = cobra.ArbitraryArgs
	return cmd
}

// runLikeCommand is run, or with serve gpudispatch serve: the same flags
// (but for serve's --resume and --dry-run) and the same runRun.
func runLikeCommand(s streams, runF func(context.Context, streams, runOptions) error, serve bool) *cobra.Command {
	if runF == nil {
		runF = runRun
	}
	v := viper.New()
	cmd := &cobra.Command{
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := readRunOptions(cmd, v, args)
			if err != nil {
				return err
			}
			if serve {
				o.serve, o.dryRun = true, false
			}
			return runF(cmd.Context(), s, o)
		},
	}
	addRunFlags(cmd.Flags(), serve)
	bindEnv(v, cmd.Flags())
	completeHosts(cmd, v)
	return cmd
}

// addRunFlags defines the flags of run, or with serve of serve (no dry run,
// and --resume brings back a queue).
func addRunFlags(f *pflag.FlagSet, serve bool) {
	f.SortFlags = false
	addLabFlags(f)
	f.String("gpus", "", "local mode without an inventory: GPU ids, \"0,1,2\" or \"0 1 2\"; a repeated id is one more slot")
	f.StringP("log-dir", "o", "gpudispatch-logs", "where job logs and journal.jsonl go")
	if serve {
		f.Bool("resume", false, "queue again the jobs that an earlier server in the log dir left waiting or running")
	} else {
		f.Bool("resume", false, "skip jobs that the journal in the log dir records as succeeded")
	}
	f.Int("retries", 2, "times a job is queued again after its host was lost mid-run")
	f.Int("retry-failed", 0, "times a job that exits non-zero or times out is run again (each attempt with its own logs), unless its line says [retries=N]")
	f.Duration("timeout", 0, "per-job wall-clock limit (e.g. 2h); its processes are killed when it passes")
	addKindFlags(f)
	f.Duration("host-down-timeout", dispatch.DefaultHostDownTimeout, "how long jobs that only a down host can run wait for it to come back before they fail")
	f.Bool("skip-busy", false, "put no job on a GPU that other people's processes use (more than the inventory's busy_memory_mb, default 500 MiB, or any compute process)")
	f.Bool("no-share", false, "keep the GPUs this run frees, as before fair share: it neither waits in turn for others' GPUs nor lets go of its own for runs that wait")
	f.Int("max-gpus", 0, "the most GPUs this run keeps busy at once over all its hosts, to leave the rest of the lab to others (0: no cap; default: the inventory's max_gpus)")
	f.Duration("busy-recheck", dispatch.DefaultRecheck, "how long a GPU found busy, or locked by another gpudispatch run, or a host that could not set up a job's environment, is left alone before it is tried again")
	if !serve {
		f.Bool("dry-run", false, "print where each job would run; run nothing")
	}
	f.String("on-job-end", "", "run this command (sh -c, on this machine) as each job ends, with GPUDISPATCH_JOB_ID, _STATE, _EXIT, _HOST, _GPUS, _SECONDS, _STDOUT, _STDERR set (default: the inventory's hooks.job_end)")
	f.String("on-run-end", "", "run this command (sh -c, on this machine) as the run ends, with the counts by outcome (GPUDISPATCH_SUCCEEDED, _FAILED...) and GPUDISPATCH_LOG_DIR (default: the inventory's hooks.run_end)")
	f.Duration("hook-timeout", dispatch.DefaultHookTimeout, "how long a hook may run before it is killed, with what it started")
	f.Int("hook-jobs", dispatch.DefaultHookJobs, "how many job-end hooks run at once; the others wait their turn, in order")
	f.String("sync", "", "take a snapshot of this directory as the run starts and run the jobs in it on every host (what git would commit, minus .gpdignore; default: the inventory's sync:)")
	f.Int64("sync-limit", snapshot.DefaultLimit>>20, "the largest snapshot --sync takes, in MiB")
	f.Int64("return-limit", dispatch.DefaultReturnLimit>>20, "the most one job's return= files bring back, in MiB; the files past it stay on the host, named")
	f.Bool("json", false, "print one JSON object per event on stdout")
	f.BoolP("quiet", "q", false, "print only what went wrong, and the summary")
	f.BoolP("verbose", "v", false, "print queued and skipped jobs too")
	f.String("listen", "", "serve a live web page of the run on this address (e.g. 127.0.0.1:8420); its URL, with the token it needs, is printed at start")
}

// addKindFlags defines --model, --vram and --tags: the kind of GPU every
// job needs whose line does not say.
func addKindFlags(f *pflag.FlagSet) {
	f.String("model", "", "each job needs a GPU whose name contains one of these, as [model=A100|H100]")
	f.String("vram", "", "each job needs a GPU with at least this much memory, as [vram=40G]")
	f.String("tags", "", "each job needs a host with these inventory tags, as [tags=nvlink,ib]")
}

// readKind reads the flags of addKindFlags.
func readKind(v *viper.Viper) (dispatch.Kind, error) {
	k, err := dispatch.ParseKind(v.GetString("model"), v.GetString("vram"), v.GetString("tags"))
	if err != nil {
		return k, usageError("%v", err)
	}
	return k, nil
}

func readRunOptions(cmd *cobra.Command, v *viper.Viper, args []string) (runOptions, error) {
	lab, err := readLabOptions(v)
	if err != nil {
		return runOptions{}, err
	}
	o := runOptions{
		labOptions:  lab,
		logDir:      v.GetString("log-dir"),
		resume:      v.GetBool("resume"),
		retries:     v.GetInt("retries"),
		retryFailed: v.GetInt("retry-failed"),
		timeout:     v.GetDuration("timeout"),
		hostDown:    v.GetDuration("host-down-timeout"),
		skipBusy:    v.GetBool("skip-busy"),
		maxGPUs:     v.GetInt("max-gpus"),
		recheck:     v.GetDuration("busy-recheck"),
		hooks:       dispatch.Hooks{JobEnd: v.GetString("on-job-end"), RunEnd: v.GetString("on-run-end"), Timeout: v.GetDuration("hook-timeout"), Jobs: v.GetInt("hook-jobs")},
		dryRun:      v.GetBool("dry-run"),
		json:        v.GetBool("json"),
		quiet:       v.GetBool("quiet"),
		verbose:     v.GetBool("verbose"),
		listen:      v.GetString("listen"),
		syncLimit:   v.GetInt64("sync-limit") << 20,
		returnLimit: v.GetInt64("return-limit") << 20,
	}
	if dir := v.GetString("sync"); dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return o, usageError("--sync: %v", err)
		}
		o.sync = abs
	}
	if o.kind, err = readKind(v); err != nil {
		return o, err
	}
	if o.syncLimit <= 0 || o.returnLimit <= 0 {
		return o, usageError("--sync-limit and --return-limit: want a positive number of MiB")
	}
	gpus := v.GetString("gpus")
	// simple_gpu_scheduler's form: --gpus 0 1 2 cmds.txt. Bare integers right
	// after the flag (before any "--") are more GPU ids.
	if cmd.Flags().Changed("gpus") {
		dash := cmd.ArgsLenAtDash()
		for len(args) > 0 && dash != 0 && isGPUID(args[0]) {
			gpus += " " + args[0]
			args = args[1:]
			dash--
		}
	}
	if gpus != "" {
		ids, err := parseGPUList(gpus)
		if err != nil {
			return o, usageError("--gpus: %v", err)
		}
		o.gpus = ids
	}
	if o.inventory != "" && o.gpus != nil {
		return o, usageError("--inventory and --gpus: give one (--gpus is local mode without an inventory)")
	}
	if o.retries < 0 {
		return o, usageError("--retries: want 0 or more")
	}
	if o.retryFailed < 0 || o.retryFailed > dispatch.MaxRetries {
		return o, usageError("--retry-failed: want 0 to %d", dispatch.MaxRetries)
	}
	if o.timeout < 0 {
		return o, usageError("--timeout: want a positive duration")
	}
	if o.hooks.Jobs <= 0 {
		return o, usageError("--hook-jobs: want a positive number")
	}
	if o.hostDown <= 0 || o.recheck <= 0 || o.hooks.Timeout <= 0 {
		return o, usageError("--host-down-timeout, --busy-recheck and --hook-timeout: want a positive duration")
	}
	o.files = args
	return o, nil
}

func isGPUID(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0 && strconv.Itoa(n) == s
}

func parseGPUList(s string) ([]int, error) {
	var ids []int
	for _, w := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		if !isGPUID(w) {
			return nil, fmt.Errorf("%q is not a GPU id (0, 1, ...)", w)
		}
		id, _ := strconv.Atoi(w)
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil, errors.New("no GPU ids")
	}
	return ids, nil
}

func openInputs(s streams, files []string) ([]dispatch.Input, func(), error) {
	if len(files) == 0 {
		files = []string{"-"}
	}
	var inputs []dispatch.Input
	var opened []*os.File
	closeAll := func() {
		for _, f := range opened {
			f.Close()
		}
	}
	for _, name := range files {
		if name == "-" {
			inputs = append(inputs, dispatch.Input{R: s.in})
			continue
		}
		// A FIFO in the filesystem waits for a writer that may never come;
		// a pipe a shell gives (<(gpudispatch sweep ...), a link to an
		// anonymous pipe) is a stream, as stdin is.
		if fi, err := os.Lstat(name); err == nil && fi.Mode()&(fs.ModeNamedPipe|fs.ModeSocket|fs.ModeDevice) != 0 {
			closeAll()
			return nil, nil, usageError("job file %s is %s, not a file of jobs: give its jobs on stdin (cat %s | gpudispatch ...)", name, snapshot.FileKind(fi.Mode()), name)
		}
		f, err := os.Open(name)
		if err != nil {
			closeAll()
			return nil, nil, usageError("job file: %v", err)
		}
		opened = append(opened, f)
		inputs = append(inputs, dispatch.Input{Name: name, R: f})
	}
	return inputs, closeAll, nil
}

// noJobs reports whether inputs are job files (regular files, not standard
// input) with no job line among them; it rewinds them.
func noJobs(inputs []dispatch.Input) bool {
	for _, in := range inputs {
		f, ok := in.R.(*os.File)
		if !ok || in.Name == "" {
			return false
		}
		if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
			return false
		}
		none, err := dispatch.NoJobs(f)
		if _, serr := f.Seek(0, io.SeekStart); serr != nil || err != nil || !none {
			return false
		}
	}
	return len(inputs) > 0
}

func runRun(ctx context.Context, s streams, o runOptions) error {
	inv, err := loadInventory(o.labOptions)
	if err != nil {
		return err
	}
	syncTo(inv, o.sync)
	inputs, closeInputs, err := openInputs(s, o.files)
	if err != nil {
		return err
	}
	defer closeInputs()
	if !o.serve && noJobs(inputs) {
		// Nothing to run: no host is asked, no log dir is made.
		fmt.Fprintf(textTo(s.err), "gpudispatch: 0 jobs: nothing to do (no job line in %s)\n", strings.Join(o.files, ", "))
		return nil
	}
	if !o.serve && (slices.Contains(o.files, "-") || len(o.files) == 0) {
		if isTerminal(s.in) && !o.quiet {
			fmt.Fprintln(s.err, "gpudispatch: reading jobs from the terminal, one per line; end with Ctrl-D")
		}
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The code as it is now, before anything runs: taken while the hosts
	// are opened (a snapshot that cannot be taken is the run's error).
	code := &snapshots{limit: o.syncLimit, keep: o.keep}
	var said bytes.Buffer // what is said of them, once the hosts are opened
	if !o.quiet && !o.dryRun {
		code.w = &said
	}
	var snaps map[string]*snapshot.Snapshot
	taken := make(chan error, 1)
	go func() {
		var err error
		if snaps, err = code.forHosts(ctx, inv); err != nil {
			cancel(err) // no host waited for
		}
		taken <- err
	}()
	// The run starts once one host is up; the others join as they are
	// opened. A dry run reports on every host.
	id := ""
	if !o.dryRun {
		id = dispatch.NewID()
	}
	lab, states, settled, err := startHosts(ctx, s, o.labOptions, inv, id)
	if terr := <-taken; terr != nil {
		if err == nil {
			lab.Close()
		}
		return terr
	}
	if err != nil {
		return err
	}
	if code.w != nil {
		code.w = textTo(s.err)
		code.w.Write(said.Bytes())
	}
	defer lab.Close()
	opts := dispatch.Options{
		ID:              id,
		Executor:        lab,
		LogDir:          o.logDir,
		Resume:          o.resume,
		Retries:         o.retries,
		RetryFailed:     o.retryFailed,
		Timeout:         o.timeout,
		Kind:            o.kind,
		HostDownTimeout: o.hostDown,
		ReturnLimit:     o.returnLimit,
		SkipBusy:        o.skipBusy || inv.SkipBusy,
		BusyMemoryMB:    inv.BusyMemoryMB,
		MaxGPUs:         cmp.Or(o.maxGPUs, inv.MaxGPUs),
		Recheck:         o.recheck,
		Hooks:           o.hooks,
		Serve:           o.serve,
		Environ:         os.Environ(),
		Snapshots:       snaps,
		OpenSnapshot:    openSnapshot,
		TakeDeps:        takeDeps,
	}
	opts.Hooks.JobEnd = cmp.Or(opts.Hooks.JobEnd, inv.Hooks.JobEnd)
	opts.Hooks.RunEnd = cmp.Or(opts.Hooks.RunEnd, inv.Hooks.RunEnd)
	opts.Inventory, opts.Opening = lab.Usable()
	opts.Down, opts.LeftOut = labfeed.Absent(states)
	if o.dryRun {
		summary, err := dispatch.Plan(opts, inputs, s.out)
		if err != nil {
			return usageError("%v", err)
		}
		return exitWith(exitFor(summary))
	}
	// On a terminal, the live view; elsewhere a line per start and end.
	text := textTo(s.err)
	messages := text
	var view *live.View
	if isTerminal(s.err) && !o.quiet && os.Getenv("TERM") != "dumb" {
		view = live.Start(s.err, opts.Inventory, live.Options{Verbose: o.verbose, Opening: opts.Opening})
		opts.Reporters = append(opts.Reporters, view)
		messages = view // printed above it, never over it
	} else {
		opts.Reporters = append(opts.Reporters, &dispatch.TextReporter{W: text, Quiet: o.quiet, Verbose: o.verbose})
	}
	if o.json {
		opts.Reporters = append(opts.Reporters, dispatch.JSONReporter{W: s.out})
	}
	if code.w != nil {
		code.w = messages // a reload's snapshots are said above the live view
	}
	// An edit of the inventory keeps --hosts and --sync, and takes the
	// snapshots of what it newly syncs.
	feed := labfeed.NewFeed(lab, func(ctx context.Context, inv *inventory.Inventory) (map[string]*snapshot.Snapshot, error) {
		if err := keepHosts(inv, o.hosts); err != nil {
			return nil, err
		}
		syncTo(inv, o.sync)
		return code.forHosts(ctx, inv)
	})
	opts.Updates = feed.Updates()
	watchCtx, stopWatching := context.WithCancel(ctx)
	var watching sync.WaitGroup
	watching.Go(func() { feed.Opened(watchCtx, settled) })
	if inv.File != "" {
		watching.Go(func() { feed.Watch(watchCtx, inv) })
	}
	// Before the lab closes: a reload may be opening a host.
	defer func() { stopWatching(); watching.Wait() }()
	drain := make(chan struct{})
	opts.Drain = drain
	go handleSignals(ctx, messages, drain, cancel)
	opts.Control = dispatch.NewControl()
	if o.listen != "" {
		page, err := web.Listen(o.listen, web.Options{Control: opts.Control, Probe: lab.ProbeGPUs})
		if err != nil {
			return usageError("%v", err)
		}
		defer page.Close()
		opts.Reporters = append(opts.Reporters, page)
		if !web.IsLoopback(o.listen) {
			fmt.Fprintf(messages, "gpudispatch: warning: the web page listens on %s, beyond this machine, in plain HTTP: its token and everything it shows can be read on the network\n", o.listen)
		}
		fmt.Fprintf(messages, "gpudispatch: web page: %s\n", page.URL())
	}
	socket := controlSocket(o, messages, &opts)
	defer socket.close()

	if o.serve {
		inputs = nil
	}
	summary, err := dispatch.Run(ctx, opts, inputs)
	socket.close()
	// The run did not wait for the hosts still being opened: say which.
	for _, p := range lab.Pending() {
		fmt.Fprintf(messages, "gpudispatch: warning: %s (%s) was still being opened as the run ended (%s, for %s): it got no job\n",
			p.Name, p.Addr, p.Doing, dispatch.RoundDuration(time.Since(p.Since)))
	}
	if view != nil {
		view.Stop()
	}
	if err != nil {
		return usageError("%v", err)
	}
	summary.Write(text)
	if summary.Interrupted && !o.serve && !summary.Succeeded() {
		fmt.Fprintf(text, "gpudispatch: to go on, run the same command again with --resume (log dir %s): the jobs that succeeded are skipped, the others run\n", o.logDir)
	}
	return exitWith(exitFor(summary))
}

// socket is a run's control socket, once Run has made it.
type socket struct {
	l   *control.Listener
	srv *control.Server
}

// controlSocket has Run make the control socket in the log dir once it
// holds the log dir's claim, and answer on it: serve needs it, and a run
// without it only warns (cancel, retry and a live status then cannot reach
// it).
func controlSocket(o runOptions, messages io.Writer, opts *dispatch.Options) *socket {
	ctl := opts.Control
	sock := &socket{}
	opts.Started = func() error {
		l, err := control.Listen(o.logDir)
		if err != nil {
			if o.serve {
				return fmt.Errorf("serve: %w", err)
			}
			fmt.Fprintf(messages, "gpudispatch: warning: no control socket, so cancel, retry and a live status cannot reach this run: %v\n", err)
			return nil
		}
		sock.l, sock.srv = l, control.Serve(l, ctl, o.logDir)
		if o.serve && !o.quiet {
			fmt.Fprintf(messages, "gpudispatch: serving %s: add jobs with gpudispatch submit -o %s; stop with Ctrl-C or gpudispatch stop -o %s\n", o.logDir, o.logDir, o.logDir)
		}
		return nil
	}
	return sock
}

// close answers the requests under way, then removes the socket.
func (s *socket) close() {
	if s.l != nil {
		s.srv.Close()
		s.l.Close()
		s.l = nil
	}
}

func exitWith(code int) error {
	if code == exitOK {
		return nil
	}
	return &exitError{code: code}
}

// handleSignals turns the first SIGINT or SIGTERM into a drain and the
// second into a cancel. SIGHUP (a closed terminal or ssh session) is noted
// and otherwise ignored: the run goes on. It returns when ctx ends.
func handleSignals(ctx context.Context, messages io.Writer, drain chan<- struct{}, cancel context.CancelCauseFunc) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	drained := false
	for {
		select {
		case <-ctx.Done():
			return
		case sig := <-sigs:
			switch {
			case sig == syscall.SIGHUP:
				fmt.Fprintln(messages, "gpudispatch: SIGHUP ignored; the run goes on")
			case !drained:
				drained = true
				close(drain)
				fmt.Fprintln(messages, "gpudispatch: draining: no new job starts, running jobs finish; send it again (Ctrl-C) to kill them")
			default:
				fmt.Fprintln(messages, "gpudispatch: cancelling: killing the running jobs")
				cancel(dispatch.StopCause("cancelled by a second Ctrl-C or SIGTERM"))
				return
			}
		}
	}
}
