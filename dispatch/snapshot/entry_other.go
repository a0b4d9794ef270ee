//go:build !linux

package snapshot

import (
	"os"
	"path/filepath"
)

// entryIn looks at the entry name of the open directory dir (full: its
// path; p: the entry's path relative to root). A file or a link is
// entry's.
func entryIn(_ *os.File, root, full, name, p string) (File, kind, error) {
	path := filepath.Join(full, name)
	if fi, err := os.Lstat(path); err == nil && fi.IsDir() {
		return File{}, aDir, nil
	}
	return fileOrNot(entry(root, path, p))
}
