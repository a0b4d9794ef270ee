package hosts

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

// shellScript is run by bash on the target machine; see shell.sh.
//
//go:embed shell.sh
var shellScript string

// bootstrap is the whole command line handed to the target machine: bash,
// reading the script code from stdin, so that nothing job-specific is ever
// quoted. name, and the tag when there is one (checked by the caller), stay
// in the shell's argv, where Reap and a lock takeover look for them.
//
// read -N takes the script in one read(2) where read with a delimiter takes a
// system call per byte: bash cannot read a pipe past a delimiter. In the C
// locale -N counts bytes.
func bootstrap(code, name, tag string) string {
	line := `exec bash -c 'LC_ALL=C IFS= read -r -N ` + strconv.Itoa(len(code)) + ` w && eval "$w"' ` + name
	if tag == "" {
		return line
	}
	return line + " " + tag
}

// tagRE is what an executor.Command.Tag may hold: nothing a shell or grep treats
// specially but '.'.
var tagRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// Supervision sets how a job shell watches over its job.
type Supervision struct {
	// Heartbeat is how often the coordinator proves it is alive; the shell
	// kills the job after three missed beats.
	Heartbeat time.Duration
	// Grace is the time between TERM and KILL.
	Grace time.Duration
}

// Defaults for Options: a dead host or coordinator is noticed within about
// 30 s, and a job gets 10 s to exit after TERM.
const (
	DefaultKeepalive      = 10 * time.Second
	DefaultGrace          = 10 * time.Second
	DefaultConnectTimeout = 10 * time.Second
)

// ErrNUL is returned for a command or environment value with a NUL byte,
// which no shell can receive.
var ErrNUL = errors.New("contains a NUL byte")

// shellHeader starts a job shell: shell.sh itself, then the fields it
// reads once, each terminated by NUL.
func shellHeader(s Supervision) []byte {
	return []byte(shellScript +
		strconv.FormatFloat(3*s.Heartbeat.Seconds(), 'f', 3, 64) + "\x00" +
		strconv.FormatFloat(s.Grace.Seconds(), 'f', 3, 64) + "\x00")
}

// fields encodes c for a job shell's stdin, after the job's end mark: the
// record "j" and the byte lengths of the fields, space-separated, then NUL,
// then the fields one after another with nothing between them: end mark,
// workdir, setup, script, then one per environment entry. The shell reads
// each field with one system call.
func fields(c executor.Command, mark string) ([]byte, error) {
	if c.Tag != "" && !tagRE.MatchString(c.Tag) {
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
