package executor

import (
	"context"
	"fmt"
	"io"
	"time"
)

// Executor runs jobs on the hosts of an inventory, each named by its
// inventory name.
type Executor interface {
	// Run runs c on host and streams its stdout and stderr to the writers
	// as the bytes arrive. It returns the exit code once the job and its
	// process group are gone. err is non-nil when the job could not be
	// started (it wraps ErrHostDown when the host cannot be reached), was
	// stopped because ctx ended (it wraps context.Cause(ctx), and also
	// ErrCancelUnreached when the host could not be told), or its host was
	// lost while it ran (it wraps ErrConnectionLost).
	Run(ctx context.Context, host string, c Command, stdout, stderr io.Writer) (exitCode int, err error)
	// WaitUp returns once host can take jobs: at once when it can, else
	// when it is reachable again, or when ctx ends.
	WaitUp(ctx context.Context, host string) error
	// Reap returns once nothing is left on host of the command tagged tag,
	// whose Run ended with ErrConnectionLost or ErrCancelUnreached (in this
	// process or an earlier one): it stops the command if it still runs.
	// Until Reap returns, its GPUs may still be in use. It waits for the
	// host to be reachable, or for ctx to end.
	Reap(ctx context.Context, host, tag string) error
	// Adopt follows the command tagged c.Tag that an earlier coordinator
	// started on host and that may still run there (a batch system's job
	// outlives its coordinator): it streams what the command writes past
	// the byte offsets its logs reached (outOff of stdout, errOff of
	// stderr), tells c.Progress how it gets on as Run does, and returns as
	// Run does once it ends, with when it ended. The rest of c is not read:
	// the command was given long ago. An error wraps ErrJobLost when nothing
	// of it runs there any more.
	Adopt(ctx context.Context, host string, c Command, outOff, errOff int64, stdout, stderr io.Writer) (exitCode int, end time.Time, err error)
	// LockGPU takes the lock that keeps other gpudispatch runs off GPU gpu
	// (or MIG instance) of host, for the run whose commands' tags start with run + "-". An
	// error wraps ErrGPULocked when another run holds it, ErrNoLocks when
	// the host cannot lock, ErrHostDown when it cannot be reached.
	LockGPU(ctx context.Context, host string, gpu GPUID, run string) (GPULock, error)
	// ProbeGPUs asks host what its GPUs hold now (nvidia-smi).
	ProbeGPUs(ctx context.Context, host string) ([]GPU, error)
	// Fetch copies the files that r names, in a job's workdir on host,
	// into the local directory dst under the same relative paths. A fetch
	// that was cut off (its error wraps ErrHostDown) goes on from where it
	// was when it is asked again with the same dst.
	Fetch(ctx context.Context, host string, r Return, dst string) (Returned, error)
}

// GPUTyper is implemented by an Executor whose hosts may be batch systems
// that name the types of their GPUs (Slurm's gres types), so that a job
// that asks for a model can be sent to one.
type GPUTyper interface {
	// GPUTypes lists the GPU types the batch system host said it has
	// when it was opened ("a100", "h100"), at once: none for a host that
	// is not one, not opened yet, or names none.
	GPUTypes(host string) []string
}

// ShareWatcher is implemented by a GPULock whose Share is said by the host
// as runs come and go: the run takes up a share that changed at once, not
// at its next job's end (hours away, with long jobs).
type ShareWatcher interface {
	// Changed is closed once Share may answer otherwise than it did when
	// Changed was called.
	Changed() <-chan struct{}
}

// Gang is implemented by an Executor that can run the parts of a job
// over several hosts: it finds a TCP port no one uses on part 0's host
// (its MASTER_PORT), and starts parts that wait, set up, for the others
// (Command.Gated).
type Gang interface {
	// FreePort is a port no socket uses on host now.
	FreePort(ctx context.Context, host string) (int, error)
	// Address is host's address as the other hosts reach it ("" when the
	// Executor cannot say).
	Address(host string) string
	// Go lets the gated command tagged tag on host, set up and waiting,
	// run its line.
	Go(ctx context.Context, host, tag string) error
}

