// Package jobshell runs jobs in job shells: a job shell is a bash (shell.sh)
// started once on a machine, over an SSH session or locally (package spawn),
// that runs the jobs it is sent one after another, so that a job costs no
// SSH session and no sshd fork: only a fork and its own shell.
//
// Where the login shell is bash (and Supervision.Login is LoginPerSlot), a
// job shell reads the login profile once, at its start, and each job is a
// fork of it that takes back what the profile set (functions, aliases,
// options, traps: saved once, through a temporary file removed at once, so
// that nothing is left in /tmp however the shell ends; variables stay in the
// shell), then the job's environment: what bash -lc would see, for the cost
// of a fork. A fork's $$ is the job shell's, so a job line that names $$
// gets a bash of its own, with its own $$; a TERM to the job shell goes to
// its job. A shell whose profile files changed answers its next job "stale"
// without running it, and Run sends the job to a new shell. Other login
// shells run "$SHELL -lc" per job.
//
// A machine keeps its idle shells (Shells); a job takes one or starts one,
// and gives it back when the job ran to its end. Each job's output is
// followed on stdout and on stderr by NUL and a random mark new for that
// job, then its exit status on stdout; a stream splits there (stream). A
// shell is not used again after a cancelled job, a failed write, or bytes
// that came between jobs: a process that left its job's group and still
// writes. Such a process can also write while the next job runs in that
// shell, and its bytes then land in that job's log: a job that starts a
// daemon should send the daemon's output elsewhere.
//
// # Invariants
//
//   - The job line reaches the job's shell byte for byte: it travels on the
//     job shell's stdin and then as one argument of the job's bash, never
//     through a quoted command line; the command line itself is a constant
//     (spawn.Bootstrap) plus a tag of safe characters. Fields go with their byte lengths, so
//     that bash reads each in one system call rather than one per byte
//     (bash 4.1's read -N).
//   - A job runs in a subshell of its own (its environment and workdir do
//     not reach the next job) and a process group of its own. When its
//     context ends, when the coordinator disappears (stdin closes) or when
//     heartbeats stop, the shell's watcher sends the group TERM, then KILL
//     after the grace period. When the job exits on its own, what it left
//     in its group is reaped as well.
//   - Run returns only after the job's group is gone, or with a LostError
//     when the shell's process ended first (a lost connection: the shell
//     then cleans up on its own once heartbeats stop).
//   - A shell carries a tag in its argv (its first job's) and lives until
//     its job's group is gone, so that a machine can be asked whether a
//     lost job still runs (TagPattern, ShellOf).
package jobshell
