package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// rendezvousPy is a part of a job over several hosts that meets the others
// for real, as torchrun's store does: part 0 listens on MASTER_ADDR and
// MASTER_PORT, every other part connects and says its rank, part 0 answers
// with its own. Each prints when it started, what it heard, and what it
// was told of the job.
const rendezvousPy = `import os, socket, time
rank, n = int(os.environ["NODE_RANK"]), int(os.environ["NNODES"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
print("start", time.time(), flush=True)
if rank == 0:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(n)
    heard = []
    for _ in range(n - 1):
        c, _ = s.accept()
        heard.append(c.recv(16).decode())
        c.sendall(b"0")
        c.close()
    print("rank 0 heard", " ".join(sorted(heard)))
else:
    for _ in range(300):
        try:
            c = socket.create_connection((addr, port))
            break
        except OSError:
            time.sleep(0.1)
    c.sendall(str(rank).encode())
    print("rank", rank, "heard", c.recv(16).decode())
print("job", os.environ["WORLD_SIZE"], os.environ["GPUDISPATCH_NODES"], os.environ["GPUDISPATCH_HOST"], os.environ["CUDA_VISIBLE_DEVICES"])
`

// needPython skips t where python3 is missing, unless CI says it is not.
func needPython(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		sshtest.Missing(t, "GPUDISPATCH_REQUIRE_PYTHON", "no python3 here (apt-get install python3)")
	}
}

// startedAt reads the "start T" line a part printed first.
func startedAt(t *testing.T, log string) float64 {
	t.Helper()
	first, _, _ := strings.Cut(readFile(t, log), "\n")
	f := strings.Fields(first)
	if len(f) != 2 || f[0] != "start" {
		t.Fatalf("%s starts with %q", log, first)
	}
	v, _ := strconv.ParseFloat(f[1], 64)
	return v
}

// A job of two parts × two GPUs over the real-sshd lab: its parts meet
// for real on part 0's MASTER_PORT, start within a second of each other,
// are told the job's shape, and write to the job's logs (part 1 to its
// rank1 logs); the job is recorded once, with both parts.
func TestSSHJobOverTwoHosts(t *testing.T) {
	t.Parallel()
	needPython(t)
	l := sshtest.Start(t, sshtest.Options{Hosts: 3, GPUs: 2})
	py := filepath.Join(l.Dir, "rendezvous.py")
	os.WriteFile(py, []byte(rendezvousPy), 0o644)
	logDir := filepath.Join(l.Dir, "logs")
	logJournalOnFailure(t, logDir)
	r := labRun(t, l, "[nodes=2 gpus=2] python3 "+py+"\n", "-i", l.Inventory(""), "-o", "logs")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	out0, out1 := readFile(t, filepath.Join(logDir, "1.out")), readFile(t, filepath.Join(logDir, "1.rank1.out"))
	if !strings.Contains(out0, "rank 0 heard 1\n") || !strings.Contains(out1, "rank 1 heard 0\n") {
		t.Errorf("the parts did not meet:\n1.out: %s\n1.rank1.out: %s", out0, out1)
	}
	var hosts []string
	for _, out := range []string{out0, out1} {
		i := strings.Index(out, "job ")
		if i < 0 {
			t.Fatalf("no job line in %q", out)
		}
		f := strings.Fields(out[i:])
		if len(f) != 5 || f[1] != "4" || f[4] != "0,1" {
			t.Errorf("a part was told %q, want WORLD_SIZE 4 and GPUs 0,1", out[i:])
		}
		hosts = append(hosts, f[3])
		if len(f) == 5 && f[2] != strings.Join(hosts[:1], "")+","+strings.TrimPrefix(f[2], hosts[0]+",") {
			t.Errorf("GPUDISPATCH_NODES %s does not start with part 0's host %s", f[2], hosts[0])
		}
	}
	if hosts[0] == hosts[1] {
		t.Errorf("both parts ran on %s", hosts[0])
	}
	spread := math.Abs(startedAt(t, filepath.Join(logDir, "1.out")) - startedAt(t, filepath.Join(logDir, "1.rank1.out")))
	t.Logf("the parts started %.0f ms apart", spread*1000)
	if spread > 1 {
		t.Errorf("the parts started %.2f s apart, want within 1 s", spread)
	}
	ends := 0
	for _, e := range journal(t, logDir) {
		switch e["event"] {
		case "finished":
			ends++
			parts, _ := e["parts"].([]any)
			if len(parts) != 1 || e["host"] != hosts[0] {
				t.Errorf("finished event %v: want part 0's host and one other part", e)
			}
		case "failed", "lost", "cancelled":
			t.Errorf("event %v", e)
		}
	}
	if ends != 1 {
		t.Errorf("%d finished events, want 1", ends)
	}
	// status names both places.
	st := labRun(t, l, "", "status", "-o", "logs")
	if !regexpMatch(`node\d:0,1\+node\d:0,1`, st.stdout) {
		t.Errorf("status does not say where both parts ran:\n%s", st.stdout)
	}
}

