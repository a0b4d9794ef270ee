package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// blobs counts the files of a host's content store.
func blobs(t *testing.T, home string) int {
	n := 0
	filepath.Walk(filepath.Join(home, ".gpudispatch", "code", "blobs"), func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n++
		}
		return nil
	})
	return n
}

// --sync: the jobs run in a snapshot of the project taken as the run
// started, on hosts that share no filesystem with this machine or each
// other: an edit made mid-sweep reaches none of them; git's ignore rules
// hold and .git stays home; a second run with one file changed ships that
// file alone; a link out of the project stops the run before anything
// runs.
func TestSSHSync(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	proj := filepath.Join(l.Dir, "proj")
	os.MkdirAll(filepath.Join(proj, "src"), 0o755)
	for name, content := range map[string]string{"conf.txt": "v1\n", "src/train.sh": "cat conf.txt\n", ".gitignore": "*.log\n", "old.log": "x\n"} {
		os.WriteFile(filepath.Join(proj, name), []byte(content), 0o644)
	}
	if out, err := exec.Command("git", "-C", proj, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	inv := envInventory(t, l, "lab.yaml", "")
	var jobs strings.Builder
	for i := range 8 {
		fmt.Fprintf(&jobs, "sleep 0.3; sh src/train.sh; ls -A | tr '\\n' ' '; echo; pwd; echo result %d > result.txt\n", i)
	}
	cmd := labCmd(t, l, jobs.String(), "-i", inv, "-o", "logs", "--sync", "proj")
	errOut := &strings.Builder{}
	cmd.Stderr = errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logDir := filepath.Join(l.Dir, "logs")
	// Edited as soon as the first job started: the later ones run the
	// snapshot all the same.
	waitJournal(t, logDir, func(evs []map[string]any) bool { return count(evs, "started") > 0 })
	os.WriteFile(filepath.Join(proj, "conf.txt"), []byte("v2\n"), 0o644)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	var id string
	for _, e := range journal(t, logDir) {
		if e["event"] == "started" {
			if id == "" {
				id, _ = e["snapshot"].(string)
			}
			if e["snapshot"] != id || id == "" {
				t.Errorf("a started event's snapshot is %v, another's %q", e["snapshot"], id)
			}
		}
	}
	if !strings.Contains(errOut.String(), "gpudispatch: snapshot "+id+" of "+proj+": 3 files") {
		t.Errorf("the run did not say what it took (snapshot %s, 3 files):\n%s", id, errOut)
	}
	homes := map[string]string{}
	for _, h := range l.Hosts {
		homes[filepath.Join(h.Home, ".gpudispatch/code/snaps", id)] = h.Name
	}
	for i := 1; i <= 8; i++ {
		out := readFile(t, filepath.Join(logDir, fmt.Sprint(i)+".out"))
		lines := strings.Split(out, "\n")
		// result.txt is there once an earlier job on the host wrote it.
		if len(lines) < 3 || lines[0] != "v1" || strings.ReplaceAll(lines[1], "result.txt ", "") != ".gitignore conf.txt src " || homes[lines[2]] == "" {
			t.Errorf("job %d printed %q; want v1, the snapshot's files (no .git, no old.log), and its tree in a host's home", i, out)
		}
	}
	st := gpd(t, l.Dir, "", "status", "--json", "-o", "logs")
	lines := strings.Split(strings.TrimSpace(st.stdout), "\n")
	for _, line := range lines {
		var j struct {
			Snapshot string `json:"snapshot"`
		}
		if err := json.Unmarshal([]byte(line), &j); err != nil || j.Snapshot != id {
			t.Errorf("status --json says %s (%v); want snapshot %s", line, err, id)
		}
	}
	if len(lines) != 8 {
		t.Errorf("status --json: %d jobs, want 8", len(lines))
	}

	// Run again: conf.txt changed (v2): one file travels to each host.
	before := map[string]int{}
	for _, h := range l.Hosts {
		before[h.Name] = blobs(t, h.Home)
	}
	r := labRun(t, l, "@node1 cat conf.txt\n@node2 cat conf.txt\n", "-i", inv, "-o", "logs2", "--sync", "proj")
	if r.code != 0 {
		t.Fatalf("second run: exit %d\n%s", r.code, r.stderr)
	}
	for i, h := range l.Hosts {
		if got := readFile(t, filepath.Join(l.Dir, "logs2", fmt.Sprint(i+1)+".out")); got != "v2\n" {
			t.Errorf("%s: the second run's job printed %q, want v2", h.Name, got)
		}
		if n := blobs(t, h.Home); n != before[h.Name]+1 {
			t.Errorf("%s: the store went from %d to %d blobs; want one more", h.Name, before[h.Name], n)
		}
	}

	// A link out of the project: nothing runs.
	os.Symlink("/etc", filepath.Join(proj, "etc"))
	r = labRun(t, l, "echo never\n", "-i", inv, "-o", "logs3", "--sync", "proj")
	if r.code == 0 || !strings.Contains(r.stderr, filepath.Join(proj, "etc")+" is a symbolic link to /etc, out of "+proj) {
		t.Errorf("a link out of the project: exit %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(l.Dir, "logs3")); err == nil {
		t.Errorf("a refused snapshot made a log dir")
	}

	// hosts --clean: the two snapshots go from each host, and their content.
	r = labRun(t, l, "", "hosts", "-i", inv, "--clean")
	if r.code != 0 {
		t.Fatalf("hosts --clean: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, h := range l.Hosts {
		if want := h.Name + ": removed 2 snapshots and "; !strings.Contains(r.stdout, want) || blobs(t, h.Home) != 0 {
			t.Errorf("hosts --clean said\n%s\nwant %q..., and left %d blobs on %s", r.stdout, want, blobs(t, h.Home), h.Name)
		}
	}
}
