package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// Fault-injection tests on the real-sshd lab. Every job appends
// its number to one effects file as its last act, so counting the numbers
// there tells which jobs ran to the end, and how many times.

// effectJobs returns job lines first..last, each sleeping nap seconds and
// then appending its number to path; prefix goes before each line (a pin).
func effectJobs(first, last int, prefix, nap, path string) string {
	var b strings.Builder
	for i := first; i <= last; i++ {
		fmt.Fprintf(&b, "%ssleep %s; echo %d $GPUDISPATCH_HOST $(date +%%T.%%N) >> %s\n", prefix, nap, i, path)
	}
	return b.String()
}

// checkEffects fails t unless jobs 1..n each left their effect exactly once,
// fails it if a process of the run is left, and logs the counts for the
// fault table (go test -v -run 'SSH|E2E' | grep 'fault row').
func checkEffects(t *testing.T, path string, n int) {
	t.Helper()
	seen := map[int]int{}
	lines := map[int][]string{} // "N host time" per job, to say where and when
	b, _ := os.ReadFile(path)
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		i, _ := strconv.Atoi(f[0])
		seen[i]++
		lines[i] = append(lines[i], line)
	}
	once, twice, missing := 0, 0, 0
	for i := 1; i <= n; i++ {
		switch seen[i] {
		case 0:
			missing++
		case 1:
			once++
		default:
			twice++
		}
		if seen[i] != 1 {
			t.Errorf("job %d ran to the end %d times, want exactly once: %q", i, seen[i], lines[i])
		}
	}
	if len(seen) != n {
		t.Errorf("%d distinct jobs left effects, want %d", len(seen), n)
	}
	orphans := leftovers(path)
	if len(orphans) > 0 {
		t.Errorf("processes of the run left: %v", orphans)
	}
	t.Logf("fault row: %s | submitted %d | succeeded once %d | ran twice %d | missing %d | orphans %d",
		t.Name(), n, once, twice, missing, len(orphans))
}

// running lists the jobs started on host and not ended yet, per the journal.
func running(events []map[string]any, host string) []string {
	on := map[string]bool{}
	var order []string
	for _, e := range events {
		job, _ := e["job"].(string)
		switch {
		case e["event"] == "started" && e["host"] == host:
			on[job] = true
			order = append(order, job)
		case e["event"] != "started" && e["event"] != "queued":
			delete(on, job)
		}
	}
	var out []string
	for _, j := range order {
		if on[j] {
			out = append(out, j)
			delete(on, j)
		}
	}
	return out
}

// hostTimeline checks that no job started on host between its host_down and
// the host_up that follows, and returns how many times it went down.
func hostTimeline(t *testing.T, events []map[string]any, host string) (downs int) {
	t.Helper()
	down := false
	for _, e := range events {
		if e["host"] != host {
			continue
		}
		switch e["event"] {
		case "host_down":
			down = true
			downs++
		case "host_up":
			down = false
		case "started":
			if down {
				t.Errorf("job %v started on %s while it was down", e["job"], host)
			}
		}
	}
	return downs
}

