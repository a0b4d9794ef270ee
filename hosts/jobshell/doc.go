// Package jobshell runs jobs in job shells: a job shell is a bash (shell.sh)
// started once on a machine, over an SSH session or locally (package spawn),
// that runs the jobs it is sent one after another, so that a job costs no
// SSH session and no sshd fork: only a fork and its own shell.
//
// Where the login shell is bash (and Supervision.Login is LoginPerSlot), a
// machine's login profile is read once per Prelude, not once per slot: the
// first job shell for a Prelude reads it and sets up, then hands its state
// on with its hello (share.go: its variables and umask, its functions,
// aliases, options and traps, its directory, its PATH), and the machine's
// other shells for that Prelude copy it instead of reading the profile (a
// profile that changes a limit is read by each). Each job is a fork that takes
// back what the profile set, then the job's environment: what bash -lc
// would see, for the cost of a fork. The forks are made by the job shell's
// starter, a small bash of its own beside it that defined the profile's
// functions once, so that a fork has little to put away and nothing to
// define; its feeder, another, reads what the coordinator sends and makes
// each job's code for the starter, so that nothing comes back from the
// starter before the job's end (one hop between processes per job, not
// four). A fork's $$ is the starter's, so a job line that names $$ gets a
// bash of its own, with its own $$; a TERM to the starter or to the job
// shell goes to its job. A profile's TMOUT (bash's read takes it for a
// timeout) ends no shell. A shell whose profile files changed since the
// state it read or copied began to be read answers its next job "stale" without
// running it, and Run sends the job to a new shell, which reads the
// profile again. Other login shells run "$SHELL -lc" per job. Warm starts
// a shell before any command needs it (a host's first look at its GPUs
// then waits for no session and no profile read), and LoginPath gives the
// login shell's PATH to what looks for a command as a job would (a GPU
// lock holder's nvidia-smi).
//
// A job shell is set up once for the jobs it runs (executor.Prelude):
// after the profile it enters the workdir, loads the modules, activates the
// conda env (finding conda where a terminal would, also behind Ubuntu's
// "not interactive" guard in ~/.bashrc) and the venv (activate.sh), and
// tries the setup once in a subshell; each job is a fork that inherits the
// result, and still runs the setup itself. With Prelude.Interactive, an
// interactive login bash of its own reads the profile and ~/.bashrc and
// hands its variables and state back. A shell that cannot be set up runs
// no job: it answers the first with why (an *executor.UnfitError), and
// exits. A new shell that ends by itself before its first job (an exit
// status, no lost connection) was ended by the profile it read (an exit,
// exec zsh); one whose set-up outlasts Supervision.SetupLimit is ended by
// a watchdog of its own, with SIGUSR2, and what the set-up started with
// it: Run says so, as an *executor.UnfitError too. Other login
// shells, and LoginPerJob, activate per job, and a shell tries it once as
// it starts.
//
// A machine keeps its idle shells (Shells); a job takes one set up for its
// Prelude, or waits for a busy one to become idle while those keep giving
// jobs back (up to 120 ms, and 30 ms without one given back), or starts
// one, and gives it back when the job ran to its end: jobs of milliseconds
// take turns in the shells there are, and long jobs get shells of their
// own. Each job's output is
// followed on stdout and on stderr by NUL and a random mark new for that
// job, then its end on stdout (exit status, why gpudispatch ended it, when);
// a stream splits there (stream). A shell is not used again after a
// cancelled job, a failed write, or bytes that came between jobs: a process
// that left its job's group and still writes. Such a process can also write
// while the next job runs in that shell, and its bytes then land in that
// job's log: a job that starts a daemon should send the daemon's output
// elsewhere.
//
// A job's life is its own. Its output goes through two tee processes of
// its shell, to the coordinator and to the shell's stream files in the
// user's spool (~/.gpudispatch/jobs, 0700); the shell writes what runs
// (TAG.job: the job's tag, end mark, stream offsets, pid, GPUs). A
// coordinator that goes away (its connection cut, killed, asleep) ends
// nothing: the job runs to its end, the shell after it, and the files
// stay. Follow takes up such a job from the bytes a coordinator has (the
// same one once it reaches the machine again, or a later one), and once
// the job's end is home removes what was kept. Stop stops a job given up
// for lost. The time limit is kept by the shell. The spool holds, per
// shell, at most one job's record and the output of its jobs since its
// files were last started anew (Run starts new ones past 64 MiB).
//
// # Invariants
//
//   - The job line reaches the job's shell byte for byte: it travels on the
//     job shell's stdin and then as one argument of the job's bash, never
//     through a quoted command line; the command line itself is a constant
//     (spawn.Bootstrap) plus a tag of safe characters. What a shell is sent
//     comes in records (spawn.Record: fields with their byte lengths), so
//     that bash reads a job's in four system calls rather than one per
//     byte (bash 4.1's read -N).
//   - A job runs in a subshell of its own (its environment and workdir do
//     not reach the next job) and a process group of its own. A cancel (its
//     context ended) or its time limit sends the group TERM, then KILL after
//     the grace period; when the job exits on its own, what it left in its
//     group is reaped as well. Nothing else ends a job that has a tag: not
//     its coordinator's going away, nor silence. A command without a tag
//     (the coordinator's own look at the machine) is stopped when stdin
//     ends.
//   - Every byte of a job's output is in its shell's stream file before
//     its end mark is; the bytes the coordinator got plus what Follow sends
//     are the job's output, whole, once, in order.
//   - Run returns only after the job's group is gone, or with a *LostError
//     when the shell's process ended first (a lost connection): the job may
//     run on, and Follow takes it up from the bytes the error counts.
package jobshell
