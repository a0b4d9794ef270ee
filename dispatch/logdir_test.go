package dispatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// A released claim frees the log dir at once, even while another process
// holds a copy of its descriptor (a child forked a moment before, not yet
// at its exec).
func TestLogDirClaimReleasedWhileCopied(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		c, err := claimLogDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		child := exec.Command("sleep", "30")
		child.ExtraFiles = []*os.File{c.f}
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { child.Process.Kill(); child.Wait() }()
		c.release()
		again, err := claimLogDir(dir)
		if err != nil {
			t.Fatalf("claimed again after release: %v", err)
		}
		again.release()
	})
}

// A log dir has one live coordinator: a second run on it fails at the
// start, naming the first, and changes nothing; once the first has ended,
// the log dir is free again.
func TestLogDirClaimed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0")
		dir := t.TempDir()
		w, done := startRun(t, Options{Inventory: inv, Executor: newFakeExec(inv), LogDir: dir})
		fmt.Fprintln(w, "sleep 1ms")
		waitFor(t, func() bool { return countKind(readJournal(t, dir), EventFinished) == 1 })
		before, _ := os.ReadFile(filepath.Join(dir, JournalName))
		host, _ := os.Hostname()
		_, err := Run(context.Background(), Options{Inventory: inv, Executor: newFakeExec(inv), LogDir: dir}, []Input{{R: strings.NewReader("echo second\n")}})
		var se *SetupError
		want := fmt.Sprintf("log dir %s is in use by another gpudispatch (pid %d on %s, started ", dir, os.Getpid(), host)
		if !errors.As(err, &se) || !strings.HasPrefix(err.Error(), want) {
			t.Fatalf("second run: %v, want a setup error starting %q", err, want)
		}
		if after, _ := os.ReadFile(filepath.Join(dir, JournalName)); string(after) != string(before) {
			t.Errorf("the second run wrote to the journal:\n%s", after)
		}
		w.Close()
		<-done
		if _, err := Run(context.Background(), Options{Inventory: inv, Executor: newFakeExec(inv), LogDir: dir}, []Input{{R: strings.NewReader("echo third\n")}}); err != nil {
			t.Errorf("after the first ended: %v", err)
		}
	})
}

// A log dir, journal or claim that another user could turn against this
// one is refused before anything is written, and their files stay as they
// were.
func TestLogDirOfAnotherUser(t *testing.T) {
	m := sshtest.NewUser(t, "gpdmallory")
	shared := sshtest.SharedDir(t)
	os.Chmod(shared, 0o777|os.ModeSticky) // as /tmp is
	precious := filepath.Join(t.TempDir(), "precious")
	os.WriteFile(precious, []byte("mine\n"), 0o644)
	// mallory makes the log dir and what is in it; where rootOwns is set,
	// the log dir is then made root's (as /tmp is), so that what is tested
	// is the files mallory left in a shared sticky dir.
	tests := []struct {
		name, script, wantErr string
		rootOwns              bool
		// stickyBase makes the directory the log dir is in root's and
		// sticky, as /tmp is: only what mallory left in it is tested.
		stickyBase bool
	}{
		{"a log dir of mallory's", "mkdir -m 0755 %[1]s/logs", "logs is owned by gpdmallory", false, false},
		{"a log dir everyone may write to", "mkdir -m 0777 %[1]s/logs", "may be written by every user", true, false},
		// A shared sticky log dir is refused as a whole, before mallory's
		// files in it are even looked at.
		{"a journal linked to the victim's file", "mkdir -m 1777 %[1]s/logs && ln -s %[2]s %[1]s/logs/journal.jsonl", "may be written by every user", true, false},
		{"a claim linked to the victim's file", "mkdir -m 1777 %[1]s/logs && ln -s %[2]s %[1]s/logs/gpudispatch.lock", "may be written by every user", true, false},
		{"a journal of mallory's", "mkdir -m 1777 %[1]s/logs && echo '{\"event\":\"finished\"}' > %[1]s/logs/journal.jsonl && chmod 666 %[1]s/logs/journal.jsonl", "may be written by every user", true, false},
		// A log dir of the victim's own, under mallory's: she could move
		// it away and put her own in its place.
		{"a log dir under mallory's dir", "mkdir -m 0700 %[1]s/logs", "above the log dir, is owned by gpdmallory", true, false},
		// Her link, in a shared sticky dir, to where she reads (a directory
		// not made yet, that the run would make through it).
		{"a log dir that is mallory's link", "ln -s %[1]s/readable %[1]s/logs", "logs is a symbolic link owned by gpdmallory", false, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := filepath.Join(shared, fmt.Sprint(i))
			if out, err := m.Command("/", "bash", "-c", fmt.Sprintf("mkdir -m 0777 %[1]s && "+tt.script, base, precious)).CombinedOutput(); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if tt.rootOwns {
				if err := os.Chown(filepath.Join(base, "logs"), 0, 0); err != nil {
					t.Fatal(err)
				}
			}
			if tt.stickyBase {
				if err := os.Chown(base, 0, 0); err != nil {
					t.Fatal(err)
				}
				os.Chmod(base, 0o777|os.ModeSticky)
			}
			inv := lab("a:0")
			_, err := Run(context.Background(), Options{Inventory: inv, Executor: newFakeExec(inv), LogDir: filepath.Join(base, "logs")}, []Input{{R: strings.NewReader("echo hi\n")}})
			var se *SetupError
			if !errors.As(err, &se) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("run: %v, want a setup error saying %q", err, tt.wantErr)
			}
			if b, _ := os.ReadFile(precious); string(b) != "mine\n" {
				t.Errorf("the victim's file is now %q", b)
			}
			if _, err := os.Stat(filepath.Join(base, "readable")); err == nil {
				t.Errorf("the run made the directory mallory's link leads to")
			}
			if _, err := os.Lstat(filepath.Join(base, "logs", JournalName)); tt.rootOwns && !strings.Contains(tt.script, JournalName) && err == nil {
				t.Errorf("a journal was written in a log dir that was refused")
			}
		})
	}
}

