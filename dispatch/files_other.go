//go:build !unix

package dispatch

import (
	"io/fs"
	"os"
	"os/exec"
)

// Systems without Unix owners and flock(2) (Windows) keep their log dirs
// to their user by other means; these checks pass there.

const noFollow = 0

// CheckLogDir passes every log dir where owners are not read.
func CheckLogDir(string) error { return nil }

// CheckCacheDir checks nothing where owners and modes are not read.
func CheckCacheDir(string) error { return nil }

func fileMode(fs.FileMode) fs.FileMode { return 0o600 }

// JournalOwner names no owner where owners are not read.
func JournalOwner(string) string { return "" }

// ForeignOwner names no owner where owners are not read.
func ForeignOwner(fs.FileInfo) string { return "" }

func checkOwnFile(*os.File) error { return nil }

func lockFile(*os.File) error { return nil }

// unlockFile has no lock to let go of here.
func unlockFile(*os.File) {}

// inGroup leaves c as it is where process groups are not Unix's.
func inGroup(*exec.Cmd) {}
