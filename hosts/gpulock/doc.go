// Package gpulock keeps other gpudispatch runs, whoever started them, off
// the GPUs a run uses on a machine.
//
// A machine's Lockers start one lock holder (lock.sh) per run, over an SSH
// session or locally (package spawn), as the run opens the machine
// (Lockers.Start: the holder checks the lock dir as CheckDir does, which
// then costs no session of its own, and the run's first lock waits for no
// session), or when the run asks for a GPU there and has none. The holder
// is told the rest with the run's first request. A holder that Start
// starts first takes a look of the caller's at the machine (a Prologue:
// a run lists the jobs the machine keeps), in a subshell of its own bash,
// which then costs no session either. The holder finds the GPUs' UUIDs in the driver's /proc files
// (the same whether or not nvidia-smi answers), else in what the run's
// look at the GPUs found a moment before (Finding.Seen), else through the
// login shell's nvidia-smi once, and when told "lock N" takes an exclusive flock
// on its user's lock directory of the GPU (named by its UUID, else
// index-N) in the lock dir, answering on its stdout; "release N" lets go at once.
// What it is told comes in records (spawn.Record), as for every script.
// It also keeps its run's fair share of the host (lock.sh): a record in
// the lock dir while its run waits for a GPU another run holds there, or
// is held to its share with more jobs for the machine ("want": Waiting),
// till told "unwant" (StopWaiting: its queue holds nothing more for the
// machine), its time the run's place in the line for the GPUs whole shares
// leave over (moved back by the GPU time the run holds above its whole
// share, counted as its locks change and written at each look), and,
// once a second while it holds locks or waits, and such a record is
// there, its run's share of the host's GPUs, said to the coordinator
// ("share") and read through executor.GPULock.Share. A run whose first
// job needs more GPUs than its share has its turn, first in that line:
// its holder locks the host's GPUs as they free up and says each is
// "free", and the coordinator's lock of one is answered at once; the
// other holders void a turn under which a GPU stands free and unlocked (a
// forged record's), or one kept by a record whose time stands still while
// its run holds the GPUs (a forged time's); and a run first in the line
// whose time stands still while it holds more than its whole share
// loses its place there (a forged time's too). Turns between parts of
// jobs over several hosts go by when each job began to wait (its
// coordinator's time, in the record), alike on every host; a part whose
// GPUs are all locked waits for its other hosts parked (its record says
// so), out of the line and not voided, until its job takes them or a
// part whose job began to wait before its own needs them. The holder of
// a run that waits stays while it waits, holding nothing.
// Requests that come together are answered together: their records are
// made, or removed, by one mkdir or rmdir. One holder per machine, not per
// GPU, costs the machine one session and one bash, and a flock(1) per GPU.
//
// Other users of the machine may be hostile. lockfs.sh says how the lock
// dir is laid out so that none of them can redirect a write, have a file of
// theirs opened, pull a lock from under its holder or get a process of
// theirs killed: at worst they make a GPU look busy, with the reason shown.
// CheckDir refuses a lock dir that another user could turn against this
// one; the hosts package leaves such a machine out.
//
// # Invariants
//
//   - A lock cannot outlive its holder: it is a flock on an open file.
//   - A holder keeps its locks for as long as the coordinator's heartbeats
//     arrive, and exits when told, which the coordinator does once it holds
//     and is asked for nothing. When the heartbeats stop, it keeps the
//     locks for the linger (as long as the job shells take to kill their
//     jobs), then exits: a lock never goes before the jobs it covers.
//   - A holder of the same run that finds such a lingering holder (its run
//     lost the connection and came back) takes its locks over at once.
//   - lockfs.sh names a GPU's locks for both the holder and the probe of
//     `gpudispatch hosts` (ProbeScript), which only tries shared locks and
//     never stands in a run's way.
package gpulock