// A log dir that a group may write to (or that lies under one) is refused
// before anything is written, naming the group; one the group may only
// read is used, and its new files are readable by the group too, as the
// dir is. A new log dir, and its files, are the user's alone.
func TestLogDirModes(t *testing.T) {
	t.Parallel()
	inv := lab("a:0")
	run := func(dir string) error {
		_, err := Run(context.Background(), Options{Inventory: inv, Executor: newFakeExec(inv), LogDir: dir}, []Input{{R: strings.NewReader("echo hi\n")}})
		return err
	}
	root := t.TempDir()
	for _, tt := range []struct {
		name     string
		parent   os.FileMode // 0: no parent made
		leaf     os.FileMode // 0: the log dir is made by the run
		wantErr  string
		wantFile os.FileMode
	}{
		{"new", 0, 0, "", 0o600},
		{"private", 0, 0o700, "", 0o600},
		{"group may read", 0, 0o750, "", 0o640},
		{"everyone may read", 0, 0o755, "", 0o644},
		{"group may write", 0, 0o770, "may be written by its group users", 0},
		{"group may write, setgid", 0, 0o2770, "may be written by its group users", 0},
		{"under a dir the group may write", 0o770, 0o700, "above the log dir, may be written by its group users", 0},
		{"under a dir everyone may write", 0o777, 0o700, "above the log dir, may be written by every user", 0},
		{"new, under a dir the group may write", 0o775, 0, "may be written by its group users", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(root, strings.ReplaceAll(tt.name, " ", "-"))
			logs := dir
			if tt.parent != 0 {
				os.Mkdir(dir, 0o700)
				os.Chmod(dir, tt.parent)
				logs = filepath.Join(dir, "logs")
			}
			if tt.leaf != 0 {
				os.Mkdir(logs, 0o700)
				os.Chmod(logs, tt.leaf)
			}
			if (tt.parent|tt.leaf)&0o020 != 0 {
				// A group of others: "users", with no member here.
				users := sharedGroup(t)
				os.Chown(dir, -1, users)
				os.Chown(logs, -1, users)
				os.Chmod(dir, tt.parent|tt.leaf&^0o7000) // chown drops setgid
				os.Chmod(logs, cmp.Or(tt.leaf, tt.parent))
			}
			err := run(logs)
			if tt.wantErr != "" {
				var se *SetupError
				if !errors.As(err, &se) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("run: %v, want a setup error saying %q", err, tt.wantErr)
				}
				if entries, _ := os.ReadDir(logs); len(entries) > 0 {
					t.Errorf("a refused log dir was written to: %v", entries)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st, _ := os.Stat(logs); tt.leaf == 0 && st.Mode().Perm() != 0o700 {
				t.Errorf("new log dir: mode %s, want 0700", st.Mode())
			}
			for _, name := range []string{JournalName, ClaimName, "1.out", "1.err"} {
				st, err := os.Stat(filepath.Join(logs, name))
				if err != nil || st.Mode().Perm() != tt.wantFile {
					t.Errorf("%s: %v %v, want mode %s", name, st.Mode(), err, tt.wantFile)
				}
			}
		})
	}
}

// sharedGroup is the gid of the group "users" (Debian's base-passwd has
// it), a group that is not the test's user's own; chgrp to it needs root.
func sharedGroup(t *testing.T) int {
	t.Helper()
	if os.Geteuid() != 0 {
		sshtest.Missing(t, "GPUDISPATCH_REQUIRE_USERS", "chgrp to a group of others needs root")
	}
	g, err := user.LookupGroup("users")
	if err != nil {
		t.Fatalf("group users: %v", err)
	}
	gid, _ := strconv.Atoi(g.Gid)
	return gid
}

// A directory that its group may write is the user's own when the group is
// the user's private one (umask 002 with user private groups): used.
func TestLogDirPrivateGroup(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		u, err := user.Current()
		if err != nil {
			t.Fatal(err)
		}
		g, err := user.LookupGroupId(u.Gid)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "logs")
		os.Mkdir(dir, 0o700)
		os.Chmod(dir, 0o775)
		inv := lab("a:0")
		_, err = Run(context.Background(), Options{Inventory: inv, Executor: newFakeExec(inv), LogDir: dir}, []Input{{R: strings.NewReader("echo hi\n")}})
		private := g.Name == u.Username && !strings.Contains(readGroupMembers(t, g.Name), ",")
		if private && err != nil {
			t.Errorf("a log dir of the user's private group %s: %v", g.Name, err)
		}
		if !private && (err == nil || !strings.Contains(err.Error(), "may be written by its group")) {
			t.Errorf("a log dir of group %s, not private: %v", g.Name, err)
		}
	})
}

// readGroupMembers is the member list of group name in /etc/group.
func readGroupMembers(t *testing.T, name string) string {
	b, _ := os.ReadFile("/etc/group")
	for line := range strings.Lines(string(b)) {
		if f := strings.Split(strings.TrimSpace(line), ":"); len(f) == 4 && f[0] == name {
			return f[3]
		}
	}
	return ""
}