// leftovers lists processes whose command line contains s.
func leftovers(s string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if strings.Contains(string(b), s) && sshtest.Running(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// A host killed mid-run (sshd and every process of its sessions, as a power
// cut): once it has been silent for --lost-after while the other hosts
// answer, its running jobs are lost and run again elsewhere; it gets no job
// while down, and once it is back the jobs pinned to it run there. Every
// job runs to the end exactly once.
func TestSSHHostKilledMidRun(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 3, GPUs: 2})
	effects := filepath.Join(l.Dir, "effects")
	logDir := filepath.Join(l.Dir, "logs")
	logJournalOnFailure(t, logDir)
	cmd := labCmd(t, l, "", "-i", l.Inventory(""), "-o", "logs", "--keepalive", "500ms", "--lost-after", "2s")
	stdin, errOut := startCmd(t, cmd)
	io.WriteString(stdin, effectJobs(1, 24, "", "1", effects))
	waitJournal(t, logDir, func(ev []map[string]any) bool { return len(running(ev, "node2")) == 2 })
	l.Hosts[1].Stop()
	// Back once the lost jobs have run elsewhere.
	waitJournal(t, logDir, func(ev []map[string]any) bool {
		lost := map[any]bool{}
		done := 0
		for _, e := range ev {
			switch {
			case e["event"] == "lost":
				lost[e["job"]] = true
			case e["event"] == "finished" && lost[e["job"]]:
				done++
			}
		}
		return len(lost) >= 2 && done == len(lost)
	})
	l.Hosts[1].Start()
	io.WriteString(stdin, effectJobs(25, 28, "@node2 ", "0.1", effects))
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit %v\n%s", err, errOut)
	}
	checkEffects(t, effects, 28)
	events := journal(t, logDir)
	if downs := hostTimeline(t, events, "node2"); downs < 1 || count(events, "host_up") < 1 {
		t.Errorf("node2 went down %d times and came back %d times; want both", downs, count(events, "host_up"))
	}
	lostJobs := map[string]bool{}
	for _, e := range events {
		job, _ := e["job"].(string)
		switch {
		case e["event"] == "lost":
			lostJobs[job] = true
		case e["event"] == "finished" && lostJobs[job] && e["host"] == "node2":
			t.Errorf("lost job %s ran again on the host that was lost", job)
		case e["event"] == "finished":
			if n, _ := strconv.Atoi(job); n > 24 && e["host"] != "node2" {
				t.Errorf("job %s pinned to node2 finished on %v", job, e["host"])
			}
		}
	}
	// Why a job was lost is in words, not x/crypto's.
	for _, e := range events {
		if why, _ := e["error"].(string); e["event"] == "lost" && (strings.Contains(why, "without exit status") || strings.Count(why, "node2:") > 1) {
			t.Errorf("lost job's reason in x/crypto's words: %q", why)
		}
	}
	if len(lostJobs) < 2 {
		t.Errorf("lost jobs %v, want node2's two", lostJobs)
	}
	t.Logf("fault row: lost events %d", count(events, "lost"))
	if !strings.Contains(errOut.String(), "host node2 down") || !strings.Contains(errOut.String(), "host node2 is back") {
		t.Errorf("stderr does not tell the host's story:\n%s", errOut)
	}
}

// A host that hangs mid-run (its sshd stops answering, connections stay
// open, its jobs run on): keepalives notice, and once it has been silent
// for --lost-after while the other host answers, its jobs are lost and run
// elsewhere. When it answers again the lost attempts, still running there,
// are stopped before they end, so no job runs twice; the host gets jobs
// again, and no process of the run is left anywhere.
func TestSSHHostHangsMidRun(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 2})
	effects := filepath.Join(l.Dir, "effects")
	logDir := filepath.Join(l.Dir, "logs")
	logJournalOnFailure(t, logDir)
	// The jobs' 8 s leave room for noticing the hang (3 × 500 ms), the
	// lost-after second and stopping the lost attempts once it answers.
	cmd := labCmd(t, l, "", "-i", l.Inventory(""), "-o", "logs", "--keepalive", "500ms", "--connect-timeout", "1s", "--lost-after", "1s")
	stdin, errOut := startCmd(t, cmd)
	io.WriteString(stdin, effectJobs(1, 6, "", "8", effects))
	waitJournal(t, logDir, func(ev []map[string]any) bool { return len(running(ev, "node2")) == 2 })
	l.Hosts[1].Freeze()
	thawed := false
	defer func() {
		if !thawed {
			l.Hosts[1].Thaw()
		}
	}()
	waitJournal(t, logDir, func(ev []map[string]any) bool { return count(ev, "lost") >= 2 })
	l.Hosts[1].Thaw()
	thawed = true
	io.WriteString(stdin, effectJobs(7, 8, "@node2 ", "0.1", effects))
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit %v\n%s", err, errOut)
	}
	checkEffects(t, effects, 8)
	events := journal(t, logDir)
	if hostTimeline(t, events, "node2") < 1 {
		t.Errorf("node2 never went down:\n%s", errOut)
	}
	t.Logf("fault row: lost events %d", count(events, "lost"))
}

