package snapshot

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// entryIn is entry for the file name of the open directory d (full: its
// path): an fstatat relative to d, where an lstat of the full path would
// look up each of its directories again.
func entryIn(d *os.File, root, full, name, p string) (File, bool, error) {
	var st unix.Stat_t
	err := unix.Fstatat(int(d.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		return File{}, false, nil
	case err != nil:
		return File{}, false, fmt.Errorf("sync: %s: %w", full, err)
	case st.Mode&unix.S_IFMT == unix.S_IFREG:
		return File{Path: p, Exec: st.Mode&0o111 != 0, Size: st.Size, mtime: st.Mtim.Nano()}, true, nil
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return entry(root, full, p)
	}
	return File{}, false, nil
}
