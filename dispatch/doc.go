// Package dispatch is the run: it reads job lines as they arrive, places each
// job on free host:gpu slots, runs it through an Executor, streams its output
// into log files and records every step in journal.jsonl.
//
// # Ownership
//
// One goroutine, the run loop, owns all scheduling state: the slot table, the
// waiting queue, the journal and the summary. Job goroutines only run the
// Executor and hand a result back on a channel; the reader goroutine only
// parses input and hands jobs over. Nothing else shares memory.
//
// The run's state (run.go) is in parts, each a type that owns its fields
// and the channel on which goroutines bring it news, and says what it keeps
// true: attempts (the attempts in flight, their results and progress),
// history (what the log dir's earlier runs left: adopt.go), health (hosts
// going down and coming back: health.go), fencing (attempts to stop once
// their hosts answer: fence.go), locking (GPU claims and locks: claim.go),
// serving (the jobs Control steers: control.go), returns (files brought
// back: returns.go), deps (jobs that wait for others: deps.go) and
// memWatch (hosts' GPU memory and use: memory.go, usage.go). The loop
// takes one piece of news at a time and hands it to its handler, named
// for what it handles (onResult, onHostUp, onClaim, onUpdate, ...), then
// gives the scheduler its turn. The end of an attempt is read once into an
// outcome (outcome.go: the event kind, whether the host goes down, whether
// anything ran, whether its processes may hold the GPUs) before onResult
// acts on it. A new feature adds a part, or a field to the part it
// belongs to, with a channel and a handler of its own: fair share between
// runs belongs beside locking (it decides who takes a GPU as one frees),
// jobs over several hosts beside attempts (one attempt, several hosts).
//
// # Invariants
//
//   - A slot runs at most one job; a GPU runs at most as many jobs as it has
//     slots (repeats of its id times slots_per_gpu).
//   - A multi-GPU job (gpus=N) takes one slot on each of N different GPUs of
//     one host.
//   - A journal line is written whole, with one write, before the next job
//     starts; a write that fails is cut off again, and a torn last line left
//     by a crash is cut when the journal is opened. A run whose journal
//     cannot be written starts no more jobs.
//   - Logs are never overwritten: a later attempt gets ID.2.out, ID.3.out...
//     (created with O_EXCL; a job name cannot be a number or end in .N, so
//     that name stays unambiguous).
//   - A log dir has one live coordinator: Run holds a flock on
//     gpudispatch.lock in it (which dies with the process) and a second Run
//     fails at the start, naming the first. Before anything is written, the
//     log dir and every directory above it must be the user's or root's and
//     writable by no group (but the user's private one) or other, except
//     root's sticky directories above it (CheckLogDir). A new log dir is
//     0700; new files are 0600, or as readable as the log dir is
//     (fileMode). The journal and the claim are opened without following
//     links and must be the user's regular files; the journal is opened for
//     appending.
//   - Readers of the journal (status, --resume) skip a damaged line, naming
//     it with its line number, and read the rest.
//   - Each attempt has exactly one outcome in the journal. An attempt on a
//     Slurm cluster that an earlier run left with none (it outlives its
//     coordinator) is adopted by a run with Resume (adopt.go), not run
//     again; started and pending events carry the attempt's tag for that.
//
// # Scheduling rule
//
// Jobs wait in queue order: higher priority first ([priority=N], default
// 0), equal priorities in arrival order; a re-queued job goes back to its
// place, and a job whose priority changes moves to its new place. Each pass
// walks the queue from its head and starts every job that fits in the free
// slots. A job with a preference ([prefer=HOST[:GPU]]) goes there when the
// slots it needs are free there as it is placed; other jobs, and a job whose
// preferred place is taken, go to the least loaded, least recently used GPU
// (so jobs spread over hosts and GPUs). The first job that does not fit is
// the oldest waiting job of the highest priority: the free slots it needs
// are held for it on the eligible host where it is closest to fitting (a
// pinned GPU, the pinned host, or the host with the most free GPUs for
// gpus=N), and later jobs in the same pass may use only the other slots. So
// a pinned or multi-GPU job never blocks later jobs that can run elsewhere,
// and is never starved by them: as slots free up they accumulate for it
// until it fits. Only that one job holds slots; a pass ends early once no
// free slot is left, so its cost does not grow with the length of the
// queue. A job of higher priority that arrives later goes ahead of it, by
// design; with a finite input every job starts (FuzzNoJobWaitsForever).
//
// Jobs that can never run (unknown host or GPU, more GPUs than a host has)
// are rejected when they arrive, so every waiting job eventually fits.
//
// # Hosts that go away
//
// A host is marked down when a job there is lost (executor.ErrConnectionLost)
// or could not start (executor.ErrHostDown), or when it was unreachable at the
// start (Options.Down). A down host's slots are not given out; a goroutine
// waits on the Executor's WaitUp and tells the loop when it is back. A job
// that did not start goes back to the queue without using an attempt; a lost
// job uses one, and its slots stay taken until the Executor's Reap confirms
// on the host that nothing of it is left, so a GPU is never given to a new
// job while the old one may still hold it. A cancel that could not reach
// the host (executor.ErrCancelUnreached) is kept the same way: such an
// attempt is fenced (fence.go), recorded with Unstopped, stopped by Reap
// once the host answers (EventStopped), and left in the journal for the
// next run with Resume when this one ends first. When a host has been down for
// Options.HostDownTimeout, the waiting jobs that no other host can run fail
// with the reason, and so do such jobs arriving later, until it is back: a
// run never waits forever for a host.
//
// A host that answers but cannot set up a job's environment (its workdir,
// conda env, venv, modules or setup: executor.ErrUnfit, said by its job
// shell before the job runs) is unfit for that environment (the job's
// executor.Prelude) until Options.Recheck has passed (unfit.go): the job
// goes back to its place without using an attempt (a retried event with
// NotStarted), the host's reason is said once, and the scheduler places no
// job with that environment there. A waiting job that no host it may run
// on can set up fails at once, with each host's reason.
//
// A host with a sync directory runs each job in the snapshot of it taken as
// the run started (Options.Snapshots, package snapshot): the job's
// executor.Prelude carries it and the log dir's tree key (treeKey, from the
// log dir's first run), the host puts the log dir's own copy of its tree
// there once (so runs of one log dir share it, and --resume finds what
// they wrote; other log dirs never see it), and a host that cannot take it
// is unfit as above. The started event names the snapshot and the tree. A submit may bring a snapshot of its own for
// its jobs (Job.Code, opened by Options.OpenSnapshot, kept in the job's
// spec for serve --resume); an inventory edit brings those of the
// directories it adds (Update.Snapshots). What a job returns comes back as
// returns.go says.
//
// # Hooks
//
// Options.Hooks run on the coordinator's machine (hooks.go): the job-end
// hook on a goroutine of its own as each job's outcome is recorded, so that
// no hook delays a job; the run-end hook after the loop, once every
// job-end hook has ended. A failing or timed-out hook is kept as a warning,
// which the loop (or the run's end) records.
//
// # GPUs shared with other runs
//
// Between being placed and being started, a job may have a claim to settle
// (claim.go): the lock of each of its GPUs that this run does not hold yet
// (Executor.LockGPU), and under SkipBusy a look at nvidia-smi for
// each of its GPUs where no other job of this run is yet (not vetted):
// jobs placed on a GPU together are checked once. The slots are taken
// first and the GPUs are marked claiming, so the scheduler puts nothing
// else on them meanwhile; the claim is settled by a goroutine and handed
// back to the loop. A GPU that turned out locked by another run, or busy
// with other work, is set aside for Options.Recheck and the job goes back to
// its place in the queue without using an attempt. A lock is kept while the
// run has a job on its GPU: it is let go of after a scheduling pass that
// left the GPU empty, and every lock is let go of before Run returns. A
// lock lost with its holder is simply taken again by the next job there.
// While another run below its fair share waits for a host's GPUs, the
// host's holder says this run's share there (executor.GPULock.Share, read
// at each turn: shares in claim.go): the run keeps no more of the host's
// GPUs busy than that (hostSlots.overShare), so a GPU it frees is let go
// of after the turn and goes to the run that waits. Nothing running is
// stopped for the share. At the end of each turn the run keeps each
// host's record of its waiting as its queue is (executor.Waiter:
// sayWaiting in claim.go): made by another run's lock that refused it a
// GPU, or said while it is held to its share with jobs for the host (its
// turn at the GPUs whole shares leave over), saying what the first of
// them needs there together (a run that cannot use its share for that
// job waits with none, and the others use it, until it is the first in
// the line of runs waiting: then it has its turn, its job's GPUs its
// share, which its lock holder takes as they free up; a part of a job
// over several hosts has its turn too, ordered between such parts by
// when the job began to wait, queued.partsSince), and gone at once when no job
// of its queue could run there any more; when jobs for the host wait
// again, the GPUs set aside there are tried again at once. A share that
// changes comes to the loop as news (watchShare).
//
// What others use on each GPU is known before a job is placed there
// (usage.go): a look at each host as it becomes usable, renewed every
// Options.Recheck; idle GPUs go first, and a GPU others use is taken only
// when no idle one may be, and, under SkipBusy, never.
//
// # Inventory edits
//
// Options.Updates brings edits of the inventory, applied by the
// loop like any other event: the slot table gives added hosts and GPUs
// slots and takes them from removed ones (capacity 0: their running jobs
// finish and no new one starts), waiting jobs that fit nowhere any more
// fail with the reason, and an edit that does not load only becomes a
// warning.
//
// # Ending
//
// Run ends when the input has ended and no job waits or runs. A drain stops
// reading input and starting jobs and lets running jobs finish; cancelling
// Run's context also stops the running jobs (the Executor kills their process
// groups). Either way the jobs that never started are recorded cancelled.
package dispatch
