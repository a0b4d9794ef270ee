package inventory

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Slurm makes a host a Slurm cluster: the host is its login node, and each
// job is a batch job there (sbatch), on GPUs Slurm chooses.
type Slurm struct {
	// Partition is sbatch's --partition (required); Account and QOS are
	// --account and --qos when set.
	Partition string
	Account   string
	QOS       string
	// MaxJobs bounds this run's jobs in the cluster at once, pending and
	// running together: the cluster's slots.
	MaxJobs int
	// Time is the default --time (Slurm's format); a job's timeout= wins.
	Time string
	// SbatchArgs are more sbatch options, passed as they are.
	SbatchArgs []string
	// Workdir, on the cluster's shared filesystem, holds the jobs' output
	// and exit files ("~/" is the user's home there).
	Workdir string
	// Poll is how often the cluster's queue is asked about the run's jobs.
	Poll time.Duration
}

// Defaults of a slurm block.
const (
	DefaultSlurmMaxJobs = 16
	DefaultSlurmWorkdir = "~/.gpudispatch"
	DefaultSlurmPoll    = 5 * time.Second
)

// slurmTime is Slurm's --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or
// D-HH:MM:SS.
var slurmTime = regexp.MustCompile(`^(\d+|\d+:\d+|\d+:\d+:\d+|\d+-\d+|\d+-\d+:\d+|\d+-\d+:\d+:\d+)$`)

// ownSbatchOptions are the sbatch options gpudispatch sets itself.
var ownSbatchOptions = []string{"--job-name", "-J", "--output", "-o", "--error", "-e", "--parsable",
	"--requeue", "--no-requeue", "--array", "-a", "--wrap", "--gres", "--gpus", "-G", "--chdir", "-D",
	"--partition", "-p", "--account", "-A", "--qos", "-q", "--time", "-t"}

// slurm reads a host's slurm block (a block that is not a mapping still
// makes the host a cluster, so that its errors are the block's).
func (c *checker) slurm(v *node, key string) *Slurm {
	s := &Slurm{MaxJobs: DefaultSlurmMaxJobs, Workdir: DefaultSlurmWorkdir, Poll: DefaultSlurmPoll}
	c.fields(v, key, map[string]func(string, *node){
		"partition": c.str(&s.Partition),
		"account":   c.str(&s.Account),
		"qos":       c.str(&s.QOS),
		"max_jobs":  c.integer(&s.MaxJobs, 1, 100000),
		"time":      c.slurmTime(&s.Time),
		"workdir":   c.str(&s.Workdir),
		"poll":      c.duration(&s.Poll, time.Second, time.Hour),
		"sbatch_args": func(k string, v *node) {
			s.SbatchArgs = c.sbatchArgs(v, k)
		},
	})
	if v.isMap && s.Partition == "" {
		c.fail(v, key+".partition", "missing: name the Slurm partition the jobs go to (sinfo lists them)")
	}
	return s
}

func (c *checker) slurmTime(dst *string) func(string, *node) {
	return func(key string, v *node) {
		var s string
		if n, ok := c.intValue(v); ok && n > 0 {
			s = strconv.Itoa(n)
		} else if !v.isMap && !v.isSeq && v.typ == tString {
			s = v.text
		}
		if !slurmTime.MatchString(s) {
			c.fail(v, key, `want a Slurm time limit ("4:00:00", "1-00:00:00", or minutes), got %s`, v.describe())
			return
		}
		*dst = s
	}
}

// duration accepts a Go duration ("5s", "1m") or a number of seconds, in
// [lo, hi].
func (c *checker) duration(dst *time.Duration, lo, hi time.Duration) func(string, *node) {
	return func(key string, v *node) {
		var d time.Duration
		var err error
		if n, ok := c.intValue(v); ok {
			d = time.Duration(n) * time.Second
		} else if !v.isMap && !v.isSeq && v.typ == tString {
			d, err = time.ParseDuration(v.text)
		} else {
			err = fmt.Errorf("not a duration")
		}
		if err != nil || d < lo || d > hi {
			c.fail(v, key, "want a duration from %s to %s (\"5s\", \"1m\"), got %s", lo, hi, v.describe())
			return
		}
		*dst = d
	}
}

func (c *checker) sbatchArgs(v *node, key string) []string {
	if !v.isSeq {
		c.fail(v, key, `want a list of sbatch options (["--mem=32G"]), got %s`, v.describe())
		return nil
	}
	var args []string
	for i, item := range v.items {
		k := fmt.Sprintf("%s[%d]", key, i)
		if item.isMap || item.isSeq || item.typ != tString || strings.IndexByte(item.text, 0) >= 0 {
			c.fail(item, k, "want an sbatch option as a string, got %s", item.describe())
			continue
		}
		name, _, _ := strings.Cut(item.text, "=")
		switch {
		case !strings.HasPrefix(name, "-"):
			c.fail(item, k, "%q: want an option (\"--mem=32G\"): a value goes after = in the same string", item.text)
			continue
		case containsOption(name):
			c.fail(item, k, "%s is set by gpudispatch (use the slurm block's keys, or gpus= on the job line)", name)
			continue
		}
		args = append(args, item.text)
	}
	return args
}

// containsOption reports whether option (as written, maybe with its value
// attached: -pgpu) is one of ownSbatchOptions.
func containsOption(option string) bool {
	for _, o := range ownSbatchOptions {
		if option == o || len(o) == 2 && strings.HasPrefix(option, o) && !strings.HasPrefix(option, "--") {
			return true
		}
	}
	return false
}