// silentListener accepts TCP connections and never says a word, like a
// host whose kernel answers and whose sshd is wedged.
func silentListener(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// A host that accepts TCP but never speaks SSH does not hang the run: it is
// reported, the other hosts run the jobs, and a job pinned to it fails after
// --host-down-timeout with the reason.
func TestSSHSilentHost(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 2})
	inv := l.Inventory("")
	f, _ := os.OpenFile(inv, os.O_APPEND|os.O_WRONLY, 0)
	fmt.Fprintf(f, "  - name: silent\n    hostname: 127.0.0.1\n    port: %d\n    identity_file: %s\n    gpus: [0, 1]\n", silentListener(t), l.ClientKey)
	f.Close()
	effects := filepath.Join(l.Dir, "effects")
	start := time.Now()
	r := labRun(t, l, effectJobs(1, 4, "", "0.1", effects)+"@silent echo never\n",
		"-i", inv, "-o", "logs", "--connect-timeout", "500ms", "--host-down-timeout", "2s")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1 (the pinned job failed)\n%s", r.code, r.stderr)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the run took %v", d)
	}
	checkEffects(t, effects, 4)
	for _, want := range []string{"host silent down: root@127.0.0.1:", "no SSH greeting", "--host-down-timeout 2s", "silent down since"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
}

// fixedInventory writes an inventory for l with two GPUs per host given
// outright (not auto), so a host down at the start keeps its slots.
func fixedInventory(t *testing.T, l *sshtest.Lab) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "ssh_config: %s\nhosts:\n", l.SSHConfig)
	for _, h := range l.Hosts {
		fmt.Fprintf(&b, "  - name: %s\n    gpus: [0, 1]\n", h.Name)
	}
	path := filepath.Join(l.Dir, "fixed.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A host down at the start stays in the run: jobs pinned to it wait, and run
// there once it is up.
func TestSSHHostDownAtStartComesBack(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 2})
	inv := fixedInventory(t, l)
	l.Hosts[1].Stop()
	effects := filepath.Join(l.Dir, "effects")
	cmd := labCmd(t, l, "", "-i", inv, "-o", "logs")
	stdin, errOut := startCmd(t, cmd)
	io.WriteString(stdin, effectJobs(1, 2, "@node2 ", "0.1", effects)+effectJobs(3, 6, "", "0.1", effects))
	stdin.Close()
	waitForFile(t, effects, func(s string) bool { return strings.Count(s, "\n") == 4 })
	l.Hosts[1].Start()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit %v\n%s", err, errOut)
	}
	checkEffects(t, effects, 6)
	events := journal(t, filepath.Join(l.Dir, "logs"))
	for _, e := range events {
		if e["event"] == "finished" && (e["job"] == "1" || e["job"] == "2") && e["host"] != "node2" {
			t.Errorf("pinned job %v finished on %v", e["job"], e["host"])
		}
	}
	if !strings.Contains(errOut.String(), "node2") || !strings.Contains(errOut.String(), "retrying") {
		t.Errorf("no warning about node2:\n%s", errOut)
	}
}

