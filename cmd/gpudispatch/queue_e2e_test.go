package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// startServe starts "gpudispatch serve" in dir with args and returns once
// its control socket answers.
func startServe(t *testing.T, dir string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd, _, errOut := startGPD(t, dir, append([]string{"serve", "-o", "logs", "--busy-recheck", "300ms"}, args...)...)
	waitServing(t, dir, errOut)
	return cmd, errOut
}

// waitServing waits until status in dir is answered by a live server.
func waitServing(t *testing.T, dir string, errOut *bytes.Buffer) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(filepath.Join(dir, "logs", "gpudispatch.sock")); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("serve never made its socket:\n%s", errOut)
}

// finishedOnce checks that every id has exactly one finished event in the
// journal of logDir.
func finishedOnce(t *testing.T, events []map[string]any, ids []string) {
	t.Helper()
	n := map[string]int{}
	for _, e := range events {
		if e["event"] == "finished" {
			n[e["job"].(string)]++
		}
	}
	for _, id := range ids {
		if n[id] != 1 {
			t.Errorf("job %s finished %d times in the journal, want once", id, n[id])
		}
	}
}

// A hundred clients submit ten jobs each at once: the thousand jobs are
// queued exactly once each, numbered without a gap, and all run.
func TestE2ESubmitConcurrent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	serve, errOut := startServe(t, dir, "--gpus", "0,1,2,3", "-q")
	effects := filepath.Join(dir, "effects")
	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	for c := range 100 {
		wg.Go(func() {
			var b strings.Builder
			for l := range 10 {
				fmt.Fprintf(&b, "echo c%d-l%d >> %s\n", c, l, effects)
			}
			r := gpd(t, dir, b.String(), "submit", "-o", "logs")
			if r.code != 0 {
				t.Errorf("submit %d: exit %d: %s", c, r.code, r.stderr)
			}
			mu.Lock()
			ids = append(ids, strings.Fields(r.stdout)...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(ids) != 1000 {
		t.Fatalf("%d ids given, want 1000", len(ids))
	}
	slices.SortFunc(ids, func(a, b string) int { x, _ := strconv.Atoi(a); y, _ := strconv.Atoi(b); return x - y })
	for i, id := range ids {
		if id != strconv.Itoa(i+1) {
			t.Fatalf("ids are not 1..1000: %s at %d", id, i)
		}
	}
	// Every job was queued once, in the journal, when submit returned.
	events := journal(t, filepath.Join(dir, "logs"))
	if n := count(events, "queued"); n != 1000 {
		t.Fatalf("%d queued events, want 1000", n)
	}
	if r := gpd(t, dir, "", "submit", "-o", "logs", "--wait", "--", "true"); r.code != 0 {
		t.Fatalf("submit --wait: %d %s", r.code, r.stderr)
	}
	events = waitJournal(t, filepath.Join(dir, "logs"), func(ev []map[string]any) bool { return count(ev, "finished") == 1001 })
	finishedOnce(t, events, ids)
	lines := strings.Fields(readFile(t, effects))
	slices.Sort(lines)
	if len(lines) != 1000 || len(slices.Compact(lines)) != 1000 {
		t.Errorf("%d effects, want 1000 distinct", len(lines))
	}
	if r := gpd(t, dir, "", "stop", "-o", "logs"); r.code != 0 || !strings.Contains(r.stderr, "stopping: no new job starts, the running jobs finish") {
		t.Fatalf("stop: %d %s", r.code, r.stderr)
	}
	if err := serve.Wait(); statusOf(err) != 130 {
		t.Errorf("serve after stop: %v, want exit 130\n%s", err, errOut)
	}
	if _, err := os.Lstat(filepath.Join(dir, "logs", "gpudispatch.sock")); !os.IsNotExist(err) {
		t.Errorf("the socket outlived the server: %v", err)
	}
}

// Steering a server from other processes: priorities overtake a long
// queue, cancel of a waiting and of a running job (whose processes go),
// retry, status with reasons, --wait's exit statuses, one server per log
// dir, and the socket's mode.
func TestE2EServeSteer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	serve, errOut := startServe(t, dir, "--gpus", "0")
	logs := filepath.Join(dir, "logs")
	st, err := os.Stat(filepath.Join(logs, "gpudispatch.sock"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, %v", st.Mode(), err)
	}
	if r := gpd(t, dir, "", "serve", "-o", "logs", "--gpus", "0"); r.code != 2 || !strings.Contains(r.stderr, "is in use by another gpudispatch") {
		t.Errorf("a second serve: exit %d: %s", r.code, r.stderr)
	}
	// The one slot is held by a job that records its pids, one of them
	// ignoring TERM; eight jobs wait behind it.
	pids := filepath.Join(dir, "pids")
	hold := fmt.Sprintf("[name=hold] trap '' TERM; sleep 300 & echo $! >> %s; echo $$ >> %s; wait", pids, pids)
	r := gpd(t, dir, hold+"\n"+strings.Repeat("sleep 0.05\n", 8), "submit", "-o", "logs")
	if r.code != 0 || len(strings.Fields(r.stdout)) != 9 {
		t.Fatalf("submit: %d %q %s", r.code, r.stdout, r.stderr)
	}
	waitForFile(t, pids, func(s string) bool { return len(strings.Fields(s)) == 2 })
	r = gpd(t, dir, "", "submit", "-o", "logs", "--priority", "5", "--name", "urgent", "--", "echo", "it's $urgent")
	if r.code != 0 || r.stdout != "urgent\n" {
		t.Fatalf("submit urgent: %d %q %s", r.code, r.stdout, r.stderr)
	}
	r = gpd(t, dir, "", "status", "-o", "logs")
	if !regexpMatch(`urgent +waiting .*first in line`, r.stdout) || !regexpMatch(`\n3 +waiting .*waits for a free slot; 2 jobs ahead of it`, r.stdout) {
		t.Errorf("status:\n%s", r.stdout)
	}
	if r := gpd(t, dir, "", "priority", "-o", "logs", "9", "7"); r.code != 0 {
		t.Errorf("priority: %d %s", r.code, r.stderr)
	}
	if r := gpd(t, dir, "", "cancel", "-o", "logs", "2", "nope"); r.code != 1 || r.stdout != "2: cancelled (it was waiting)\n" || !strings.Contains(r.stderr, `no job "nope"`) {
		t.Errorf("cancel of a waiting job and of an unknown one: %d %q %q", r.code, r.stdout, r.stderr)
	}
	var pidList []int
	for _, f := range strings.Fields(readFile(t, pids)) {
		p, _ := strconv.Atoi(f)
		pidList = append(pidList, p)
	}
	if r := gpd(t, dir, "", "cancel", "-o", "logs", "hold"); r.code != 0 {
		t.Errorf("cancel of the running job: %d %s", r.code, r.stderr)
	}
	sshtest.WaitGone(t, pidList, 15*time.Second)
	// Then: 9 (priority 7), urgent (5), the rest in order.
	r = gpd(t, dir, "", "submit", "-o", "logs", "--wait", "--", "exit 3")
	if r.code != 1 || strings.TrimSpace(r.stdout) != "11" || !strings.Contains(r.stderr, "job 11 failed") {
		t.Errorf("submit --wait of a failing job: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if got := readFile(t, filepath.Join(logs, "urgent.out")); got != "it's $urgent\n" {
		t.Errorf("urgent printed %q", got)
	}
	events := journal(t, logs)
	var order []string
	for _, e := range events {
		if e["event"] == "started" {
			order = append(order, e["job"].(string))
		}
	}
	if want := []string{"hold", "9", "urgent", "3", "4", "5", "6", "7", "8", "11"}; !slices.Equal(order, want) {
		t.Errorf("start order %q, want %q", order, want)
	}
	if r := gpd(t, dir, "", "retry", "-o", "logs", "hold", "2", "3"); r.code != 1 || !strings.Contains(r.stderr, "retry 3: job 3 succeeded") {
		t.Errorf("retry: %d %q %q", r.code, r.stdout, r.stderr)
	}
	// hold runs again (and holds the slot until stop --now); 2 waits.
	waitJournal(t, logs, func(ev []map[string]any) bool {
		n := 0
		for _, e := range ev {
			if e["event"] == "started" && e["job"] == "hold" {
				n++
			}
		}
		return n == 2
	})
	if r := gpd(t, dir, "", "stop", "-o", "logs", "--now"); r.code != 0 || !strings.Contains(r.stderr, "stopping now: no new job starts, and the running jobs are being killed") {
		t.Fatalf("stop --now: %d %s", r.code, r.stderr)
	}
	if err := serve.Wait(); statusOf(err) != 130 {
		t.Errorf("serve after stop --now: %v\n%s", err, errOut)
	}
	// No server now: clients say how to start one; status reads the journal.
	if r := gpd(t, dir, "", "submit", "-o", "logs", "--", "true"); r.code != 2 || !strings.Contains(r.stderr, "start one with gpudispatch serve -o logs") {
		t.Errorf("submit without a server: %d %s", r.code, r.stderr)
	}
	if r := gpd(t, dir, "", "status", "-o", "logs"); r.code != 1 || !regexpMatch(`hold +cancelled`, r.stdout) {
		t.Errorf("status from the journal: %d\n%s", r.code, r.stdout)
	}
}

// A server killed outright loses no job it acknowledged: serve --resume
// queues again what waited and re-adopts what ran (it ran on), and every
// job succeeds once by the journal's account, its effect once.
func TestE2EServeKilledResume(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	logJournalOnFailure(t, logs)
	serve, _ := startServe(t, dir, "--gpus", "0,1", "--keepalive", "300ms")
	effects := filepath.Join(dir, "effects")
	var b strings.Builder
	for i := range 30 {
		fmt.Fprintf(&b, "[priority=%d] sleep 0.1; echo j%d >> %s\n", i%3, i, effects)
	}
	r := gpd(t, dir, b.String(), "submit", "-o", "logs")
	ids := strings.Fields(r.stdout)
	if r.code != 0 || len(ids) != 30 {
		t.Fatalf("submit: %d %s", r.code, r.stderr)
	}
	waitJournal(t, logs, func(ev []map[string]any) bool { return count(ev, "finished") >= 6 })
	serve.Process.Kill()
	serve.Wait()
	// The killed server's socket is stale: the new one replaces it.
	serve, errOut := startServe(t, dir, "--gpus", "0,1", "--resume")
	events := waitJournal(t, logs, func(ev []map[string]any) bool { return count(ev, "finished") >= 30 })
	finishedOnce(t, events, ids)
	seen := map[string]int{}
	for _, l := range strings.Fields(readFile(t, effects)) {
		seen[l]++
	}
	for i := range 30 {
		if n := seen["j"+strconv.Itoa(i)]; n != 1 {
			t.Errorf("job %s's effect happened %d times", ids[i], n)
		}
	}
	serve.Process.Signal(syscall.SIGTERM)
	if err := serve.Wait(); statusOf(err) != 130 {
		t.Errorf("serve after SIGTERM: %v\n%s", err, errOut)
	}
}

// stop --detach ends a server at once and leaves its running job running
// (an upgrade of gpudispatch): serve --resume re-adopts it, and it ends once,
// with its whole log and its own exit status.
func TestE2EServeDetachThenResume(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	logJournalOnFailure(t, logs)
	serve, errOut := startServe(t, dir, "--gpus", "0")
	effects := filepath.Join(dir, "effects")
	job := "echo ran >> " + effects + "; for i in $(seq 1 30); do echo tick $i; sleep 0.1; done; exit 4\n"
	if r := gpd(t, dir, job, "submit", "-o", "logs"); r.code != 0 {
		t.Fatalf("submit: %d %s", r.code, r.stderr)
	}
	waitForFile(t, filepath.Join(logs, "1.out"), func(s string) bool { return strings.Contains(s, "tick 2\n") })
	if r := gpd(t, dir, "", "stop", "-o", "logs", "--detach"); r.code != 0 {
		t.Fatalf("stop --detach: %d %s", r.code, r.stderr)
	}
	if err := waitExit(t, serve, errOut, 10*time.Second); statusOf(err) == -1 {
		t.Fatalf("serve after stop --detach: %v\n%s", err, errOut)
	}
	if r := gpd(t, dir, "", "stop", "-o", "logs", "--detach", "--now"); r.code != 2 {
		t.Errorf("stop --detach --now: %d, want a usage error", r.code)
	}
	serve, errOut = startServe(t, dir, "--gpus", "0", "--resume")
	events := waitJournal(t, logs, func(ev []map[string]any) bool { return count(ev, "failed") >= 1 })
	if got := readFile(t, filepath.Join(logs, "1.out")); got != ticks(30) {
		t.Errorf("1.out is %q; want every tick once", got)
	}
	if got := readFile(t, effects); got != "ran\n" {
		t.Errorf("the job ran %q times; want once", got)
	}
	for _, e := range events {
		if e["event"] == "failed" && e["exit"] != 4.0 {
			t.Errorf("outcome %v, want the job's own exit 4", e)
		}
	}
	serve.Process.Signal(syscall.SIGTERM)
	serve.Wait()
}

// A server over the real-sshd lab: jobs submitted from another process run
// on the remote GPUs, and a cancelled remote job leaves no process.
func TestE2EServeSSH(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 2})
	serve := labCmd(t, l, "", "serve", "-i", l.Inventory(""), "-o", "logs")
	_, errOut := startCmd(t, serve)
	waitServing(t, l.Dir, errOut)
	submit := func(stdin string, args ...string) result {
		return labRun(t, l, stdin, append([]string{"submit", "-o", "logs"}, args...)...)
	}
	pids := filepath.Join(l.Dir, "pids")
	r := submit(fmt.Sprintf("@node1:0 sleep 300 & echo $! >> %s; echo $$ >> %s; wait\n", pids, pids))
	if r.code != 0 {
		t.Fatalf("submit: %d %s", r.code, r.stderr)
	}
	pidList := waitPids(t, pids, 2)
	r = submit("", "--wait", "--gpus", "2", "--host", "node2", "--", `echo "$GPUDISPATCH_HOST $CUDA_VISIBLE_DEVICES"`)
	if r.code != 0 {
		t.Fatalf("submit --wait: %d %s\n%s", r.code, r.stderr, errOut)
	}
	id := strings.TrimSpace(r.stdout)
	if got := readFile(t, filepath.Join(l.Dir, "logs", id+".out")); got != "node2 0,1\n" {
		t.Errorf("job %s printed %q", id, got)
	}
	if r := labRun(t, l, "", "cancel", "-o", "logs", "1"); r.code != 0 {
		t.Errorf("cancel: %d %s", r.code, r.stderr)
	}
	sshtest.WaitGone(t, pidList, 15*time.Second)
	if r := labRun(t, l, "", "stop", "-o", "logs"); r.code != 0 {
		t.Errorf("stop: %d %s", r.code, r.stderr)
	}
	if err := serve.Wait(); statusOf(err) != 130 {
		t.Errorf("serve: %v\n%s", err, errOut)
	}
}

// submit --sync takes its own snapshot: a standing queue runs each
// submit's jobs in the code as it was when it was submitted, also after
// the server was killed and resumed; edits between submits reach only
// the later one.
func TestE2ESubmitSync(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	logJournalOnFailure(t, logs)
	proj := filepath.Join(dir, "proj")
	os.MkdirAll(proj, 0o755)
	os.WriteFile(filepath.Join(proj, "conf.txt"), []byte("v1\n"), 0o644)
	// The server and the submits share the user's cache, as one user's do.
	env := append(os.Environ(), "HOME="+dir, "XDG_CACHE_HOME="+filepath.Join(dir, ".cache"))
	serve, _, errOut := startGPDEnv(t, dir, env, "serve", "-o", "logs", "--gpus", "0", "--keepalive", "300ms")
	waitServing(t, dir, errOut)
	first := gpd(t, dir, "[name=a] echo start; sleep 1.5; cat conf.txt\n[name=b] cat conf.txt\n", "submit", "-o", "logs", "--sync", "proj")
	if first.code != 0 || !strings.Contains(first.stderr, "gpudispatch: snapshot ") {
		t.Fatalf("submit --sync: exit %d\n%s", first.code, first.stderr)
	}
	waitForFile(t, filepath.Join(logs, "a.out"), func(s string) bool { return s == "start\n" })
	serve.Process.Kill()
	serve.Wait()
	os.WriteFile(filepath.Join(proj, "conf.txt"), []byte("v2\n"), 0o644)
	serve, _, _ = startGPDEnv(t, dir, env, "serve", "-o", "logs", "--gpus", "0", "--resume", "--keepalive", "300ms")
	// The killed server's socket is there until the new one replaces it.
	waitJournal(t, logs, func(ev []map[string]any) bool { return count(ev, "run") >= 2 })
	if r := gpd(t, dir, "", "submit", "-o", "logs", "--sync", "proj", "--", "cat conf.txt"); r.code != 0 {
		t.Fatalf("second submit: exit %d\n%s", r.code, r.stderr)
	}
	events := waitJournal(t, logs, func(ev []map[string]any) bool { return count(ev, "finished") >= 3 })
	for id, want := range map[string]string{"a": "start\nv1\n", "b": "v1\n", "3": "v2\n"} {
		if got := readFile(t, filepath.Join(logs, id+".out")); got != want {
			t.Errorf("job %s printed %q; want %q", id, got, want)
		}
	}
	snaps := map[string]string{}
	for _, e := range events {
		if e["event"] == "started" {
			snaps[e["job"].(string)], _ = e["snapshot"].(string)
		}
	}
	if snaps["a"] == "" || snaps["a"] != snaps["b"] || snaps["3"] == snaps["a"] || snaps["3"] == "" {
		t.Errorf("the jobs' snapshots: %v; want a and b's the same, 3's another", snaps)
	}
	serve.Process.Signal(syscall.SIGTERM)
	serve.Wait()
}
