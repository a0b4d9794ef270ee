//go:build !linux

package snapshot

import "os"

// entryIn is entry for the file name of the open directory d (full: its
// path).
func entryIn(_ *os.File, root, full, _, p string) (File, bool, error) {
	return entry(root, full, p)
}
