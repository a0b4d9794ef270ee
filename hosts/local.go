package hosts

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/gpulock"
	"github.com/gpudispatch/gpudispatch/hosts/jobshell"
	"github.com/gpudispatch/gpudispatch/hosts/results"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
)

// Local runs jobs on this machine, in job shells like remote hosts. Its
// zero value is ready; Close ends its idle shells.
type Local struct {
	Supervision jobshell.Supervision
	// LockDir is where GPU locks live ("": gpulock.DefaultDir).
	LockDir string
	// NoShare keeps the run out of fair share (see Options.NoShare).
	NoShare bool
	// Name is the inventory's name for this machine, for messages ("":
	// "local").
	Name string
	// ProbeTimeout bounds the lock holders' look at nvidia-smi (0:
	// DefaultProbeTimeout).
	ProbeTimeout time.Duration

	// seen gives the GPUs a look just found here, for its lock holders
	// (nil: they ask nvidia-smi).
	seen func() ([]executor.GPU, bool)

	once   sync.Once
	shells *jobshell.Shells
	locks  *gpulock.Lockers
}

// Run implements Runner. A job whose shell someone killed is stopped: no
// coordinator would ever hear of it again.
func (l *Local) Run(ctx context.Context, c executor.Command, stdout, stderr io.Writer) (int, error) {
	l.init()
	code, err := l.shells.Run(ctx, c, stdout, stderr)
	if lost := (*jobshell.LostError)(nil); errors.As(err, &lost) {
		if c.Tag != "" {
			jobshell.Stop(context.WithoutCancel(ctx), spawn.Local, c.Tag, l.Supervision.Grace)
		}
		return -1, fmt.Errorf("%s: %w", l.name(), lost)
	}
	return code, err
}

func (l *Local) name() string { return cmp.Or(l.Name, "local") }

// Adopt implements Runner: it follows a job an earlier coordinator started
// here, whose job shell kept its output.
func (l *Local) Adopt(ctx context.Context, c executor.Command, outOff, errOff int64, stdout, stderr io.Writer) (int, time.Time, error) {
	code, end, err := jobshell.Follow(ctx, spawn.Local, c.Tag, outOff, errOff, l.Supervision.Grace, stdout, stderr)
	if lost := (*jobshell.LostError)(nil); errors.As(err, &lost) {
		return -1, end, fmt.Errorf("%s: %w: %v", l.name(), executor.ErrJobLost, lost)
	}
	if err != nil {
		err = fmt.Errorf("%s: %w", l.name(), err)
	}
	return code, end, err
}

// Fetch implements Runner.
func (l *Local) Fetch(ctx context.Context, from executor.Return, dst string) (executor.Returned, error) {
	return results.Fetch(ctx, spawn.Local, from, dst, 0)
}

func (l *Local) init() {
	l.once.Do(func() {
		l.shells = jobshell.New(spawn.Local, l.Supervision)
		l.locks = newLockers(spawn.Local, l.name(), l.LockDir, l.NoShare, l.Supervision, l.ProbeTimeout, l.shells, l.seen)
	})
}

// Close ends the idle job shells, and those of jobs still running once they
// end, and the GPU lock holders, which keep the locks still held for
// as long as those jobs may take to die.
func (l *Local) Close() {
	l.init()
	l.shells.Close()
	l.locks.Close()
}

// LockGPU implements Runner.
func (l *Local) LockGPU(ctx context.Context, gpu executor.GPUID, run string) (executor.GPULock, error) {
	l.init()
	return l.locks.Lock(ctx, gpu, run)
}

// Waiting says that run, held to its share, waits for more of this
// machine's GPUs (see gpulock.Lockers.Waiting).
func (l *Local) Waiting(run string, need executor.Need) {
	l.init()
	l.locks.Waiting(run, need)
}

// Share is run's fair share of this machine (see gpulock.Lockers.Share).
func (l *Local) Share(run string) (int, string, <-chan struct{}) {
	l.init()
	return l.locks.Share(run)
}

// StopWaiting says that run waits for none of this machine's GPUs any
// more (see gpulock.Lockers.StopWaiting).
func (l *Local) StopWaiting(run string) {
	l.init()
	l.locks.StopWaiting(run)
}

// WaitUp implements Runner: this machine is always up.
func (*Local) WaitUp(context.Context) error { return nil }

// Reap implements Runner: a local Run returns only once its job is gone,
// so nothing is ever left to wait for.
func (*Local) Reap(context.Context, string) error { return nil }

func (l *Local) checkLockDir(ctx context.Context) error {
	return gpulock.CheckDir(ctx, spawn.Local, cmp.Or(l.LockDir, gpulock.DefaultDir))
}

func (l *Local) startLocks(ctx context.Context, run string, first gpulock.Prologue) error {
	l.init()
	return l.locks.Start(ctx, run, first)
}

// newLockers are the GPU lock holders of a machine whose job shells are
// supervised by sup: a holder whose coordinator went silent keeps its locks
// for as long as those shells take to notice and kill their jobs. probe
// bounds their look at nvidia-smi; seen, when set, gives the GPUs a look
// just found there, which a new holder then takes rather than ask.
// noShare keeps the run out of fair share.
func newLockers(start spawn.Func, where, dir string, noShare bool, sup jobshell.Supervision, probe time.Duration, shells *jobshell.Shells, seen func() ([]executor.GPU, bool)) *gpulock.Lockers {
	find := gpulock.Finding{Login: sup.Login != jobshell.LoginNone, Path: shells.LoginPath, Seen: seen}
	ls := gpulock.New(start, where, cmp.Or(dir, gpulock.DefaultDir), sup.Heartbeat, sup.Grace+2*sup.Heartbeat, cmp.Or(probe, DefaultProbeTimeout), find)
	ls.NoShare = noShare
	return ls
}
