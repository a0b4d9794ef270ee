//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A journal, an inventory or a job file that is a FIFO is an error that
// names it, said at once: status, --resume and a run never wait on it (one
// read of a FIFO waits for a writer that never comes). A pipe a shell
// gives for a job file (<(...)) is read as stdin is.
func TestE2EFIFOsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "logs"), 0o700)
	if err := syscall.Mkfifo(filepath.Join(dir, "logs", "journal.jsonl"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "lab.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "jobs.fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "-o", "logs"}, "logs/journal.jsonl is a FIFO (named pipe)"},
		{[]string{"--gpus", "0", "-o", "logs", "--resume"}, "logs/journal.jsonl is a FIFO (named pipe)"},
		{[]string{"--gpus", "0", "-o", "logs"}, "logs/journal.jsonl is a FIFO (named pipe)"},
		{[]string{"-i", "lab.yaml", "-o", "other"}, "lab.yaml is not a regular file"},
		{[]string{"--gpus", "0", "-o", "other", "jobs.fifo"}, "job file jobs.fifo is a FIFO (named pipe)"},
	} {
		start := time.Now()
		r := gpd(t, dir, "true\n", tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d\n%s", tc.args, r.code, r.stderr)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("%v: answered after %v", tc.args, took)
		}
	}
}

// A link to an anonymous pipe (what <(...) and /dev/stdin are, here a
// pipe to the test) is a job file.
func TestE2EPipeAsJobFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := gpd(t, dir, "echo piped\n", "--gpus", "0", "-o", "logs", "/dev/stdin")
	if r.code != 0 || readFile(t, filepath.Join(dir, "logs", "1.out")) != "piped\n" {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
}
