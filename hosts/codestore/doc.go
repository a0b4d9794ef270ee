// Package codestore puts a snapshot (see dispatch/snapshot) on a machine:
// the user's content store there (~/.gpudispatch/code, 0700) keeps files
// by hash, and a snapshot's tree is built from it with hard links, so
// that only the content a machine lacks travels, and ten snapshots of a
// project cost about one copy on its disk. The machine needs bash, tar
// and coreutils, nothing else: the store's side is store.sh, run through a
// spawn.Func, and what travels is one tar stream.
//
// A tree's files are links to the store's read-only blobs: a job that
// writes into a file of the snapshot gets "permission denied" rather than
// changing it for every snapshot that shares it; it writes new files.
//
// The next snapshot of a directory is built from the last one by their
// differences. A tree jobs ran in is not a place to start from (they
// wrote and removed files there), so the machine keeps a copy no job
// touches, the base, and, made once the coordinator has its answer, a
// spare copy of that: the next build applies the differences to both where
// they are and renames the spare into the new tree, the base staying the
// base, and so neither copies nor moves 10,000 links while the coordinator
// waits. A tree built in a temporary directory (the first of a directory
// on a machine, or one whose base had no spare) gets its new base after
// the answer too: made from the blobs, by a tar of links the stream
// carries as one file, never copied from the tree, where jobs may already
// write. flock(1) keeps a build from taking the base while another changes
// it or copies its spare; without it there is no spare, and each build
// takes the base itself. The stream ends with a mark the shell checks: a
// stream cut between two entries is a whole one to tar.
//
// A store shell can be started ahead (Store.Warm): a run starts one on each
// host whose jobs need code as it opens the host, so that the snapshot does
// not wait for a session and bash to start there.
package codestore
