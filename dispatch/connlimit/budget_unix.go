//go:build unix

package connlimit

import "syscall"

// Budget is how many connections a listener may hold given the process's
// descriptor limit: a quarter of it, between 16 and most, so that three
// quarters stay for logs, the journal, SSH and the other listener.
func Budget(most int) int {
	var lim syscall.Rlimit
	n := most
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur/4 < uint64(most) {
		n = int(lim.Cur / 4)
	}
	return max(n, 16)
}