// Waiter is implemented by an Executor whose GPU locks keep a record of
// the runs that wait for a host's GPUs (fair share: the runs holding them
// give up their share's excess as jobs end).
type Waiter interface {
	// Waiting says that run, held to its fair share of host's GPUs, has
	// more jobs for the host, the first of which needs what need says
	// there: it waits there too, for its turn at the GPUs that whole
	// shares leave over (a run whose first job needs more than its share
	// cannot use that share: it waits with none, and the others use it,
	// until it is first in the line of runs waiting there: then its job's
	// GPUs are its share, taken for it as they free up, unless the job is
	// a part of one over several hosts). It may block on the network.
	Waiting(host, run string, need Need)
	// Share is run's fair share of host's GPUs, as GPULock.Share says it,
	// for a run that holds no lock there but waits (a share of 0 keeps it
	// off the host till its turn); changed is closed once it changes
	// (nil: it never will).
	Share(host, run string) (n int, waiting string, changed <-chan struct{})
	// StopWaiting says that run waits for none of host's GPUs any more
	// (its queue holds no job that could run there): its record goes at
	// once, so that the runs there keep their GPUs. It may block on the
	// network.
	StopWaiting(host, run string)
}

// Need is what a run's first job for a host needs there (Waiter).
type Need struct {
	// GPUs is how many GPUs the job needs there together.
	GPUs int
	// Part is set when the job is one part of a job over several hosts.
	// Turns at a host's GPUs between such parts go by Since, when the job
	// began to wait (the same on each of its hosts), so that two such
	// jobs never hold one host each for the other.
	Part  bool
	Since time.Time
}

// Return names the files a job sends back once it ends, and where they
// are.
type Return struct {
	// Paths are paths relative to the workdir, bash globs (** too); a
	// directory comes back with all it holds.
	Paths []string
	// Workdir is the job's workdir, as in Prelude; Snapshot, when set, is
	// the ID of the snapshot whose tree was its workdir instead: the
	// working tree of the log dir Tree names (see Prelude.Tree), or, with
	// no Tree, the snapshot's own (an attempt of an earlier gpudispatch).
	Workdir  string
	Snapshot string
	Tree     string
	// Limit caps the bytes of the files that come back (0: none): the
	// files past it, in the order they are listed, stay (Returned.Over).
	Limit int64
}

// PartialDir is the directory, in a Fetch's destination, that holds the
// files still coming (named by the hash of their path, their size and
// mtime), so that a later fetch of the same file goes on from its last
// byte: not results yet.
const PartialDir = ".gpudispatch-partial"

// Returned is what a Fetch brought back.
type Returned struct {
	// Files came back whole.
	Files []ReturnedFile
	// Missing are the paths that named nothing; Links the links that lead
	// to no file (not followed); Changed the files that changed while they
	// were sent (not kept).
	Missing []string
	Links   []string
	Changed []string
	// Over are the files left where they are because what came before
	// them reached Return.Limit.
	Over []string
}

// ReturnedFile is one file that came back: its path under the directory
// Fetch was given, and its size in bytes.
type ReturnedFile struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// Command is one job's command and the environment it runs in.
type Command struct {
	// Script is the job line, given verbatim to the login shell.
	Script string
	// Env holds NAME=value pairs exported before the shell starts.
	Env []string
	// Prelude is what the job's shell sets up before the job.
	Prelude
	// GPUs is how many GPUs the job asks a batch system for; other hosts
	// are given their GPUs in CUDA_VISIBLE_DEVICES. GPUType, when set, is
	// the type the batch system names them by (a Slurm gres type, "a100").
	GPUs    int
	GPUType string
	// Nodes is how many nodes a batch system runs the job over ([nodes=N];
	// 0 or 1: one), GPUs GPUs on each: the line runs once on every node,
	// told its rank and the others (NODE_RANK, NNODES, MASTER_ADDR,
	// MASTER_PORT, WORLD_SIZE, GPUDISPATCH_NODES), and a node's part that
	// fails ends the others. Part 0 writes to Run's writers; PartLogs are
	// where parts 1.. write, and, for Adopt, how far their logs reached.
	Nodes    int
	PartLogs []PartLog
	// Gated makes the command, once its shell is set up (Progress
	// Running), wait for Gang.Go before its line runs (at most ten
	// minutes): a part of a job over several hosts runs only once every
	// part could be set up.
	Gated bool
	// Timeout is the job's time limit (0: none, or a batch system's
	// default), kept where the job runs so that it holds with no
	// coordinator there. A job ended by it makes Run's error wrap
	// ErrTimeLimit.
	Timeout time.Duration
	// About says on the host whose job this is (log dir, run, job,
	// attempt, GPUs), for whoever lists what runs there.
	About string
	// Progress, when set, is told when the job begins to run (Running):
	// on a machine, once the shell it runs in is set up (the login
	// profile, workdir, env); on a batch system, once that starts it, and
	// before, why it waits there. An attempt that never ran (ErrHostDown,
	// an UnfitError) is never told Running. It is called from Run's
	// goroutine.
	Progress func(Progress)
	// Deps, when set, are the files that the jobs this one waited for
	// brought back (one directory per job, by its id), put on the machine
	// as Code is, in a tree of the log dir's own (Prelude.Tree); the job
	// finds that tree in $GPUDISPATCH_DEPS_DIR.
	Deps *Code
	// Tag names this run of the command on its host, so that Reap can tell
	// whether anything of it is left: letters, digits, '.', '_' and '-',
	// unique among the commands of a coordinator ("" for none).
	Tag string
}

