//go:build !unix

package control

import "io/fs"

// socketOwner cannot tell a file's owner here.
func socketOwner(fs.FileInfo) (int, bool) { return 0, false }
