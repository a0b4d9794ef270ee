//go:build unix

package dispatch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// noFollow makes an open fail on a symbolic link.
const noFollow = syscall.O_NOFOLLOW

// checkOwnDir refuses a directory that another user could turn against
// this one: owned by someone but this user and root, or writable by
// everyone without the sticky bit.
func checkOwnDir(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	me := uint32(os.Getuid())
	switch {
	case sys.Uid != me && sys.Uid != 0:
		return fmt.Errorf("%s is owned by %s (mode %s), who could change what gpudispatch writes there: use a log dir of your own", dir, userName(sys.Uid), st.Mode())
	case st.Mode().Perm()&0o002 != 0 && st.Mode()&fs.ModeSticky == 0:
		return fmt.Errorf("%s may be written by every user (mode %s), who could change what gpudispatch writes there: chmod o-w or +t it, or use a log dir of your own", dir, st.Mode())
	}
	return nil
}

// checkOwnFile refuses an open file that is not a regular file of this
// user's: one that another user made in a shared log dir.
func checkOwnFile(f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	switch {
	case !st.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file (%s)", f.Name(), st.Mode())
	case ok && sys.Uid != uint32(os.Getuid()):
		return fmt.Errorf("%s belongs to %s, not to you", f.Name(), userName(sys.Uid))
	}
	return nil
}

// lockFile takes an exclusive lock on f, without waiting: errWouldBlock when
// another process holds it. The lock goes with the process.
func lockFile(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return errWouldBlock
	}
	return err
}

func userName(uid uint32) string {
	if u, err := user.LookupId(strconv.Itoa(int(uid))); err == nil {
		return u.Username
	}
	return "uid " + strconv.Itoa(int(uid))
}
