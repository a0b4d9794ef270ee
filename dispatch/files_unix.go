//go:build unix

package dispatch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// noFollow makes an open fail on a symbolic link.
const noFollow = syscall.O_NOFOLLOW

// CheckLogDir refuses a log dir that another user of this machine could
// turn against this one: one that they may write in (they could plant a
// socket that answers as gpudispatch, or swap the journal), or under a
// directory they may write in and so replace the log dir itself. The log
// dir (when it exists) must be this user's (or root's) and writable by no
// group or other; every directory above it, the user's or root's and
// writable by no group or other unless it is root's and sticky, as /tmp
// is. Both the path as given and where its links lead are checked. Nothing
// is written.
func CheckLogDir(dir string) error { return checkPrivate(dir, logDirKind) }

// CheckCacheDir refuses the cache where the coordinator keeps the content
// of its snapshots of code (dir) on the same terms as CheckLogDir: another
// user who may write there could swap the code a run ships.
func CheckCacheDir(dir string) error { return checkPrivate(dir, cacheKind) }

// privateKind says what a directory CheckLogDir or CheckCacheDir looks at
// is, and how a user gets one of their own.
type privateKind struct {
	name, own, share string
}

var (
	logDirKind = privateKind{"log dir", "use a log dir of your own (-o)", "; to share logs, let the group read it (chmod 750)"}
	cacheKind  = privateKind{"snapshot cache", "set XDG_CACHE_HOME to a directory of your own", ""}
)

func checkPrivate(dir string, k privateKind) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	// A link another user made leads where they chose (a directory they
	// read), and the checks below would look there as if it were ours.
	if li, err := os.Lstat(abs); err == nil && li.Mode()&fs.ModeSymlink != 0 {
		if sys, ok := li.Sys().(*syscall.Stat_t); ok && sys.Uid != uint32(os.Getuid()) && sys.Uid != 0 {
			return fmt.Errorf("%s %s is a symbolic link owned by %s, who chose where it leads: %s", k.name, abs, UserName(int(sys.Uid)), k.own)
		}
	}
	paths := []string{abs}
	if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
		paths = append(paths, real)
	}
	for _, p := range paths {
		leaf := true
		for {
			if err := checkDir(p, leaf, k); err != nil {
				return err
			}
			leaf = false
			up := filepath.Dir(p)
			if up == p {
				break
			}
			p = up
		}
	}
	return nil
}

// checkDir checks one directory of checkPrivate's: the one checked itself
// when leaf, else one above it. One that does not exist yet passes: it
// will be made the user's, 0700.
func checkDir(p string, leaf bool, k privateKind) error {
	st, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // made by claimLogDir, or the snapshot, the user's
	}
	if err != nil {
		return fmt.Errorf("%s: %w", k.name, err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	me := uint32(os.Getuid())
	what := k.name + " " + p
	if !leaf {
		what = p + ", above the " + k.name + ","
	}
	perm := st.Mode().Perm()
	switch {
	case sys.Uid != me && sys.Uid != 0:
		return fmt.Errorf("%s is owned by %s (mode %s), who could change what gpudispatch writes there: %s", what, UserName(int(sys.Uid)), st.Mode(), k.own)
	case perm&0o022 == 0:
		return nil
	case perm&0o002 == 0 && privateGroup(sys.Gid):
		return nil // the user's own group (umask 002 with user private groups)
	case !leaf && st.Mode()&fs.ModeSticky != 0 && sys.Uid == 0:
		return nil // /tmp: others may add entries, never replace ours
	case perm&0o002 != 0:
		return fmt.Errorf("%s may be written by every user (mode %s), who could plant files or a socket that answers as gpudispatch there: %s, or chmod o-w it", what, st.Mode(), k.own)
	default:
		return fmt.Errorf("%s may be written by its group %s (mode %s), whose members could plant files or a socket that answers as gpudispatch there: %s, or chmod g-w it%s", what, groupName(sys.Gid), st.Mode(), k.own, k.share)
	}
}

// JournalOwner names the owner of the journal in logDir when it is not this
// user (root's counts as anyone's own); "" otherwise.
func JournalOwner(logDir string) string {
	st, err := os.Stat(filepath.Join(logDir, JournalName))
	if err != nil {
		return ""
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok || sys.Uid == uint32(os.Getuid()) || sys.Uid == 0 {
		return ""
	}
	return UserName(int(sys.Uid))
}

// fileMode is the mode of a new file in a log dir whose mode is dirMode:
// the user's alone (0600), readable by those who may read the dir (0640
// in a 0750 dir), never writable by others.
func fileMode(dirMode fs.FileMode) fs.FileMode {
	return 0o600 | dirMode.Perm()&0o044
}

// checkOwnFile refuses an open file that is not a regular file of this
// user's: one that another user made in a shared log dir.
func checkOwnFile(f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%s)", f.Name(), st.Mode())
	}
	if owner := ForeignOwner(st); owner != "" {
		return fmt.Errorf("%s belongs to %s, not to you", f.Name(), owner)
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

// unlockFile lets go of f's lock, whoever else holds a copy of f's
// descriptor (a child forked a moment ago, on its way to exec).
func unlockFile(f *os.File) { syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }

// privateGroup reports whether gid is this user's private group (as
// Debian's OpenSSH judges one for StrictModes): the user's primary group,
// named after the user, with no other member in /etc/group. Distributions
// with user private groups give new directories 0775 under umask 002.
func privateGroup(gid uint32) bool {
	u, err := user.Current()
	if err != nil || u.Gid != strconv.Itoa(int(gid)) {
		return false
	}
	g, err := user.LookupGroupId(u.Gid)
	if err != nil || g.Name != u.Username {
		return false
	}
	b, err := os.ReadFile("/etc/group")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Split(strings.TrimSpace(line), ":")
		if len(f) != 4 || f[0] != g.Name {
			continue
		}
		for _, m := range strings.Split(f[3], ",") {
			if m != "" && m != u.Username {
				return false
			}
		}
		return true
	}
	return false
}

func groupName(gid uint32) string {
	if g, err := user.LookupGroupId(strconv.Itoa(int(gid))); err == nil {
		return g.Name
	}
	return "gid " + strconv.Itoa(int(gid))
}

// ForeignOwner names the owner of the file fi when that is another user;
// "" when it is this user's.
func ForeignOwner(fi fs.FileInfo) string {
	sys, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || sys.Uid == uint32(os.Getuid()) {
		return ""
	}
	return UserName(int(sys.Uid))
}

// inGroup starts c in a process group of its own, which its context's end
// kills whole: what a hook started goes with it.
func inGroup(c *exec.Cmd) {
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
}
