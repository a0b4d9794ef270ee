package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

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
	// Each job's workdir is the log dir's working tree of the snapshot on
	// its host.
	homes := map[string]string{}
	for _, h := range l.Hosts {
		trees, _ := filepath.Glob(filepath.Join(h.Home, ".gpudispatch/code/work/*", id))
		for _, tree := range trees {
			homes[tree] = h.Name
		}
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

	// A link out of the project: nothing runs, and the run does not wait
	// for its hosts (the snapshot is taken while they are opened; here
	// one that never answers) to say so.
	os.Symlink("/etc", filepath.Join(proj, "etc"))
	silent := filepath.Join(l.Dir, "silent.yaml")
	os.WriteFile(silent, fmt.Appendf(nil, "hosts:\n  - name: silent\n    hostname: 127.0.0.1\n    port: %d\n    identity_file: %s\n    gpus: [0]\n", silentListener(t), l.ClientKey), 0o644)
	start := time.Now()
	r = labRun(t, l, "echo never\n", "-i", silent, "-o", "logs3", "--sync", "proj", "--connect-timeout", "60s")
	if r.code == 0 || !strings.Contains(r.stderr, filepath.Join(proj, "etc")+" is a symbolic link to /etc, out of "+proj) {
		t.Errorf("a link out of the project: exit %d\n%s", r.code, r.stderr)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the refused snapshot was said after %v: the run waited for the silent host", took)
	}
	if _, err := os.Stat(filepath.Join(l.Dir, "logs3")); err == nil {
		t.Errorf("a refused snapshot made a log dir")
	}

	// hosts --check looks at a host that syncs from inside its snapshot.
	os.Remove(filepath.Join(proj, "etc"))
	synced := envInventory(t, l, "synced.yaml", "  sync: proj")
	r = labRun(t, l, "", "hosts", "-i", synced, "--check", "cat conf.txt")
	if r.code != 0 || strings.Count(r.stdout, "    v2\n") != 2 || !strings.Contains(r.stdout, "/.gpudispatch/code/work/") {
		t.Errorf("hosts --check with sync: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// hosts --clean: the two snapshots go from each host, and their content.
	r = labRun(t, l, "", "hosts", "-i", inv, "--clean")
	if r.code != 0 {
		t.Fatalf("hosts --clean: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, h := range l.Hosts {
		if want := h.Name + ": removed 2 snapshots, 3 working trees and "; !strings.Contains(r.stdout, want) || blobs(t, h.Home) != 0 {
			t.Errorf("hosts --clean said\n%s\nwant %q..., and left %d blobs on %s", r.stdout, want, blobs(t, h.Home), h.Name)
		}
	}
}

// Jobs bring their results home, over real OpenSSH hosts with homes of
// their own: a directory with subdirectories and a glob, from the
// snapshot's tree, on success and on failure, into LOGDIR/ID/; the
// inventory's return: for a job that names none; a path that names
// nothing is said, and the job's outcome stands. A coordinator killed
// while such a job runs leaves it running; --resume re-adopts it, and its
// results arrive.
func TestSSHReturn(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	proj := filepath.Join(l.Dir, "proj")
	os.MkdirAll(proj, 0o755)
	os.WriteFile(filepath.Join(proj, "seed.txt"), []byte("42\n"), 0o644)
	inv := envInventory(t, l, "lab.yaml", "  return: [summary.txt]")
	job := func(id string, exit int) string {
		return fmt.Sprintf("[name=%s return=out/%s/,'m-%s-*.json',nothing/] mkdir -p out/%s/a/b && cat seed.txt > out/%s/a/b/seed && echo %s > m-%s-1.json && echo 2 > m-%s-2.json && exit %d\n", id, id, id, id, id, id, id, id, exit)
	}
	r := labRun(t, l, job("ok", 0)+job("bad", 3)+"[name=dflt] echo all > summary.txt\n", "-i", inv, "-o", "logs", "--sync", "proj")
	if r.code != 1 {
		t.Fatalf("exit %d; want 1 (a job failed)\n%s", r.code, r.stderr)
	}
	logDir := filepath.Join(l.Dir, "logs")
	for _, id := range []string{"ok", "bad"} {
		got := map[string]string{}
		for _, p := range []string{"out/" + id + "/a/b/seed", "m-" + id + "-1.json", "m-" + id + "-2.json"} {
			got[p] = readFile(t, filepath.Join(logDir, id, p))
		}
		if got["out/"+id+"/a/b/seed"] != "42\n" || got["m-"+id+"-1.json"] != id+"\n" || got["m-"+id+"-2.json"] != "2\n" {
			t.Errorf("job %s's results: %q", id, got)
		}
		if !regexp.MustCompile(`job ` + id + `: 3 files \([0-9]+ B\) back in logs/` + id + `/; return: nothing/ named nothing on node[12] \(the job's outcome stands\)`).MatchString(r.stderr) {
			t.Errorf("the missing path of job %s is not said:\n%s", id, r.stderr)
		}
	}
	if got := readFile(t, filepath.Join(logDir, "dflt", "summary.txt")); got != "all\n" {
		t.Errorf("the inventory's return: brought %q", got)
	}
	returned := 0
	for _, e := range journal(t, logDir) {
		if e["event"] == "returned" {
			returned++
			if files, _ := e["returned"].([]any); len(files) == 0 {
				t.Errorf("a returned event names no file: %v", e)
			}
		}
	}
	if returned != 3 {
		t.Errorf("%d returned events; want 3", returned)
	}

	// The coordinator killed while the job runs: --resume re-adopts it
	// and fetches its results once it ends.
	slow := "[name=slow return=out/] mkdir -p out && for i in 1 2 3 4 5 6 7 8; do echo $i >> out/ticks; sleep 0.25; done\n"
	cmd := labCmd(t, l, "", "-i", inv, "-o", "logs2", "--sync", "proj")
	stdin, _ := startCmd(t, cmd)
	io.WriteString(stdin, slow)
	stdin.Close()
	// Killed once the job runs on its host (it has written a tick).
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ticks []string
		for _, h := range l.Hosts {
			more, _ := filepath.Glob(filepath.Join(h.Home, ".gpudispatch", "code", "work", "*", "*", "out", "ticks"))
			ticks = append(ticks, more...)
		}
		if len(ticks) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow job never ticked")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	r = labRun(t, l, slow, "-i", inv, "-o", "logs2", "--sync", "proj", "--resume")
	if r.code != 0 {
		t.Fatalf("resumed run: exit %d\n%s", r.code, r.stderr)
	}
	if got := readFile(t, filepath.Join(l.Dir, "logs2", "slow", "out", "ticks")); got != "1\n2\n3\n4\n5\n6\n7\n8\n" {
		t.Errorf("the re-adopted job's results: %q", got)
	}
}

// On this machine a job with no workdir starts where gpudispatch was
// started, not in the home directory, and its returns come from there.
func TestE2EReturnLocal(t *testing.T) {
	t.Parallel()
	dir, home := t.TempDir(), t.TempDir()
	cmd := exec.Command(binary, "--gpus", "0", "-o", "logs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+home, lockEnv(dir))
	cmd.Stdin = strings.NewReader("[name=here return=made/] mkdir -p made/sub && echo ok > made/sub/f\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := readFile(t, filepath.Join(dir, "logs", "here", "made", "sub", "f")); got != "ok\n" {
		t.Errorf("returned %q", got)
	}
}

// A snapshot is frozen for real, as a user tries it on real OpenSSH hosts:
// a job that appends to a shipped file changes it for no later run of
// another log dir, whose tree is clean and holds no earlier run's outputs
// (its return= brings only its own); --resume of the first log dir finds
// what its jobs wrote there (a checkpoint).
func TestSSHSnapshotFrozen(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 1})
	proj := filepath.Join(l.Dir, "proj")
	os.MkdirAll(proj, 0o755)
	os.WriteFile(filepath.Join(proj, "config.txt"), []byte("lr: 0.1\n"), 0o644)
	inv := envInventory(t, l, "lab.yaml", "")
	r := labRun(t, l, "[name=w return=out/] chmod u+w config.txt; echo CORRUPTED >> config.txt && mkdir -p out && echo A > out/a.txt && echo epoch3 > ckpt\n",
		"-i", inv, "-o", "A", "--sync", "proj")
	if r.code != 0 {
		t.Fatalf("the writing run: exit %d\n%s", r.code, r.stderr)
	}
	r = labRun(t, l, "[name=r return=out/] cat config.txt; ls; mkdir -p out && echo B > out/b.txt\n", "-i", inv, "-o", "B", "--sync", "proj")
	if r.code != 0 {
		t.Fatalf("the reading run: exit %d\n%s", r.code, r.stderr)
	}
	if got := readFile(t, filepath.Join(l.Dir, "B", "r.out")); got != "lr: 0.1\nconfig.txt\n" {
		t.Errorf("a run into a new log dir printed %q; want the shipped config.txt, and no earlier run's files", got)
	}
	if got, _ := filepath.Glob(filepath.Join(l.Dir, "B", "r", "out", "*")); len(got) != 1 || filepath.Base(got[0]) != "b.txt" {
		t.Errorf("the new log dir's return= brought %v; want its own b.txt alone", got)
	}
	r = labRun(t, l, "[name=w return=out/] chmod u+w config.txt; echo CORRUPTED >> config.txt && mkdir -p out && echo A > out/a.txt && echo epoch3 > ckpt\n[name=c] cat ckpt\n",
		"-i", inv, "-o", "A", "--sync", "proj", "--resume")
	if r.code != 0 {
		t.Fatalf("the resumed run: exit %d\n%s", r.code, r.stderr)
	}
	if got := readFile(t, filepath.Join(l.Dir, "A", "c.out")); got != "epoch3\n" {
		t.Errorf("--resume of the first log dir: cat ckpt printed %q; want its earlier job's checkpoint", got)
	}
}

// The cache where this machine keeps the snapshots' content is checked as
// the log dir is: one that every user may write is refused, named, before
// anything runs; made the user's own, the same run works.
func TestE2ESnapshotCacheChecked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "proj"), 0o755)
	os.WriteFile(filepath.Join(dir, "proj", "a.txt"), []byte("mine\n"), 0o644)
	cache := filepath.Join(dir, ".cache")
	os.Mkdir(cache, 0o777)
	os.Chmod(cache, 0o777)
	r := gpd(t, dir, "cat a.txt\n", "--gpus", "0", "--sync", "proj", "-o", "logs")
	if r.code != 2 || !strings.Contains(r.stderr, "snapshot cache") || !strings.Contains(r.stderr, cache+", above the snapshot cache, may be written by every user") {
		t.Errorf("an other-writable cache: exit %d\n%s", r.code, r.stderr)
	}
	os.Chmod(cache, 0o700)
	r = gpd(t, dir, "cat a.txt\n", "--gpus", "0", "--sync", "proj", "-o", "logs2")
	if r.code != 0 || readFile(t, filepath.Join(dir, "logs2", "1.out")) != "mine\n" {
		t.Errorf("a cache of one's own: exit %d\n%s", r.code, r.stderr)
	}
}

// --return-limit: a job's files past the limit stay where it ran, named in
// what the run says and in the journal; those before it come home.
func TestE2EReturnLimit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	job := "[name=big return=a.bin,b.bin] head -c 700000 /dev/urandom > a.bin && head -c 700000 /dev/urandom > b.bin\n"
	r := gpd(t, dir, job, "--gpus", "0", "-o", "logs", "--return-limit", "1")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "logs", "big", "a.bin")); err != nil {
		t.Errorf("the file within the limit did not come: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "logs", "big", "b.bin")); err == nil {
		t.Errorf("the file past the limit came")
	}
	if !strings.Contains(r.stderr, "over --return-limit (1.0 MiB), left on ") || !strings.Contains(r.stderr, ": b.bin") {
		t.Errorf("the limit is not said:\n%s", r.stderr)
	}
}
