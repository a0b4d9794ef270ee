// Package hosts runs one job's command on one machine: here (Local) or over
// a pooled SSH connection (Remote). Both run jobs in the same job shells
// (shell.sh), so a job behaves the same wherever it runs.
//
// Job shells: a job shell is a bash started once (over a pool session, or
// locally) that runs the jobs it is sent one after another, so that a job
// costs no SSH session, no sshd fork and no extra bash: only a fork and its
// own login shell. A machine keeps its idle shells (shells); a job takes
// one or starts one, and gives it back when the job ran to its end. Each
// job's output is followed on stdout and on stderr by NUL and a random mark
// new for that job, then its exit status on stdout; a stream splits there
// (stream). A shell is not used again after a cancelled job, a failed
// write, or bytes that came between jobs: a process that left its job's
// group and still writes. Such a process can also write while the next job
// runs in that shell, and its bytes then land in that job's log: a job that
// starts a daemon should send the daemon's output elsewhere.
//
// Invariants:
//   - The job line reaches the login shell ($SHELL -lc, bash if unset) byte for
//     byte: it travels on the shell's stdin, never through a quoted command
//     line; the command line itself is a constant (bootstrap) plus a tag of
//     safe characters. Fields go with their byte lengths, so that bash reads
//     each in one system call rather than one per byte (bash 4.1's read -N).
//   - A job runs in a subshell of its own (its environment and workdir do not
//     reach the next job) and a process group of its own. When its context
//     ends, when the coordinator disappears (stdin closes) or when heartbeats
//     stop, the shell's watcher sends the group TERM, then KILL after the grace
//     period. When the job exits on its own, what it left in its group is
//     reaped as well. No process of a finished Run call keeps holding a GPU.
//   - Run returns only after the job's group is gone (or, remotely, the
//     connection is gone, in which case the error wraps executor.ErrConnectionLost and
//     the shell cleans up on its own once heartbeats stop).
//
// SSH: Open resolves each host (inventory entry, ssh_config, defaults,
// OpenSSH defaults), checks host keys against known_hosts (unknown: refused
// unless accepting new keys; changed: always refused) and keeps a pool of
// connections per host. A pool hands out sessions, learns a connection's
// MaxSessions from the server's refusal and then opens another connection.
// Hosts that resolve to the same server but for their names (ssh_config
// aliases) share one pool: host keys are checked by address. The dialer
// shared by all pools allows at most startupsPerAddr (6) handshakes at once
// per address, so sshd's MaxStartups (10) never drops one, and keeps one
// client per jump host. Every connection has an owner goroutine that sends
// keepalives and closes it when the server stops answering; Lab.Close
// closes them all.
//
// Health: a host is up while one of its connections lives. When the last one
// dies the pool redials at once, then with exponential backoff and jitter
// (long after a refused login or host key, for sshd's PerSourcePenalties);
// meanwhile Run fails at once with executor.ErrHostDown and WaitUp blocks. Each job
// shell carries a tag in its argv (its first job's) and lives until its job's
// group is gone, so Reap can tell on the host, by the tag of the shell that
// ran it, whether a lost job still runs.
//
// GPU locks: a machine's lockers start one lock.sh per run, over
// the pool or locally, with the same bootstrap as job shells, when the run
// asks for its first GPU there. It finds the GPUs' UUIDs through the login
// shell's nvidia-smi once, and takes an exclusive flock on a file named by a
// GPU's UUID in a shared sticky directory when told "lock N", answering on
// its stdout; "release N" lets go at once. It holds its locks for as long as
// the coordinator's heartbeats arrive, and exits when told, which the
// coordinator does once it holds and is asked for nothing. When the
// heartbeats stop, it keeps the locks for as long as the job shells take to
// kill their jobs, then exits. A lock cannot outlive its holder, and never
// goes before the jobs it covers. One holder per machine, not per GPU, costs
// the machine one session, one bash and one nvidia-smi, and a flock(1) per
// GPU.
//
// This package never imports dispatch: it implements the contract that
// dispatch defines in package executor (Lab is an executor.Executor), and
// the command line wires the two together.
package hosts
