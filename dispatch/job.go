package dispatch

import (
	"strconv"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/snapshot"
)

// Job is one command from the input and where it may run.
type Job struct {
	// Seq is the job's number, its id unless Name is set: jobs are
	// numbered in input order, rejected lines included, 1, 2, 3... in a new
	// log dir and after the earlier runs' numbers in one that has some,
	// and a job that --resume matches keeps its number (see numbers).
	// Waiting jobs of equal priority go in its order.
	Seq int
	// Name is the name= option; "" when not given.
	Name string
	// File is the input's name ("" for stdin); Line is the job's first line.
	File string
	Line int
	// Text is the job as written, prefix and continuation lines included:
	// with Occurrence (the how-many-th time this Text appears in the input)
	// it identifies the job across runs for --resume.
	Text       string
	Occurrence int
	// Command is what the shell runs: Text without the placement prefix.
	Command string
	// Host pins the job to a host ("" for any); GPU to one of its GPUs (-1 for any).
	Host string
	GPU  int
	// GPUs is how many GPUs of one host the job needs together (at least 1).
	GPUs int
	// Nodes is how many hosts the job runs on at once ([nodes=N], at
	// least 1): one part on each, GPUs GPUs there, all started together
	// and ended together.
	Nodes int
	// Timeout is the job's own limit (0: the run's --timeout).
	Timeout time.Duration
	// Priority orders the queue: higher first, equal ones in arrival order.
	Priority int
	// Prefer is a soft placement: the job goes to host Prefer (GPU
	// PreferGPU, -1 for any) when a slot there is free as it is placed, else
	// anywhere it may go. "" for none.
	Prefer    string
	PreferGPU int
	// Conda is the conda env the job runs in, instead of its host's conda:
	// ("" for the host's).
	Conda string
	// Return are the paths (relative to the workdir, globs allowed) the
	// job brings back into LOGDIR/ID/ once it ends, instead of its
	// host's (nil: the host's).
	Return []string
	// MemMB is the GPU memory (MiB) the job declares it needs on each of
	// its GPUs ([mem=]; 0: its host's mem:, else none, and it takes a slot).
	MemMB int
	// Retries is how many times the job is run again when it fails (exits
	// non-zero) or times out ([retries=N]; -1: the run's RetryFailed).
	Retries int
	// Models, VRAMMB and Tags say what kind of GPU the job needs
	// ([model=A100|H100], [vram=40G], [tags=nvlink,ib]): one whose name
	// nvidia-smi gives contains one of Models (any case), with at least
	// VRAMMB MiB of memory, on a host with every one of Tags. nil and 0:
	// any.
	Models []string
	VRAMMB int
	Tags   []string
	// modelKeys are Models in lower case, made by the scheduler's first
	// look at them (gpu.suits).
	modelKeys []string
	// After and AfterAny are the jobs this one waits for, as written
	// (numbers, names, globs over names): until each succeeded, or each
	// ended whatever its outcome.
	After, AfterAny []string
	// Code is the snapshot of the code a submit took for the job (submit
	// --sync): its workdir on any host, instead of the host's (nil: the
	// host's workdir or sync).
	Code *snapshot.Snapshot
	// CallerEnv is the environment of whoever submitted the job to a
	// standing queue ("NAME=value"): set for it on a local host, before
	// the inventory's env and gpudispatch's variables (nil: the
	// coordinator's own, which local jobs run with).
	CallerEnv []string
}

// ID is how logs, events and the journal call the job: its name, else its number.
func (j *Job) ID() string {
	if j.Name != "" {
		return j.Name
	}
	return strconv.Itoa(j.Seq)
}

// Where names the job's place in the input: "cmds.txt:12" or "line 12".
func (j *Job) Where() string {
	return where(j.File, j.Line)
}

func where(file string, line int) string {
	if file == "" {
		return "line " + strconv.Itoa(line)
	}
	return file + ":" + strconv.Itoa(line)
}
