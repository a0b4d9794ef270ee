// Package snapshot takes a frozen picture of a project directory on the
// coordinator's machine: the list of its files (what git would commit, or
// every file where the directory is not in a git work tree, minus what a
// .gpdignore at its top names), each with its mode, its size and the
// SHA-256 of its content, and the in-tree symbolic links. The snapshot's
// ID is a hash of that list: two snapshots of the same content have the
// same ID, wherever and whenever they were taken.
//
// A snapshot holds no bytes: the content is read again, from the
// directory, when a host lacks it (see hosts/codestore). A file whose size
// or content changed since the snapshot was taken is refused then, so a
// host never builds a tree that differs from the snapshot's ID.
package snapshot
