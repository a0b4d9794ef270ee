package hosts

import "errors"

// ErrConnectionLost is wrapped by Run's error when the machine stopped
// answering while the job ran: the job's fate is unknown to the coordinator
// (its job shell kills it on its side; Reap says when it is gone) and it may
// be run again elsewhere.
var ErrConnectionLost = errors.New("connection lost")

// ErrHostDown is wrapped by Run's error when the job could not start
// because its machine cannot be reached: nothing of it ran. The pool keeps
// reconnecting; WaitUp says when the machine is back.
var ErrHostDown = errors.New("host down")
