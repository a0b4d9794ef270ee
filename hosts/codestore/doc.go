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
package codestore
