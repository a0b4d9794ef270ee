package control

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// sameUser reports whether the peer of c runs as this process's user.
func sameUser(c net.Conn) bool {
	uid, ok := peerUID(c)
	return ok && uid == os.Getuid()
}

// peerUID is the user the peer of c runs as; ok is false when it cannot be
// told.
func peerUID(c net.Conn) (uid int, ok bool) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, false
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return 0, false
	}
	return int(cred.Uid), true
}
