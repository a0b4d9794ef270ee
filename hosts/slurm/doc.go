// Package slurm runs jobs on a Slurm cluster as batch jobs, through the
// cluster's login node: a Cluster is the executor for one inventory host
// with a slurm block.
//
// One agent (agent.sh) per run and cluster lives on the login node, on one
// SSH session of the pooled connection (or here, for `local: true`). The
// coordinator hands it batch scripts; it runs sbatch (--parsable
// --no-requeue, job name gpd-TAG, output and an exit file in the cluster
// workdir), asks squeue about all of the run's jobs at once per poll,
// whatever their number, and streams the running jobs' new output home,
// reading the files from the offsets it was told. A job's exit status comes
// from its exit file; Slurm's last state (squeue --states=all) says when it
// timed out, lost its node, was preempted or cancelled.
//
// It runs with the login shell's whole environment (what the profile
// exports: PATH, SLURM_CONF, LD_LIBRARY_PATH of a module load), as jobs do.
//
// A job's life is its own: the agent never cancels one but on the
// coordinator's word (a cancel, a second Ctrl-C). It hears from the
// coordinator every heartbeat; when it hears nothing for three of them and
// the grace (the coordinator died or was stopped, or the login node cannot
// be reached for that long), it exits, and the run's jobs run on in Slurm.
// A coordinator that comes back, or a later run with --resume (Adopt), gets
// a new agent, told of every job with the bytes of its output already home
// ("t"); the new agent makes an old one exit (the pid file), and no job is
// submitted twice: a submission whose answer was lost is found again by its
// job name.
package slurm
