//go:build unix

package snapshot

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// What could hang a snapshot or change silently what it ships is refused
// at once, named: a FIFO among the project's files or as its .gpdignore
// (a reader of either would wait for ever), and a git work tree that git
// refuses to read (shipped as a plain directory, it would lose its
// .gitignore and ship what that keeps out).
func TestTakeRefusesWhatWouldHang(t *testing.T) {
	for _, tc := range []struct {
		name, fifo string
		want       string
	}{
		{"a FIFO in the project", "data/pipe", "data/pipe is a FIFO (named pipe), not a file"},
		{"a FIFO as .gpdignore", IgnoreFile, ".gpdignore is a FIFO (named pipe), not a file of ignore rules"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, map[string]string{"a.py": "a", "data/x": "x"})
			if err := syscall.Mkfifo(filepath.Join(dir, tc.fifo), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			_, err := Take(ctx, dir, t.TempDir(), DefaultLimit)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v; want it to say %q", err, tc.want)
			}
			if took := time.Since(start); took > time.Second {
				t.Errorf("answered after %v", took)
			}
		})
	}
}

func TestTakeRefusesADubiousWorkTree(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("GPUDISPATCH_REQUIRE_USERS") != "" {
			t.Fatal("GPUDISPATCH_REQUIRE_USERS is set, and only root can give a work tree to another user")
		}
		t.Skip("only root can give a work tree to another user")
	}
	dir := t.TempDir()
	write(t, dir, map[string]string{"a.py": "a", ".gitignore": "secret.env\n", "secret.env": "TOKEN=hf_x"})
	if out, err := exec.Command("git", "-C", dir, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	// Another user's clone.
	if out, err := exec.Command("chown", "-R", "12345:12345", dir).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v: %s", err, out)
	}
	_, err := Take(context.Background(), dir, t.TempDir(), DefaultLimit)
	if err == nil || !strings.Contains(err.Error(), "git refuses the work tree") || !strings.Contains(err.Error(), "safe.directory "+dir) {
		t.Errorf("a work tree git refuses: %v", err)
	}
}

// A git repository inside the project that is not a submodule ships whole
// (but its .git, and what .gpdignore names), in a plain directory with a
// .gpdignore and in a git work tree alike, as where no git is asked: git
// alone lists it as one directory, none of its files.
func TestTakeNestedRepos(t *testing.T) {
	for _, outerGit := range []bool{false, true} {
		dir := t.TempDir()
		write(t, dir, map[string]string{"a.py": "a", ".gpdignore": "*.log\n", "nested/n.py": "n", "nested/skip.log": "l", "nested/deep/d.py": "d"})
		if out, err := exec.Command("git", "-C", filepath.Join(dir, "nested"), "init", "-q").CombinedOutput(); err != nil {
			t.Fatalf("git init: %v: %s", err, out)
		}
		if outerGit {
			if out, err := exec.Command("git", "-C", dir, "init", "-q").CombinedOutput(); err != nil {
				t.Fatalf("git init: %v: %s", err, out)
			}
		}
		s, err := Take(context.Background(), dir, t.TempDir(), DefaultLimit)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range s.Files {
			got = append(got, f.Path)
		}
		if want := ".gpdignore a.py nested/deep/d.py nested/n.py"; strings.Join(got, " ") != want {
			t.Errorf("outer git %t: shipped %q; want %s", outerGit, got, want)
		}
	}
}
