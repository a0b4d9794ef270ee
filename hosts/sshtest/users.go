//go:build unix

package sshtest

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"

	"al.essio.dev/pkg/shellescape"
)

// User is a second Unix user of this machine, made for tests of what one
// user of a shared host can do to another's runs.
type User struct {
	Name     string
	UID, GID int
}

// NewUser returns the test user name, adding it (useradd, no home) when it
// does not exist yet. It skips the test when users cannot be added here
// (not root, no useradd), unless GPUDISPATCH_REQUIRE_USERS is set (CI sets
// it), which makes that a failure.
func NewUser(t testing.TB, name string) User {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		why := ""
		switch {
		case os.Geteuid() != 0:
			why = "not root"
		case tool("useradd") == "":
			why = "no useradd"
		}
		if why != "" {
			Missing(t, "GPUDISPATCH_REQUIRE_USERS", "cannot add test user %s: %s", name, why)
		}
		// Two packages' tests may add it at once: one of them loses.
		out, err := exec.Command(tool("useradd"), "--no-create-home", "--shell", "/bin/bash", name).CombinedOutput()
		if u, err = user.Lookup(name); err != nil {
			t.Fatalf("useradd %s: %s", name, out)
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return User{Name: name, UID: uid, GID: gid}
}

// Command is cmd run as u (runuser), in dir.
func (u User) Command(dir string, cmd ...string) *exec.Cmd {
	c := exec.Command(tool("runuser"), append([]string{"-u", u.Name, "--"}, cmd...)...)
	c.Dir = dir
	return c
}

// Line is a bash command line that runs the bash command line line as u.
func (u User) Line(line string) string {
	return "exec " + tool("runuser") + " -u " + u.Name + " -- bash -c " + shellescape.Quote(line)
}

// SharedDir makes a directory under /tmp that every test user can reach
// (root's, mode 0755), removed after the test: t.TempDir is root's and
// 0700.
func SharedDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "gpudispatch-users-")
	must(t, err)
	must(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Clean(dir)
}

// tool finds an administrator's command, on PATH or in /usr/sbin and /sbin
// (which a user's PATH may lack); "" when there is none.
func tool(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if p := filepath.Join(dir, name); fileExists(p) {
			return p
		}
	}
	return ""
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
