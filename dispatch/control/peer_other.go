//go:build !linux

package control

import "net"

// sameUser is left to the socket's mode (0600) where the peer's
// credentials are not read.
func sameUser(net.Conn) bool { return true }

// peerUID cannot tell a peer's user here: the client relies on the
// socket's owner (socketOwner).
func peerUID(net.Conn) (int, bool) { return 0, false }
