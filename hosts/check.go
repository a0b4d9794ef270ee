package hosts

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// EnvCheck is what a job gets on a host, seen from inside a job: run as
// one, in its environment (the login shell, the workdir, the env
// activated, the setup), on one of the host's GPUs.
type EnvCheck struct {
	Host string `json:"host"`
	// Note, when set, says why the host was not checked (a Slurm cluster).
	Note string `json:"note,omitempty"`
	// Err is why the host fails its check: it is down, cannot set up the
	// job's environment, or Command failed there. nil: it passed.
	Err error `json:"-"`
	// Shell is the login shell; Path the job's PATH; Python what
	// python3 -V says ("" when there is none); Env the active env (conda
	// NAME, venv DIR, or "").
	Shell  string `json:"shell,omitempty"`
	Path   string `json:"path,omitempty"`
	Python string `json:"python,omitempty"`
	Env    string `json:"env,omitempty"`
	// GPU is the GPU the check ran on (-1: none); Driver and CUDA what
	// nvidia-smi says of it (Driver "-": there is no nvidia-smi).
	GPU    int    `json:"gpu"`
	Driver string `json:"driver,omitempty"`
	CUDA   string `json:"cuda,omitempty"`
	// Workdir is where jobs start, FreeKiB the space left there.
	Workdir string `json:"workdir,omitempty"`
	FreeKiB int64  `json:"free_kib,omitempty"`
	// Linger is what loginctl says of the user's linger ("yes", "no"), or
	// "" when the host cannot tell (no systemd).
	Linger string `json:"linger,omitempty"`
	// Command is the command asked for, Output what it printed (stdout and
	// stderr together), Exit its exit status.
	Command string `json:"command,omitempty"`
	Output  string `json:"output,omitempty"`
	Exit    *int   `json:"exit,omitempty"`
}

// checkScript prints what a job sees, one "key<TAB>value" line each, then
// NUL and a newline, then runs the command it is given (its output and
// errors together), if any, and exits with its status. nvidia-smi gets
// the probe timeout, so that a host whose driver hangs holds up no check
// (it then shows no driver version); linger is read from the file logind
// keeps for it, not asked of loginctl, so that a stuck D-Bus holds up no
// check either.
const checkScript = `printf 'shell\t%s\n' "${SHELL:-/bin/bash}"
printf 'path\t%s\n' "$PATH"
printf 'python\t%s\n' "$(python3 -V 2>&1 | head -n 1)"
if [ -n "${CONDA_DEFAULT_ENV:-}" ]; then printf 'env\tconda %s\n' "$CONDA_DEFAULT_ENV"; fi
if [ -n "${VIRTUAL_ENV:-}" ]; then printf 'env\tvenv %s\n' "$VIRTUAL_ENV"; fi
command -v nvidia-smi >/dev/null || printf 'driver\t-\n'
limit=
! command -v timeout >/dev/null || limit="timeout -s KILL $GPUDISPATCH_CHECK_LIMIT"
$limit nvidia-smi 2>/dev/null | sed -n 's/.*Driver Version: *\([^ ]*\).*CUDA Version: *\([^ ]*\).*/driver\t\1\ncuda\t\2/p' | head -n 2
printf 'workdir\t%s\n' "$PWD"
printf 'free\t%s\n' "$(df -Pk . 2>/dev/null | awk 'NR == 2 { print $4 }')"
linger=${GPUDISPATCH_LINGER_DIR:-/var/lib/systemd/linger}
if [ -n "${GPUDISPATCH_LINGER_DIR:-}" ] || [ -d /var/lib/systemd ]; then
  if [ -e "$linger/${USER:-$(id -un)}" ]; then printf 'linger\tyes\n'; else printf 'linger\tno\n'; fi
fi
printf '\0\n'
if [ -n "$GPUDISPATCH_CHECK" ]; then exec 2>&1; eval "$GPUDISPATCH_CHECK"; fi
`

