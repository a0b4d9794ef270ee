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

// A journal or an inventory that is a FIFO is an error that names it, said
// at once: status, --resume and a run never wait on it (one read of a
// FIFO waits for a writer that never comes).
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
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "-o", "logs"}, "logs/journal.jsonl is a FIFO (named pipe)"},
		{[]string{"--gpus", "0", "-o", "logs", "--resume"}, "logs/journal.jsonl is a FIFO (named pipe)"},
		{[]string{"--gpus", "0", "-o", "logs"}, "logs/journal.jsonl is a FIFO (named pipe)"},
		{[]string{"-i", "lab.yaml", "-o", "other"}, "lab.yaml is not a regular file"},
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
