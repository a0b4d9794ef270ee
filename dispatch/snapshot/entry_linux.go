package snapshot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// entryIn looks at the entry name of the open directory dir (full: its
// path; p: the entry's path relative to root) with an fstatat relative to
// dir, where an lstat of the full path would look up each of its
// directories again. A link is entry's.
func entryIn(dir *os.File, root, full, name, p string) (File, kind, error) {
	var st unix.Stat_t
	err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		return File{}, other, nil
	case err != nil:
		return File{}, other, fmt.Errorf("sync: %s: %w", filepath.Join(full, name), err)
	case st.Mode&unix.S_IFMT == unix.S_IFREG:
		return File{Path: p, Exec: st.Mode&0o111 != 0, Size: st.Size, mtime: st.Mtim.Nano()}, aFile, nil
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return File{}, aDir, nil
	}
	// A link, or a special file: entry's.
	return entry(root, filepath.Join(full, name), p)
}
