//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package live

import "os"

// quietControlEcho does nothing here: the terminal echoes no "^C".
func quietControlEcho(*os.File) (restore func()) { return func() {} }