// CheckEnv runs a look at what a job gets on host, with its prelude p and
// its env (NAME=value), on GPU gpu (-1: none), then command when it is not
// "": a job's view of the host, before a sweep runs into what is wrong
// there.
func (l *Lab) CheckEnv(ctx context.Context, host string, gpu int, p executor.Prelude, env []string, command string) EnvCheck {
	c := EnvCheck{Host: host, GPU: gpu, Command: command}
	if gpu >= 0 {
		env = append(env, "CUDA_VISIBLE_DEVICES="+strconv.Itoa(gpu), "CUDA_DEVICE_ORDER=PCI_BUS_ID")
	}
	limit := cmp.Or(l.opts.ProbeTimeout, DefaultProbeTimeout)
	env = append(env, "GPUDISPATCH_HOST="+host, "GPUDISPATCH_CHECK="+command,
		"GPUDISPATCH_CHECK_LIMIT="+strconv.Itoa(int(limit.Seconds()+0.5)))
	var out, errs bytes.Buffer
	code, err := l.Run(ctx, host, executor.Command{Script: checkScript, Env: env, Prelude: p}, &out, &errs)
	if err != nil {
		c.Err = err
		return c
	}
	look, rest, ok := strings.Cut(out.String(), "\x00\n")
	if !ok {
		c.Err = fmt.Errorf("%s: the look at a job's environment did not finish (exit status %d): %s", host, code, strings.TrimSpace(errs.String()))
		return c
	}
	for line := range strings.Lines(look) {
		k, v, _ := strings.Cut(strings.TrimRight(line, "\n"), "\t")
		switch k {
		case "shell":
			c.Shell = v
		case "path":
			c.Path = v
		case "python":
			if !strings.Contains(v, "not found") {
				c.Python = v
			}
		case "env":
			c.Env = v
		case "driver":
			c.Driver = v
		case "cuda":
			c.CUDA = v
		case "workdir":
			c.Workdir = v
		case "free":
			c.FreeKiB, _ = strconv.ParseInt(v, 10, 64)
		case "linger":
			c.Linger = v
		}
	}
	if command != "" {
		c.Output = rest + errs.String()
		c.Exit = &code
		if code != 0 {
			c.Err = fmt.Errorf("%s: %q exited with status %d", host, command, code)
		}
	}
	return c
}

// WriteChecks prints checks for people: a block per host, its findings
// one per line, then the command's output, indented.
func WriteChecks(w io.Writer, checks []EnvCheck) error {
	for _, c := range checks {
		status := "ok"
		if c.Err != nil {
			status = "FAILED: " + c.Err.Error()
			var unfit *executor.UnfitError
			if errors.As(c.Err, &unfit) {
				status = "FAILED: cannot set up a job's environment: " + unfit.Why
			}
		}
		if c.Note != "" {
			status = c.Note
		}
		fmt.Fprintf(w, "%s  %s\n", c.Host, status)
		if c.Shell == "" {
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		row := func(k, v string) { fmt.Fprintf(tw, "  %s\t%s\n", k, v) }
		row("shell", c.Shell)
		row("PATH", pathHead(c.Path, 3))
		row("python3", cmp.Or(c.Python, "none on PATH"))
		row("env", cmp.Or(c.Env, "none active"))
		switch {
		case c.Driver == "-":
			row("GPU", fmt.Sprintf("%d: no nvidia-smi on the job's PATH", c.GPU))
		case c.Driver != "":
			row("GPU", fmt.Sprintf("%d: driver %s, CUDA %s", c.GPU, c.Driver, c.CUDA))
		case c.GPU >= 0:
			row("GPU", fmt.Sprintf("%d: nvidia-smi gave no driver version", c.GPU))
		}
		row("workdir", fmt.Sprintf("%s, %s free", c.Workdir, kib(c.FreeKiB)))
		row("linger", cmp.Or(c.Linger, "unknown (no systemd)"))
		if c.Exit != nil {
			row("command", fmt.Sprintf("%s: exit status %d", c.Command, *c.Exit))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for line := range strings.Lines(strings.TrimRight(c.Output, "\n")) {
			if _, err := fmt.Fprintf(w, "    %s", strings.TrimRight(line, "\n")+"\n"); err != nil {
				return err
			}
		}
	}
	return nil
}

// WriteChecksJSON prints one JSON object per host, with "error" when it
// failed its check.
func WriteChecksJSON(w io.Writer, checks []EnvCheck) error {
	enc := json.NewEncoder(w)
	for _, c := range checks {
		v := struct {
			EnvCheck
			Error string `json:"error,omitempty"`
		}{EnvCheck: c}
		if c.Err != nil {
			v.Error = c.Err.Error()
		}
		if err := enc.Encode(v); err != nil {
			return err
		}
	}
	return nil
}

// pathHead is the first n entries of path, then how many more.
func pathHead(path string, n int) string {
	parts := strings.Split(path, ":")
	if len(parts) <= n {
		return path
	}
	return strings.Join(parts[:n], ":") + fmt.Sprintf(":… (%d more)", len(parts)-n)
}

// kib says a size in KiB for people.
func kib(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d KiB", n)
}
