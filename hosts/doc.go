// Package hosts runs one job's command on one machine: here (Local) or, later,
// over a pooled SSH connection. Both go through the same wrapper (wrapper.sh),
// so a job behaves the same wherever it runs.
//
// Invariants:
//   - The job line reaches the login shell ($SHELL -lc, bash if unset) byte for
//     byte: it travels on the wrapper's stdin, never through a quoted command
//     line.
//   - A job runs in a process group of its own. When its context ends, when the
//     coordinator disappears (stdin closes) or when heartbeats stop, the wrapper
//     sends the group TERM, then KILL after the grace period. When the job exits
//     on its own, what it left in its group is reaped as well. No process of a
//     finished Run call keeps holding a GPU.
//   - Run returns only after the wrapper has exited, so a returned slot is free.
//
// This package never imports dispatch; dispatch reaches it through the
// Executor interface it defines.
package hosts