// A job over two hosts whose parts need more GPUs together than its run's
// share has its turn on both: the run that holds both hosts, with a queue
// of jobs for seconds more, takes no new job on the GPUs it frees there,
// the first host drained keeps its GPUs for the job (parked) until the
// other is, and the job starts long before that queue is done (before,
// after it). No GPU ever runs two jobs.
func TestSSHJobOverTwoHostsHasItsTurn(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 2})
	inv := l.Inventory("")
	cmd, errOut := startA(t, l, inv, 32, "0.6", 4)
	gang := `[nodes=2 gpus=2] for g in 0 1; do mkdir $HOME/on-gpu.$g || echo "$GPUDISPATCH_JOB_ID $g" >> $HOME/collisions; done; sleep 0.3; rmdir $HOME/on-gpu.0 $HOME/on-gpu.1; echo "$GPUDISPATCH_JOB_ID part" >> $HOME/done` + "\n"
	logJournalOnFailure(t, filepath.Join(l.Dir, "logsB"))
	second := labRun(t, l, gang, "-i", inv, "-o", "logsB", "--busy-recheck", "200ms")
	if err := waitExit(t, cmd, errOut, time.Minute); err != nil || second.code != 0 {
		t.Fatalf("runs: %v; exit %d\n%s", err, second.code, second.stderr)
	}
	n := 0
	for _, lines := range noCollisions(t, l) {
		n += len(lines)
	}
	if n != 34 {
		t.Errorf("%d jobs and parts done, want 34", n)
	}
	asked, gangStart, lastA := turnTimes(t, l)
	// The holders look once a second and A's jobs take 0.6 s: the job
	// starts within a few seconds, where A's queue lasts about four more.
	t.Logf("B's job over two hosts started %v after B asked; A's last job %v after", gangStart.Sub(asked), lastA.Sub(asked))
	if !gangStart.Before(lastA) {
		t.Errorf("B's job over two hosts started %v after B asked, after A's last job (%v): it waited for A's queue to be done", gangStart.Sub(asked), lastA.Sub(asked))
	}
}

