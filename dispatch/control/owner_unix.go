//go:build unix

package control

import (
	"io/fs"
	"syscall"
)

// socketOwner is the user who owns the file fi; ok is false when it cannot
// be told.
func socketOwner(fi fs.FileInfo) (uid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
