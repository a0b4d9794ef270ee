package control

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

// maxAddr is the longest socket path every system takes (sun_path holds
// 104 bytes on macOS, 108 on Linux, with the final NUL).
const maxAddr = 103

// socketAddr is the address of socket name in dir: its path, or on Linux,
// when the path is too long for a socket address, a path through an open
// descriptor of dir (/proc/self/fd/N/name); done closes that descriptor.
func socketAddr(dir, name string) (addr string, done func(), err error) {
	path := filepath.Join(dir, name)
	if len(path) <= maxAddr {
		return path, func() {}, nil
	}
	if runtime.GOOS != "linux" {
		return "", nil, fmt.Errorf("%s: the path is too long for a Unix socket (at most %d bytes): use a shorter log dir", path, maxAddr)
	}
	d, err := os.Open(dir)
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), name), func() { d.Close() }, nil
}
