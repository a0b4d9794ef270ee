package executor

import "io"

// Code is a snapshot of a project as a machine's content store takes it:
// its files by content hash, how it differs from an earlier snapshot of
// the same directory, and a reader of its content. The coordinator makes
// it (dispatch/snapshot); a host puts it in place without knowing how it
// was taken or where the coordinator keeps it.
type Code struct {
	// ID is a hash of Files: equal IDs, equal trees. Dir is the directory
	// taken, absolute; Key names Dir among the directories snapshots are
	// taken of, so that a machine can say which snapshot of it it has last.
	ID, Dir, Key string
	// Files are sorted by Path.
	Files []CodeFile
	// Since is how the snapshot differs from the earlier one id of the
	// same directory, when the coordinator still has that one's list.
	Since func(id string) (CodeDiff, bool)
	// Contents returns a reader of the content of Files.
	Contents func() CodeContents
}

// CodeFile is one entry of a Code.
type CodeFile struct {
	// Path is relative to the snapshot's directory, with "/" separators.
	Path string
	// Exec is set for a file with an executable bit.
	Exec bool
	// Size is the content's length; Hash its SHA-256, in hex. Both are
	// empty for a symbolic link, whose target is Link.
	Size int64
	Hash string
	Link string
}

// Blob is the name of f's content in a content store (see BlobName).
func (f CodeFile) Blob() string { return BlobName(f.Hash, f.Exec) }

// BlobName is the name of a content in a content store: its hash, with
// "x" after it for an executable file (a store's files are shared by hard
// links, and a mode is an inode's).
func BlobName(hash string, exec bool) string {
	if exec {
		return hash + "x"
	}
	return hash
}

// CodeDiff is how a snapshot differs from an earlier one.
type CodeDiff struct {
	// Changed are the files that are new or differ: another content, mode
	// or link target.
	Changed []CodeFile
	// Gone are the earlier snapshot's paths that this one has not.
	Gone []string
}

// CodeContents reads a snapshot's content, file by file.
type CodeContents interface {
	// Open returns the content of the regular file at path.
	Open(path string) (io.Reader, error)
	// Close lets go of what reading opened.
	Close()
}

// DepsVar names, in a job's environment, the directory of the files the
// jobs it waited for brought back (Command.Deps).
const DepsVar = "GPUDISPATCH_DEPS_DIR"