// One part that fails ends the other at once (TERM, which it hears), well
// within the grace period; the job is recorded once, failed with that
// part's exit status and naming it.
func TestSSHPartFailingEndsTheOthers(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	logDir := filepath.Join(l.Dir, "logs")
	logJournalOnFailure(t, logDir)
	job := `[nodes=2] if [ "$NODE_RANK" = 1 ]; then sleep 1; date +%s.%N; exit 7; fi; trap 'date +%s.%N; echo got TERM; exit 143' TERM; sleep 120 & wait` + "\n"
	begin := time.Now()
	r := labRun(t, l, job, "-i", l.Inventory(""), "-o", "logs")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s", r.code, r.stderr)
	}
	if took := time.Since(begin); took > 30*time.Second {
		t.Errorf("the run took %s", took)
	}
	out0, out1 := readFile(t, filepath.Join(logDir, "1.out")), readFile(t, filepath.Join(logDir, "1.rank1.out"))
	if !strings.Contains(out0, "got TERM") {
		t.Fatalf("part 0 was not told to stop: %q", out0)
	}
	at0, _ := strconv.ParseFloat(strings.Fields(out0)[0], 64)
	at1, _ := strconv.ParseFloat(strings.TrimSpace(out1), 64)
	t.Logf("part 0 heard TERM %.0f ms after part 1 exited", (at0-at1)*1000)
	if at0-at1 > 5 {
		t.Errorf("part 0 heard TERM %.1f s after part 1 exited", at0-at1)
	}
	var ends []map[string]any
	for _, e := range journal(t, logDir) {
		if e["event"] == "failed" || e["event"] == "finished" || e["event"] == "cancelled" {
			ends = append(ends, e)
		}
	}
	if len(ends) != 1 || ends[0]["event"] != "failed" || ends[0]["exit"] != 7.0 || ends[0]["failed_part"] != 1.0 || !strings.Contains(fmt.Sprint(ends[0]["error"]), "part 1 on node") {
		t.Errorf("ends recorded: %v", ends)
	}
}

// A job over several hosts cancelled in a standing queue leaves no
// process on any of its hosts.
func TestSSHJobOverTwoHostsCancelled(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	serve := labCmd(t, l, "", "serve", "-i", l.Inventory(""), "-o", "logs")
	_, errOut := startCmd(t, serve)
	waitServing(t, l.Dir, errOut)
	pids := filepath.Join(l.Dir, "pids")
	if r := labRun(t, l, fmt.Sprintf("[nodes=2] sleep 300 & echo $! >> %s; echo $$ >> %s; wait\n", pids, pids), "submit", "-o", "logs"); r.code != 0 {
		t.Fatalf("submit: %d %s", r.code, r.stderr)
	}
	pidList := waitPids(t, pids, 4)
	if r := labRun(t, l, "", "cancel", "-o", "logs", "1"); r.code != 0 {
		t.Errorf("cancel: %d %s", r.code, r.stderr)
	}
	sshtest.WaitGone(t, pidList, 15*time.Second)
	if r := labRun(t, l, "", "stop", "-o", "logs"); r.code != 0 {
		t.Errorf("stop: %d %s", r.code, r.stderr)
	}
	serve.Wait()
	cancelled := 0
	for _, e := range journal(t, filepath.Join(l.Dir, "logs")) {
		if e["event"] == "cancelled" {
			cancelled++
		}
	}
	if cancelled != 1 {
		t.Errorf("%d cancelled events, want 1", cancelled)
	}
}

// A job over several hosts outlives its coordinator as a one-host job
// does: SIGKILLed, its parts run on; --resume re-adopts both, completes
// both logs from where they were, and records the job's one outcome.
func TestSSHJobOverTwoHostsReadopted(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	logDir := filepath.Join(l.Dir, "logs")
	logJournalOnFailure(t, logDir)
	effects := filepath.Join(l.Dir, "effects")
	job := "[nodes=2] echo $NODE_RANK >> " + effects + "; for i in $(seq 1 30); do echo tick $i; sleep 0.1; done\n"
	cmd := labCmd(t, l, "", "-i", l.Inventory(""), "-o", "logs")
	stdin, _ := startCmd(t, cmd)
	stdin.Write([]byte(job))
	stdin.Close()
	for _, log := range []string{"1.out", "1.rank1.out"} {
		waitForFile(t, filepath.Join(logDir, log), func(s string) bool { return strings.Contains(s, "tick 3\n") })
	}
	cmd.Process.Kill()
	cmd.Wait()
	r := labRun(t, l, job, "-i", l.Inventory(""), "-o", "logs", "--resume")
	if r.code != 0 {
		t.Fatalf("resumed run: exit %d, want 0\n%s", r.code, r.stderr)
	}
	if got := readFile(t, effects); strings.Count(got, "0\n") != 1 || strings.Count(got, "1\n") != 1 {
		t.Errorf("the parts ran %q; want each once", got)
	}
	for _, log := range []string{"1.out", "1.rank1.out"} {
		if got := readFile(t, filepath.Join(logDir, log)); got != ticks(30) {
			t.Errorf("%s is %q; want every tick once, in order", log, got)
		}
	}
	var ends []map[string]any
	readopted := false
	for _, e := range journal(t, logDir) {
		switch e["event"] {
		case "failed", "finished", "lost", "cancelled":
			ends = append(ends, e)
		case "started":
			if parts, _ := e["parts"].([]any); strings.HasPrefix(fmt.Sprint(e["message"]), "re-adopted") && len(parts) == 1 {
				readopted = true
			}
		}
	}
	// Both parts succeed here. Were one to fail as the other ends, the
	// other could be stopped before its last line: under load the parts
	// run apart by a tenth of a second or more by the end (a part that
	// wrote its ticks to a file of its own too had not written the last
	// one when it was stopped), which is the run's rule, not a lost line.
	if len(ends) != 1 || ends[0]["event"] != "finished" {
		t.Errorf("outcomes %v; want one, finished", ends)
	}
	if !readopted {
		t.Error("no started event says both parts were re-adopted")
	}
}