// A host that refuses our key is left out with the reason; the others run
// the jobs. It is not retried in a tight loop (sshd's PerSourcePenalties).
func TestSSHLoginRefused(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	inv := fixedInventory(t, l)
	stranger := filepath.Join(l.Dir, "stranger")
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	block, err := ssh.MarshalPrivateKey(key, "")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(stranger, pem.EncodeToMemory(block), 0o600)
	b, _ := os.ReadFile(inv)
	os.WriteFile(inv, []byte(strings.Replace(string(b), "  - name: node2\n", "  - name: node2\n    identity_file: "+stranger+"\n", 1)), 0o644)
	effects := filepath.Join(l.Dir, "effects")
	sshdLog := filepath.Join(l.Hosts[1].Dir, "sshd.log")
	before, _ := os.ReadFile(sshdLog)
	r := labRun(t, l, effectJobs(1, 3, "", "0", effects), "-i", inv, "-o", "logs")
	// Said as the run starts ("leaving out"), or, when node1 was up first
	// (a run waits for no host), as the run learns of it ("left out").
	leftOut := strings.Contains(r.stderr, "leaving out node2") || strings.Contains(r.stderr, "host node2: left out: ")
	if r.code != 0 || !leftOut || !strings.Contains(r.stderr, "unable to authenticate") {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	checkEffects(t, effects, 3)
	log, _ := os.ReadFile(sshdLog)
	if n := strings.Count(string(log[len(before):]), "Connection closed by authenticating user"); n != 1 {
		t.Errorf("node2 saw %d refused logins, want the first only", n)
	}
}

// The coordinator killed outright over SSH: the journal is whole, the
// remote jobs die on their own, and --resume with the job file reversed runs
// exactly the jobs that had not succeeded.
func TestSSHKilledThenResume(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 2})
	effects := filepath.Join(l.Dir, "effects")
	started := filepath.Join(l.Dir, "started")
	marker := filepath.Join(l.Dir, "first-run")
	os.WriteFile(marker, nil, 0o644)
	// Jobs 5-8 fill the four slots and, in the first run only, stay there
	// until the coordinator is killed; the job lines are the same in both runs.
	var jobs []string
	for i := 1; i <= 16; i++ {
		nap := ""
		if i >= 5 && i <= 8 {
			nap = fmt.Sprintf("echo %d >> %s; if [ -e %s ]; then sleep 30; fi; ", i, started, marker)
		}
		jobs = append(jobs, fmt.Sprintf("%secho %d >> %s", nap, i, effects))
	}
	write := func() {
		os.WriteFile(filepath.Join(l.Dir, "jobs.txt"), []byte(strings.Join(jobs, "\n")+"\n"), 0o644)
	}
	write()
	cmd := labCmd(t, l, "", "-i", l.Inventory(""), "-o", "logs", "--keepalive", "200ms", "jobs.txt")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitForFile(t, started, func(s string) bool { return len(strings.Fields(s)) == 4 })
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	// The wrappers notice and kill the jobs that were running.
	deadline := time.Now().Add(10 * time.Second)
	for len(leftovers(marker)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if pids := leftovers(marker); len(pids) > 0 {
		t.Fatalf("jobs of the killed run still running: %v", pids)
	}
	wholeJournal(t, filepath.Join(l.Dir, "logs"))
	os.Remove(marker)
	for i, j := 0, len(jobs)-1; i < j; i, j = i+1, j-1 {
		jobs[i], jobs[j] = jobs[j], jobs[i]
	}
	write()
	// The killed run's GPU locks outlive it by the wrappers' grace.
	r := labRun(t, l, "", "-i", l.Inventory(""), "-o", "logs", "--resume", "--busy-recheck", "300ms", "jobs.txt")
	if r.code != 0 {
		t.Fatalf("resume: exit %d\n%s", r.code, r.stderr)
	}
	checkEffects(t, effects, 16)
}

