// Package codestore puts a snapshot on a machine: an executor.Code, which
// the coordinator's dispatch/snapshot makes and this package knows only
// through that seam. The user's content store there (~/.gpudispatch/code,
// 0700) keeps files by hash, and a snapshot's tree is built from it with hard links, so
// that only the content a machine lacks travels, and ten snapshots of a
// project cost about one copy on its disk. The machine needs bash, tar
// and coreutils, nothing else: the store's side is store.sh, run through a
// spawn.Func, and what travels is one tar stream.
//
// No job runs in a snapshot's tree. Each log dir has its own working
// tree of each snapshot (work/LOG/ID), whose files are copies of the
// blobs (reflinks where the filesystem has them), not links to them: so
// whatever a job does to a file of its tree (appends, writes in place,
// truncates, chmods, replaces; as root too, whom no mode stops) changes
// that log dir's copy alone, never a blob, a snapshot's tree, a base, or
// another log dir's tree. Jobs of one log dir share its tree, as a shared
// workdir (a --resume finds the checkpoints its earlier attempts wrote);
// a new log dir starts from the snapshot as shipped. A working tree
// starts as a clean copy of its snapshot: so that no copy is made while
// the coordinator waits, the machine keeps, per directory, a spare clean
// copy of its last snapshot (base/KEY.work.ID), made after the answer (the
// very first tree of a directory, built of content the store had none
// of, is given to the log dir as it arrived, and the store keeps copies of
// it made after the answer, each checked against its name);
// the next working tree of any log dir takes it by a rename and changes
// it into its own snapshot by their differences (the files the two
// snapshots' trees do not link alike). What the log dir's jobs wrote in
// its last tree (the files neither snapshot ships) joins the new tree as
// hard links; a shipped file a job changed does not. A store that an
// earlier gpudispatch made (its jobs ran in links to the blobs) has every
// blob checked against its hash once, and each snapshot's blobs are
// checked again as its spare copy is made (after the answer): one that no
// longer matches is removed, with the marks of the trees and the bases
// built of it, no tree is made of it again, and the next shipping sends
// it anew and says so.
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
