package hosts

import "errors"

// ErrConnectionLost is wrapped by Run's error when the machine stopped
// answering while the job ran: the job's fate is unknown to the coordinator
// (the wrapper kills it on its side) and it may be run again elsewhere.
var ErrConnectionLost = errors.New("connection lost")
