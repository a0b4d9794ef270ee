// Package hosts runs one job's command on one machine: here (Local) or over
// a pooled SSH connection (Remote). Both run jobs in the same job shells, so
// a job behaves the same wherever it runs. Lab holds the hosts of a run and
// is the executor.Executor that dispatch runs jobs through.
//
// Jobs run in job shells (package jobshell) started through package spawn;
// GPU locks are held by lock holders (package gpulock) started the same
// way; connections come from package sshpool; nvidia-smi's answers are read
// by package nvidiasmi; the snapshots of code a job runs in are put on a
// machine by package codestore, through the job shells; the files a job
// returns come back through package results. This package puts
// them together per machine and per inventory host.
//
// Start opens the hosts in the background, a few at a time, and hands each
// one's state over as it is settled: it resolves the host, takes the pool
// of its server from a shared sshpool.Pools, and asks a `gpus: auto` host's
// nvidia-smi for its GPUs. For a run (Options.Run) it starts the run's GPU
// lock holder there, which lists the jobs the host keeps and checks its
// lock dir first: a host's opening costs it two sessions, that holder and
// a job shell. Until then the host is pending, and the Lab's
// calls for it wait. A host that refuses us (login, host key) is left out;
// one that cannot be reached stays in the run, down, while its pool keeps
// trying. A host is up
// while one of its connections lives; Run fails at once with
// executor.ErrHostDown while it is down, and WaitUp blocks. Reap asks the
// host, by the tag of the job shell that ran a lost job, whether it still
// runs.
//
// This package never imports dispatch: it implements the contract that
// dispatch defines in package executor (Lab is an executor.Executor), and
// the command line wires the two together.
package hosts
