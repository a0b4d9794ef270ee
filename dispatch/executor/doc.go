// Package executor is the contract between the scheduler (package
// dispatch) and whatever runs jobs on machines: the Executor interface, the
// Command it is given, the GPUs it reports, the GPU locks it takes and the
// errors it answers with.
//
// It belongs to dispatch the way database/sql/driver belongs to
// database/sql: dispatch is written against it, implementations import it
// (hosts runs jobs over SSH and locally), and it imports nothing of the
// project and no SSH library, so the scheduler is built and tested with
// fakes and no network code.
//
// # The contract
//
//   - Run returns only once the job and everything it started are gone, or
//     with an error wrapping ErrConnectionLost when the machine stopped
//     answering: then the job's fate is unknown, its GPUs stay taken, and
//     Reap says when nothing of it is left.
//   - Run tells Command.Progress (Running) when the job begins: until then
//     the run says it is pending, never that it started.
//   - An error wrapping ErrHostDown means nothing of the job ran: it goes
//     back to the queue without using an attempt.
//   - A host that is a batch system (a Slurm cluster) queues jobs of its
//     own: Run tells Command.Progress while the job waits there and as it
//     starts; ErrJobLost means the batch system lost it (retry at once, no
//     reap), ErrLimit that it refused it for a limit (back in the queue),
//     ErrTimeLimit that it ended it at its time limit.
//   - Exit codes are the job's own, 128+n for a job killed by signal n.
//   - A GPULock keeps other gpudispatch runs, whoever started them, off its
//     GPU for as long as it is held; Lost is closed when it no longer is.
package executor
