package jobshell

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// script is run by bash on the target machine; see shell.sh.
//
//go:embed shell.sh
var script string

// ProcessName is a job shell's $0: with the shell's tag after it, ps shows
// which shells live on a machine (TagPattern).
const ProcessName = "gpudispatch-job"

// tagRE is what an executor.Command.Tag may hold: nothing a shell or grep
// treats specially but '.'.
var tagRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// ValidTag reports whether tag may name a shell: letters, digits, '.', '_'
// and '-'.
func ValidTag(tag string) bool { return tagRE.MatchString(tag) }

// TagPattern is a grep -e pattern that matches the argv (ps -o args) of the
// job shell tagged tag, and not the argv of the grep that looks for it.
func TagPattern(tag string) string {
	return ProcessName + "[ ]" + strings.ReplaceAll(tag, ".", "[.]") + "$"
}

// Supervision sets how a job shell runs its jobs and watches over them.
type Supervision struct {
	// Heartbeat is how often the coordinator proves it is alive; the shell
	// kills the job after three missed beats.
	Heartbeat time.Duration
	// Grace is the time between TERM and KILL.
	Grace time.Duration
	// Login says how often the login profile is read.
	Login Login
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
)

// ErrNUL is returned for a command or environment value with a NUL byte,
// which no shell can receive.
var ErrNUL = errors.New("contains a NUL byte")

// header starts a job shell: shell.sh itself, then the fields it reads
// once, each terminated by NUL.
func header(s Supervision) []byte {
	login := "slot"
	if s.Login == LoginPerJob {
		login = "job"
	}
	return []byte(script +
		strconv.FormatFloat(3*s.Heartbeat.Seconds(), 'f', 3, 64) + "\x00" +
		strconv.FormatFloat(s.Grace.Seconds(), 'f', 3, 64) + "\x00" +
		login + "\x00")
}

// fields encodes c for a job shell's stdin, after the job's end mark: the
// record "j" and the byte lengths of the fields, space-separated, then NUL,
// then the fields one after another with nothing between them: end mark,
// workdir, setup, script, then one per environment entry. The shell reads
// each field with one system call.
func fields(c executor.Command, mark string) ([]byte, error) {
	if c.Tag != "" && !ValidTag(c.Tag) {
		return nil, fmt.Errorf("tag %q: want letters, digits, '.', '_' and '-'", c.Tag)
	}
	for _, kv := range c.Env {
		if name, _, ok := strings.Cut(kv, "="); !ok || !inventory.ValidEnvName(name) {
			return nil, fmt.Errorf("environment entry %q: want NAME=value with a shell variable name", kv)
		}
	}
	fields := append([]string{mark, c.Workdir, c.Setup, c.Script}, c.Env...)
	var b bytes.Buffer
	b.WriteByte('j')
	for i, f := range fields {
		// Bash variables cannot hold NUL: it would be dropped.
		if strings.IndexByte(f, 0) >= 0 {
			return nil, fmt.Errorf("job shell field %d: %w", i, ErrNUL)
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(len(f)))
	}
	b.WriteByte(0)
	for _, f := range fields {
		b.WriteString(f)
	}
	return b.Bytes(), nil
}
