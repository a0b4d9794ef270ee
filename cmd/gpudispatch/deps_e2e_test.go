package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// A chain across real OpenSSH hosts runs in order, each job reading what
// the one before it wrote; a failed job cancels its dependents, with the
// reason on the terminal and in the exit status.
func TestSSHDependencyChain(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	d := l.Dir
	jobs := "[name=train host=node1] sleep 0.3; echo weights > " + d + "/model\n" +
		"[name=eval host=node2 after=train] cat " + d + "/model > " + d + "/score\n" +
		"[name=report after=eval] cat " + d + "/score\n" +
		"[name=broken] exit 4\n" +
		"[name=never after=broken] echo never\n"
	r := labRun(t, l, jobs, "-i", l.Inventory(""), "-o", "logs")
	if r.code != 1 {
		t.Fatalf("exit %d; want 1 (a job failed)\n%s", r.code, r.stderr)
	}
	if got := readFile(t, filepath.Join(d, "logs", "report.out")); got != "weights\n" {
		t.Errorf("report printed %q", got)
	}
	if !strings.Contains(r.stderr, "job never cancelled") || !strings.Contains(r.stderr, "dependency broken failed") {
		t.Errorf("the cancelled dependent is not said:\n%s", r.stderr)
	}
	if _, err := os.Stat(filepath.Join(d, "logs", "never.out")); err == nil {
		t.Error("the dependent of a failed job ran")
	}
}

// submit --after on a live serve: the job waits, status says for what, and
// it runs once the job it waits for succeeded.
func TestE2ESubmitAfter(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	logJournalOnFailure(t, logs)
	serve, errOut := startServe(t, dir, "--gpus", "0,1")
	flag := filepath.Join(dir, "go")
	if r := gpd(t, dir, "", "submit", "-o", "logs", "--name", "long", "--", "while [ ! -e "+flag+" ]; do sleep 0.05; done; echo made > out.txt"); r.code != 0 {
		t.Fatalf("submit: %d %s", r.code, r.stderr)
	}
	if r := gpd(t, dir, "", "submit", "-o", "logs", "--after", "long", "--name", "use", "--", "cat out.txt"); r.code != 0 {
		t.Fatalf("submit --after: %d %s", r.code, r.stderr)
	}
	st := gpd(t, dir, "", "status", "-o", "logs", "--json")
	var why string
	for _, line := range strings.Split(strings.TrimSpace(st.stdout), "\n") {
		var j struct{ Job, State, Why string }
		json.Unmarshal([]byte(line), &j)
		if j.Job == "use" {
			why = j.State + ": " + j.Why
		}
	}
	if why != "waiting: after long" {
		t.Errorf("status says of the dependent %q; want waiting: after long\n%s", why, st.stdout)
	}
	os.WriteFile(flag, nil, 0o644)
	waitJournal(t, logs, func(ev []map[string]any) bool { return count(ev, "finished") >= 2 })
	if got := readFile(t, filepath.Join(logs, "use.out")); got != "made\n" {
		t.Errorf("the dependent printed %q", got)
	}
	serve.Process.Signal(syscall.SIGTERM)
	if err := serve.Wait(); statusOf(err) != 130 {
		t.Errorf("serve: %v\n%s", err, errOut)
	}
}
