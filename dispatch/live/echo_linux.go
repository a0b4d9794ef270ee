package live

import "golang.org/x/sys/unix"

// The ioctls that read and set a terminal's modes (echo_unix.go).
const (
	getTermios = unix.TCGETS
	setTermios = unix.TCSETS
)