// Two jobs over several hosts and a stream of one-GPU jobs on three
// hosts: no deadlock, nothing starves, no GPU runs two jobs at once.
func TestSSHJobsOverHostsAmongSmallOnes(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 3, GPUs: 2})
	small := fmt.Sprintf(exclusiveJob, "0.2")
	// A part takes every GPU of its host: each GPU's directory is its own.
	big := `[nodes=2 gpus=2] for g in 0 1; do mkdir $HOME/on-gpu.$g || echo "$GPUDISPATCH_JOB_ID $g" >> $HOME/collisions; done; sleep 0.5; rmdir $HOME/on-gpu.0 $HOME/on-gpu.1; echo "$GPUDISPATCH_JOB_ID big" >> $HOME/done`
	input := strings.Repeat(small+"\n", 8) + big + "\n" + strings.Repeat(small+"\n", 8) + big + "\n" + strings.Repeat(small+"\n", 8)
	r := labRun(t, l, input, "-i", l.Inventory(""), "-o", "logs")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	done := noCollisions(t, l)
	n, bigs := 0, 0
	for _, lines := range done {
		n += len(lines)
		for _, line := range lines {
			if strings.HasSuffix(line, " big") {
				bigs++
			}
		}
	}
	if n != 24+4 || bigs != 4 {
		t.Errorf("%d lines done (%d of the big jobs' parts), want 24 small jobs and 4 parts: %v", n, bigs, done)
	}
}

// Two runs started together, each with a job over both hosts of the lab
// among one-GPU jobs: neither deadlocks (a part's GPU found locked lets
// go of the others), both end, and no GPU ever runs two jobs.
func TestSSHTwoRunsJobsOverHosts(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 2})
	small := fmt.Sprintf(exclusiveJob, "0.2")
	big := `[nodes=2 gpus=2] for g in 0 1; do mkdir $HOME/on-gpu.$g || echo "$GPUDISPATCH_JOB_ID $g" >> $HOME/collisions; done; sleep 0.5; rmdir $HOME/on-gpu.0 $HOME/on-gpu.1; echo "$GPUDISPATCH_JOB_ID big" >> $HOME/done`
	input := strings.Repeat(small+"\n", 4) + big + "\n" + strings.Repeat(small+"\n", 4)
	results := make([]result, 2)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			results[i] = labRun(t, l, input, "-i", l.Inventory(""), "-o", fmt.Sprintf("logs%d", i), "--busy-recheck", "200ms")
		})
	}
	wg.Wait()
	for i, r := range results {
		if r.code != 0 {
			t.Errorf("run %d: exit %d\n%s", i, r.code, r.stderr)
		}
	}
	done := noCollisions(t, l)
	if n := len(done["node1"]) + len(done["node2"]); n != 2*(8+2) {
		t.Errorf("%d lines done, want 8 one-GPU jobs and 2 parts for each run: %v", n, done)
	}
}
