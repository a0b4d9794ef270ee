package jobshell

import (
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"al.essio.dev/pkg/shellescape"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// script is run by bash on the target machine: shell.sh, after the
// activation of a job's env (activate.sh).
var script = spawn.Prelude + activation + shellCode

//go:embed shell.sh
var shellCode string

//go:embed activate.sh
var activation string

// Activation is shell code that activates p's env (its modules, conda env
// and venv) where it runs, or exits with status spawn.ExitUnsafe after saying why on
// stderr, for a shell that runs one job (a batch job's); "" when p asks
// for none.
func Activation(p executor.Prelude) string {
	if p.Conda == "" && p.Venv == "" && len(p.Modules) == 0 {
		return ""
	}
	return activation + "_g_activate " + shellescape.Quote(p.Conda) + " " + shellescape.Quote(p.Venv) + " " +
		shellescape.Quote(strings.Join(p.Modules, "\n")) + " || exit " + strconv.Itoa(spawn.ExitUnsafe) + "\nunset -f _g_activate\n"
}

// ProcessName is a job shell's $0: with the shell's tag after it, ps shows
// which shells live on a machine.
const ProcessName = "gpudispatch-job"

// tagRE is what an executor.Command.Tag may hold: nothing a shell or grep
// treats specially but '.'.
var tagRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// ValidTag reports whether tag may name a shell: letters, digits, '.', '_'
// and '-'.
func ValidTag(tag string) bool { return tagRE.MatchString(tag) }

// Supervision sets how a job shell runs its jobs and watches over them.
type Supervision struct {
	// Heartbeat is how often a machine that was cut off is looked at
	// again.
	Heartbeat time.Duration
	// Grace is the time between TERM and KILL.
	Grace time.Duration
	// Login says how often the login profile is read.
	Login Login
	// SetupLimit is how long a job shell's set-up (its login profile, then
	// the Prelude) may take; a shell still in it then is ended there, and
	// Run says the machine is unfit (0: no limit).
	SetupLimit time.Duration
	// KeepCode is how long the machine keeps snapshots of code that no run
	// used (0: codestore.DefaultKeep).
	KeepCode time.Duration
}

// Login says how often a machine's login profile is read.
type Login int

const (
	// LoginPerSlot: where the login shell is bash, each job shell reads the
	// profile once, and its jobs are forks of it; it is replaced once a
	// profile file changes. Other login shells run "$SHELL -lc" per job.
	LoginPerSlot Login = iota
	// LoginPerJob: every job runs "$SHELL -lc" of its own.
	LoginPerJob
	// LoginNone: no profile is read; jobs are forks of the job shell, with
	// the environment it was started with (a local machine: the
	// coordinator's, an activated conda env or venv included).
	LoginNone
)

// ErrNUL is returned for a command or environment value with a NUL byte,
// which no shell can receive.
var ErrNUL = errors.New("contains a NUL byte")

// header starts a job shell: shell.sh itself, then the fields it reads
// once, each terminated by NUL: grace, the set-up's limit, login, then the
// prelude p (see shell.sh), then, for a copy, the state st. With share,
// the shell hands its own state on once set up.
func header(s Supervision, p executor.Prelude, share bool, st *State) []byte {
	login := "slot"
	switch {
	case s.Login == LoginPerJob:
		login = "job"
	case s.Login == LoginNone:
		login = "none"
	case st != nil:
		login = "copy"
	case share:
		login = "share"
	}
	interactive := ""
	if p.Interactive {
		interactive = "1"
	}
	f := append([]string{strconv.FormatFloat(s.Grace.Seconds(), 'f', 3, 64), strconv.FormatFloat(s.SetupLimit.Seconds(), 'f', 3, 64), login,
		interactive, p.Workdir, p.Conda, p.Venv, strings.Join(p.Modules, "\n"), p.Setup}, p.Env...)
	b := append([]byte(script), spawn.Record(f...)...)
	if login == "copy" {
		b = append(b, spawn.Record(st.parts()...)...)
	}
	return b
}

// placing is where a job's output starts in its shell's stream files, and
// whether the shell starts new ones for it.
type placing struct {
	rotate           bool
	outBase, errBase int64
}

// check says what of c no job shell can take: a tag or an environment
// name of other characters, or a NUL byte, which a bash variable cannot
// hold.
func check(c executor.Command) error {
	if c.Tag != "" && !ValidTag(c.Tag) {
		return fmt.Errorf("tag %q: want letters, digits, '.', '_' and '-'", c.Tag)
	}
	for _, kv := range c.Env {
		if name, _, ok := strings.Cut(kv, "="); !ok || !inventory.ValidEnvName(name) {
			return fmt.Errorf("environment entry %q: want NAME=value with a shell variable name", kv)
		}
		if strings.IndexByte(kv, 0) >= 0 {
			return fmt.Errorf("environment entry %q: %w", kv[:strings.IndexByte(kv, '=')], ErrNUL)
		}
	}
	for _, f := range []struct{ what, v string }{{"the command", c.Script}, {"the workdir", c.Workdir}, {"the setup", c.Setup},
		{"the conda env", c.Conda}, {"the venv", c.Venv}, {"the about line", c.About}} {
		if strings.IndexByte(f.v, 0) >= 0 {
			return fmt.Errorf("%s: %w", f.what, ErrNUL)
		}
	}
	for _, m := range c.Modules {
		if !inventory.ValidModule(m) {
			return fmt.Errorf("module %q: want letters, digits and ./_+-@:", m)
		}
	}
	for _, kv := range c.Prelude.Env {
		if name, _, ok := strings.Cut(kv, "="); !ok || !inventory.ValidEnvName(name) || strings.IndexByte(kv, 0) >= 0 {
			return fmt.Errorf("host environment entry %q: want NAME=value with a shell variable name and no NUL byte", kv)
		}
	}
	return nil
}

// fields encodes c, which check found fit, for a job shell's stdin, after
// the job's end mark: "j", the length of the header in 8 decimal digits,
// the header (the byte length of the fields together, then of each,
// space-separated), then the fields one after another with nothing between
// them: end mark, tag, about, time limit in seconds, rotate, the stream
// offsets, script, the job's environment as bash code (exports), and its
// GPUs for the job's record on the machine. (Workdir and setup are the
// shell's: see header.) The shell reads the record in four system calls,
// and quotes nothing per job: bash spends 50 µs of a job's 1.5 ms of CPU
// splitting and quoting four variables.
func fields(c executor.Command, mark string, at placing) []byte {
	limit := "0"
	if c.Timeout > 0 {
		limit = strconv.FormatFloat(c.Timeout.Seconds(), 'f', 3, 64)
	}
	rotate := ""
	if at.rotate {
		rotate = "1"
	}
	about := strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, c.About)
	return append([]byte("j"), spawn.Record(mark, c.Tag, about, limit, rotate,
		strconv.FormatInt(at.outBase, 10), strconv.FormatInt(at.errBase, 10),
		c.Script, exports(c.Env), recordGPUs(c.Env))...)
}

// exports is bash code that exports env, a line per entry ("" for none).
func exports(env []string) string {
	var b strings.Builder
	for _, kv := range env {
		b.WriteString("builtin export " + shellescape.Quote(kv) + "\n")
	}
	return b.String()
}

// recordGPUs is what a job's record on the machine says of its GPUs: the
// last non-empty CUDA_VISIBLE_DEVICES of env, or "-".
func recordGPUs(env []string) string {
	gpus := "-"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "CUDA_VISIBLE_DEVICES="); ok && v != "" {
			gpus = v
		}
	}
	return gpus
}
