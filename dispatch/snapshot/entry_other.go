//go:build !linux

package snapshot

import (
	"os"
	"path/filepath"
)

// entryIn is entry for the entry name of the open directory dir (full:
// its path; p: the entry's path relative to root).
func entryIn(_ *os.File, root, full, name, p string) (File, kind, error) {
	return entry(root, filepath.Join(full, name), p)
}