// A log dir on a full disk (a 128 KiB tmpfs in a mount namespace of the
// test's own): the job whose output cannot be saved fails with that reason,
// the journal stays valid JSON lines, and the run stops cleanly with exit 1.
func TestE2EFullDisk(t *testing.T) {
	t.Parallel()
	if out, err := exec.Command("unshare", "--mount", "--propagation", "private", "true").CombinedOutput(); err != nil {
		// CI (which sets GPUDISPATCH_REQUIRE_SSHD) runs as root and must run it.
		sshtest.Missing(t, "GPUDISPATCH_REQUIRE_SSHD", "a mount namespace (root) is needed: unshare --mount: %v\n%s", err, out)
	}
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	os.Mkdir(logs, 0o755)
	// The tmpfs lives as long as the namespace: copy what is to be checked.
	script := `mount -t tmpfs -o size=128k,mode=0700 none "$1" || exit 99
"$2" --gpus 0 -o "$1"; rc=$?
cp "$1/journal.jsonl" "$3/"
exit $rc`
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", logs, binary, dir)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader("head -c 1000000 /dev/zero\necho small\n")
	var errOut strings.Builder
	cmd.Stderr = &errOut
	err := cmd.Run()
	if code := statusOf(err); code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, errOut.String())
	}
	for _, want := range []string{"job 1 failed on localhost:0: its output could not be saved", "no space left on device"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut.String())
		}
	}
	// Whether the journal could take the failures depends on the file
	// system's blocks: either it records both jobs' ends, or the run says
	// it stopped because the journal could not be written.
	events := wholeJournal(t, dir)
	if count(events, "failed")+count(events, "cancelled") != 2 && !strings.Contains(errOut.String(), "stopped: journal") {
		t.Errorf("the journal lost a job's end and the run did not say so:\n%s", errOut.String())
	}
}

// Bad job lines are rejected one by one with their line numbers and the
// reason; the good ones, invalid UTF-8 included, run; the journal stays
// valid, and --resume skips the jobs that succeeded, odd bytes or not.
func TestE2EBadJobLines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	lines := []string{
		"echo ok1",
		"@nowhere echo x",
		"@localhost:7 echo x",
		"[gpus=99] echo x",
		"",
		"echo a\x00b",
		"echo " + strings.Repeat("x", 1<<20),
		"printf '%s' '\xff\xfe'",
		"echo ok2",
	}
	os.WriteFile(filepath.Join(dir, "jobs.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	r := gpd(t, dir, "", "--gpus", "0,1", "jobs.txt")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s", r.code, r.stderr)
	}
	for _, want := range []string{
		`jobs.txt:2: job 2 rejected: unknown host "nowhere"`,
		"jobs.txt:3: job 3 rejected: host localhost has no GPU 7",
		"jobs.txt:4: job 4 rejected: gpus=99",
		"jobs.txt:6: job 5 rejected: job contains a NUL byte",
		"jobs.txt:7: job 6 rejected: job is longer than",
		"8 jobs: 3 succeeded, 5 rejected",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	logs := filepath.Join(dir, "gpudispatch-logs")
	if got := readFile(t, filepath.Join(logs, "7.out")); got != "\xff\xfe" {
		t.Errorf("the invalid UTF-8 job printed %q", got)
	}
	journal(t, logs) // fails on a bad line
	r = gpd(t, dir, "", "--gpus", "0,1", "--resume", "jobs.txt")
	if !strings.Contains(r.stderr, "3 skipped (succeeded before)") || strings.Contains(r.stderr, "started") {
		t.Errorf("resume ran again what had succeeded:\n%s", r.stderr)
	}
}

// [timeout=] over SSH: the job's whole remote group is killed at the limit
// and the job is recorded timeout.
func TestSSHTimeoutKillsRemoteGroup(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 1})
	pidFile := filepath.Join(l.Dir, "pid")
	r := labRun(t, l, "[timeout=1s] sleep 300 & echo $! > "+pidFile+"; wait\n", "-i", l.Inventory(""), "-o", "logs")
	if r.code != 1 || !strings.Contains(r.stderr, "timed out on node1:0") {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if n := count(journal(t, filepath.Join(l.Dir, "logs")), "timeout"); n != 1 {
		t.Errorf("%d timeout events, want 1", n)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, pidFile)))
	if err != nil {
		t.Fatal(err)
	}
	sshtest.WaitGone(t, []int{pid}, 0)
}
