// Package snapshot takes a frozen picture of a project directory on the
// coordinator's machine: the list of its files (what git would commit,
// with what its submodules commit, or every file where the directory is
// not in a git work tree, minus what a .gpdignore at its top names), each
// with its mode, its size and the SHA-256 of its content, and the in-tree
// symbolic links. The snapshot's ID is a hash of that list: two snapshots
// of the same content have the same ID, wherever and whenever they were
// taken.
//
// The content is copied into the coordinator's content store as the
// snapshot is taken, so that a host that comes up hours later gets the
// files as they were, whatever was edited since. What a snapshot finds the
// store lacks goes into one new pack (packs/NAME: contents end to end,
// each file's range reserved and written by whichever goroutine hashed
// it), so that a first snapshot of 10,000 files creates one file here, not
// 10,000; each list says where each file's content is (pack and offset).
// Content the store has is found by the directory's last list: a file
// unchanged, renamed or put back is not packed again (content shared by
// two directories is packed once per directory). The store keeps each
// snapshot's list (manifests/ID.packed, for Since and Open) and, per
// directory, an index that names the directory's last list: a file whose
// size and modification time are the list's is not read again, as git's
// index does. A list is NUL-separated fields, since a path may hold any
// other byte, sorted by path, so that two lists are compared in one pass.
// Prune removes old lists and the packs no list names; a pack stays whole
// while any list names part of it, so a Take copies into its own pack what
// it still uses of a pack mostly dead to it (less than half), and the old
// pack goes with the lists that name it. Taking a snapshot costs an lstat per
// file (on Linux an fstatat in its open directory), made on every CPU; a
// walk sorts each directory's names and puts the directories together in
// path order, never sorting the whole list. It works out how the snapshot
// differs from the directory's last one, which is what a machine that has
// that one is sent.
package snapshot