// PartLog is where a part of a job over several nodes of a batch system
// writes its stdout and stderr, and, for Adopt, the bytes of each already
// home.
type PartLog struct {
	Stdout, Stderr io.Writer
	OutOff, ErrOff int64
}

// Prelude is what a job's shell sets up before the job runs: where it
// runs, the env it activates, and the setup. Job shells that share a
// Prelude share their set-up (see Key); one whose set-up fails makes Run
// return an *UnfitError.
type Prelude struct {
	// Workdir is the directory the job starts in; "" means the home
	// directory, and a leading "~/" is the host's home.
	Workdir string
	// Setup runs in the same shell before Script; if it fails, Script does
	// not run.
	Setup string
	// Conda names the conda env to activate (a name or a path), Venv the
	// directory of a venv to activate (a leading "~/" is the host's home, a
	// relative one is under Workdir), Modules the modules to load (Lmod or
	// Environment Modules), in order.
	Conda   string
	Venv    string
	Modules []string
	// Interactive makes the shell read ~/.bashrc as an interactive bash
	// does (its "not interactive: return" guard passes).
	Interactive bool
	// Env holds the host's own NAME=value pairs (the inventory's env), set
	// for the set-up as for each job (Command.Env has them too).
	Env []string
	// Code, when set, is a snapshot of the project whose tree is put on the
	// machine before the job's shell starts, and becomes its Workdir (Key
	// then names the tree by that workdir).
	Code *Code
	// Tree names whose working tree of Code the job runs in: the log
	// dir's key (hex digits). Each log dir has its own copy of the
	// snapshot on a machine, which its jobs share and no other log dir's
	// jobs see; "" is the tree of commands run outside any log dir
	// (hosts --check).
	Tree string
}

// Key is the same for two Preludes exactly when they set up the same.
func (p Prelude) Key() string {
	return fmt.Sprintf("%q %q %q %q %q %t %q", p.Workdir, p.Setup, p.Conda, p.Venv, p.Modules, p.Interactive, p.Env)
}

// Progress is what a machine or a batch system says of a job before and as
// it starts.
type Progress struct {
	// ID is the job's id in the batch system (Slurm's job id).
	ID string
	// Running is set once the job runs; until then Reason says why it
	// waits (Slurm's Priority, Resources, QOSMaxJobsPerUserLimit...).
	Running bool
	Reason  string
	// Started is when the batch system started the job, when it says so
	// (zero: take the time Progress is told).
	Started time.Time
	// CutOff, when set, is when the job's connection to its machine was
	// cut: the job is presumed running there while Run waits for the
	// machine to answer (Why says how it was cut; the machine's WaitUp
	// says when it answers). Ended, when set, is when the job ended where
	// it ran, told by a Run that learned of the end late (after a cut):
	// its run time is its own, not the time the machine was silent.
	CutOff time.Time
	Why    string
	Ended  time.Time
}

// GPULock is a run's hold on one GPU of a host: while it is held, other
// gpudispatch runs, whoever started them, put no job on that GPU.
type GPULock interface {
	// Key is the lock's name on the host: the GPU's UUID, or index-N.
	Key() string
	// UsedMB is the memory used on the GPU, in MiB, when the host's lock
	// holder for the run first looked (before any job of the run ran
	// there): others' work. -1 when it is not known.
	UsedMB() int
	// Share is how many of the host's GPUs the run may keep busy while
	// another run, below its own share, waits for them there (fair
	// share): the run starts no new job on a GPU it frees past that; and
	// who waits ("run ID of USER@HOST waits with 0", comma-separated).
	// -1 when no run waits. It changes as runs come and go.
	Share() (n int, waiting string)
	// Lost is closed once the lock is no longer held: after Release, or
	// when the process holding it on the host is gone (connection lost).
	Lost() <-chan struct{}
	// Release lets go of the lock and returns once it is free.
	Release()
}
