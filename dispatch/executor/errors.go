package executor

import "errors"

var (
	// ErrConnectionLost is wrapped by Run's error when the host stopped
	// answering while the job ran: the job's fate is unknown to the
	// coordinator and it may be run again elsewhere once Reap returns.
	ErrConnectionLost = errors.New("connection lost")
	// ErrHostDown is wrapped by an error when the host cannot be reached:
	// nothing of the job ran. WaitUp says when the host is back.
	ErrHostDown = errors.New("host down")
	// ErrGPULocked means another gpudispatch run holds the GPU's lock.
	ErrGPULocked = errors.New("locked by another gpudispatch run")
	// ErrNoLocks means the host cannot lock its GPUs: jobs still run there,
	// but other gpudispatch runs may share its GPUs.
	ErrNoLocks = errors.New("GPUs cannot be locked: other gpudispatch runs may share them")
)
