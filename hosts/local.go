package hosts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// Local runs jobs on this machine, in job shells like remote hosts. Its
// zero value is ready; Close ends its idle shells.
type Local struct {
	Supervision Supervision
	// LockDir is where GPU locks live ("": DefaultLockDir).
	LockDir string
	// Name is the inventory's name for this machine, for messages ("":
	// "local").
	Name string

	once   sync.Once
	shells *shells
	locks  *lockers
}

// Run implements Runner.
func (l *Local) Run(ctx context.Context, c executor.Command, stdout, stderr io.Writer) (int, error) {
	code, err := l.pool().run(ctx, c, stdout, stderr)
	var lost errShellLost
	if errors.As(err, &lost) {
		l.pool().forget(c.Tag)
		// Someone killed the shell. Its job's watcher, which is not in the
		// job's group, kills the job now that the shell's stdin is closed.
		return -1, fmt.Errorf("%s: %w", first(l.Name, "local"), lost)
	}
	return code, err
}

func (l *Local) pool() *shells {
	l.init()
	return l.shells
}

func (l *Local) init() {
	l.once.Do(func() {
		l.shells = &shells{spawn: spawnLocal, sup: l.Supervision}
		l.locks = &lockers{spawn: spawnLocal, where: first(l.Name, "local"), dir: first(l.LockDir, DefaultLockDir), sup: l.Supervision}
	})
}

// Close ends the idle job shells, and those of jobs still running once they
// end, and the GPU lock holders, which keep the locks still held for
// as long as those jobs may take to die.
func (l *Local) Close() {
	l.init()
	l.shells.close()
	l.locks.close()
}

// LockGPU implements Runner.
func (l *Local) LockGPU(ctx context.Context, gpu int, run string) (executor.GPULock, error) {
	l.init()
	return l.locks.lock(ctx, gpu, run)
}

// WaitUp implements Runner: this machine is always up.
func (*Local) WaitUp(context.Context) error { return nil }

// Reap implements Runner: a local Run returns only once its job is gone,
// so nothing is ever left to wait for.
func (*Local) Reap(context.Context, string) error { return nil }
