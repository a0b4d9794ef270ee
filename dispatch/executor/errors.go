package executor

import (
	"errors"
	"fmt"
)

var (
	// ErrConnectionLost is wrapped by Run's error when the host stopped
	// answering while the job ran: the job's fate is unknown to the
	// coordinator and it may be run again elsewhere once Reap returns.
	ErrConnectionLost = errors.New("connection lost")
	// ErrHostDown is wrapped by an error when the host cannot be reached:
	// nothing of the job ran. WaitUp says when the host is back.
	ErrHostDown = errors.New("host down")
	// ErrJobLost is wrapped by Run's error when a batch system lost the
	// job (its node failed, it was preempted, it vanished): nothing of it
	// is left, the host is fine, and it may be run again at once.
	ErrJobLost = errors.New("job lost")
	// ErrLimit is wrapped by Run's error when a batch system refused the
	// job for a limit on the user's jobs: nothing of it ran, and the host
	// takes no more jobs than it now holds until one of them ends.
	ErrLimit = errors.New("refused for a limit")
	// ErrTimeLimit is wrapped by Run's error when the host ended the job
	// at its time limit (Command.Timeout).
	ErrTimeLimit = errors.New("time limit reached")
	// ErrDetached, as the cause of the context given to Run or Adopt, says
	// that the coordinator goes away and leaves the job running: Run
	// returns at once, without stopping the job, with an error wrapping
	// ErrDetached. A later Adopt follows the job.
	ErrDetached = errors.New("the coordinator detached: the job runs on")
	// ErrCancelUnreached is wrapped, with the context's cause, by the error
	// of a Run or Adopt whose context ended while its host could not be
	// reached: the job may run on there. Reap stops it once the host
	// answers.
	ErrCancelUnreached = errors.New("the cancel did not reach the host: the job may run on there until it is stopped")
	// ErrGPULocked means another gpudispatch run holds the GPU's lock.
	ErrGPULocked = errors.New("locked by another gpudispatch run")
	// ErrNoLocks means the host cannot lock its GPUs: jobs still run there,
	// but other gpudispatch runs may share its GPUs.
	ErrNoLocks = errors.New("GPUs cannot be locked: other gpudispatch runs may share them")
	// ErrProbeTimeout is wrapped by ProbeGPUs's error when the host's
	// nvidia-smi did not answer in time: the host is sick, and its GPUs
	// take no new job until it answers.
	ErrProbeTimeout = errors.New("the host's GPUs did not answer in time")
	// ErrNoNvidiaSMI is wrapped by ProbeGPUs's error when the host has no
	// nvidia-smi on its login shell's PATH (a machine whose GPUs are
	// listed by hand, or pretend ones).
	ErrNoNvidiaSMI = errors.New("nvidia-smi not found")
)

// ErrUnfit is wrapped by Run's error when the host cannot set up the job's
// Prelude (its workdir is missing, its env is not there, its setup
// fails): nothing of the job ran, and no job with that Prelude can run
// there until the host is fixed.
var ErrUnfit = errors.New("the host cannot set up the job's environment")

// UnfitError says why a host cannot set up a Prelude: Why is the host's
// own answer, for people ("conda env \"torch\" not found; this host has:
// base, jax"). It is an ErrUnfit.
type UnfitError struct {
	Where string
	Why   string
}

func (e *UnfitError) Error() string { return e.Where + ": " + e.Why }

// Unwrap makes an UnfitError an ErrUnfit.
func (e *UnfitError) Unwrap() error { return ErrUnfit }

// LockedError says which gpudispatch run holds a GPU's lock; it is an
// ErrGPULocked.
type LockedError struct {
	// Where is the machine, GPU the GPU's index, Key its lock's name (its
	// UUID); Holder says whose run holds it ("run R of user@host (pid N)").
	Where  string
	GPU    GPUID
	Key    string
	Holder string
	// Freed, when not nil, is closed once the lock looks free (its holder
	// let go of it): the GPU is worth trying again then.
	Freed <-chan struct{}
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("%s: GPU %s (%s) is %v: %s", e.Where, e.GPU, e.Key, ErrGPULocked, e.Holder)
}

// Unwrap makes a LockedError an ErrGPULocked.
func (e *LockedError) Unwrap() error { return ErrGPULocked }
