//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package live

import (
	"os"

	"golang.org/x/sys/unix"
)

// quietControlEcho keeps the terminal f from echoing control characters as
// "^C": Ctrl-C typed while the view is drawn would be echoed where the
// cursor is, two columns the view does not know of, and the next line
// printed above the view would start there, after a piece of the bar.
// The character is still echoed, as itself, which moves no cursor; it
// still sends SIGINT. It returns what puts the terminal back as it was.
// A run in the background of its terminal (started with &, or sent there
// with Ctrl-Z and bg) leaves the terminal alone: setting its modes from
// there would stop the run (SIGTTOU).
func quietControlEcho(f *os.File) (restore func()) {
	fd := int(f.Fd())
	t, err := unix.IoctlGetTermios(fd, getTermios)
	if err != nil || t.Lflag&unix.ECHOCTL == 0 || !foreground(fd) {
		return func() {}
	}
	was := *t
	t.Lflag &^= unix.ECHOCTL
	if unix.IoctlSetTermios(fd, setTermios, t) != nil {
		return func() {}
	}
	return func() {
		if foreground(fd) {
			unix.IoctlSetTermios(fd, setTermios, &was)
		}
	}
}

// foreground reports whether this process is in the foreground of the
// terminal fd, where it may set the terminal's modes.
func foreground(fd int) bool {
	pgrp, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	return err == nil && pgrp == unix.Getpgrp()
}
