package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// labCmd prepares the binary to run against lab l, in a clean environment:
// no ssh-agent, a HOME of its own.
func labCmd(t testing.TB, l *sshtest.Lab, stdin string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = l.Dir
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SSH_AUTH_SOCK=") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "HOME="+l.Dir, lockEnv(l.Dir))
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	return cmd
}

func labRun(t *testing.T, l *sshtest.Lab, stdin string, args ...string) result {
	t.Helper()
	cmd := labCmd(t, l, stdin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return result{code: statusOf(err), stdout: out.String(), stderr: errOut.String()}
}

type span struct {
	host, gpu  string
	start, end int64
}

// spans reads the job logs of jobs that printed
// "$FAKE_HOST $GPUDISPATCH_HOST $CUDA_VISIBLE_DEVICES start end".
func spans(t *testing.T, logDir string, n int) []span {
	t.Helper()
	var out []span
	for i := 1; i <= n; i++ {
		f := strings.Fields(readFile(t, filepath.Join(logDir, strconv.Itoa(i)+".out")))
		if len(f) != 5 {
			t.Fatalf("job %d printed %q", i, f)
		}
		if f[0] != f[1] {
			t.Errorf("job %d ran on %s but was told it is on %s", i, f[0], f[1])
		}
		s, _ := strconv.ParseInt(f[3], 10, 64)
		e, _ := strconv.ParseInt(f[4], 10, 64)
		out = append(out, span{f[0], f[2], s, e})
	}
	return out
}

// peak is the most jobs that ran at once; it fails t when one GPU of one
// host ran two jobs at once.
func peak(t *testing.T, ss []span) int {
	t.Helper()
	most := 0
	for i, a := range ss {
		n := 0
		for j, b := range ss {
			if b.start <= a.start && a.start < b.end {
				n++
				if i != j && a.host == b.host && a.gpu == b.gpu {
					t.Errorf("%s:%s ran two jobs at once", a.host, a.gpu)
				}
			}
		}
		most = max(most, n)
	}
	return most
}

const timedJob = `s=$(date +%s%N); sleep 0.4; echo "$FAKE_HOST $GPUDISPATCH_HOST $CUDA_VISIBLE_DEVICES $s $(date +%s%N)"`

// Jobs spread over 3 hosts x 2 GPUs, each told its own host and GPU, one
// job per GPU at a time, all six slots busy at once.
func TestSSHSpreadsOverHosts(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 3, GPUs: 2})
	r := labRun(t, l, strings.Repeat(timedJob+"\n", 12), "-i", l.Inventory(""), "-o", "logs")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	ss := spans(t, filepath.Join(l.Dir, "logs"), 12)
	used := map[string]bool{}
	for _, s := range ss {
		used[s.host+":"+s.gpu] = true
	}
	if len(used) != 6 {
		t.Errorf("slots used: %v, want all 6", used)
	}
	if p := peak(t, ss); p != 6 {
		t.Errorf("%d jobs ran at once, want 6", p)
	}
}

func TestSSHPins(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 3, GPUs: 2})
	jobs := "@node2:1 echo $FAKE_HOST $CUDA_VISIBLE_DEVICES\n@node2:1 echo $FAKE_HOST $CUDA_VISIBLE_DEVICES\n" +
		"[host=node3 gpus=2] echo $FAKE_HOST $CUDA_VISIBLE_DEVICES\n@node1 echo $FAKE_HOST\n"
	r := labRun(t, l, jobs, "-i", l.Inventory(""), "-o", "logs")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	want := []string{"node2 1\n", "node2 1\n", "node3 0,1\n", "node1\n"}
	for i, w := range want {
		if got := readFile(t, filepath.Join(l.Dir, "logs", strconv.Itoa(i+1)+".out")); got != w {
			t.Errorf("job %d printed %q, want %q", i+1, got, w)
		}
	}
}

// More jobs at once on one host than its sshd allows sessions per
// connection: the pool opens more connections, no job fails.
func TestSSHMoreJobsThanMaxSessions(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 6, MaxSessions: 2})
	r := labRun(t, l, strings.Repeat(timedJob+"\n", 12), "-i", l.Inventory(""), "-o", "logs")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if p := peak(t, spans(t, filepath.Join(l.Dir, "logs"), 12)); p != 6 {
		t.Errorf("%d jobs ran at once, want 6 (three connections' worth)", p)
	}
}

// The exact bytes of the line reach the remote login shell.
func TestSSHNastyQuoting(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{})
	line := `echo "a'b" '$HOME' \\ ; printf '%s\n' "ü" "$((1+2))" '\x41'`
	want, err := exec.Command("bash", "-c", line).Output()
	if err != nil {
		t.Fatal(err)
	}
	r := labRun(t, l, line+"\n", "-i", l.Inventory(""), "-o", "logs")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if got := readFile(t, filepath.Join(l.Dir, "logs", "1.out")); got != string(want) {
		t.Errorf("remote job printed %q, bash prints %q", got, want)
	}
}

func TestSSHHostKeys(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{})
	inv := l.Inventory("")
	known := readFile(t, l.KnownHosts)
	fingerprint := "SHA256:"

	// Unknown: refused with the fingerprint and how to accept it.
	os.WriteFile(l.KnownHosts, nil, 0o600)
	r := labRun(t, l, "echo hi\n", "-i", inv)
	if r.code != 2 || !strings.Contains(r.stderr, "host key unknown") || !strings.Contains(r.stderr, fingerprint) || !strings.Contains(r.stderr, "--accept-new-host-keys") {
		t.Fatalf("unknown key: exit %d\n%s", r.code, r.stderr)
	}
	// Accepted and recorded as OpenSSH would, then known.
	r = labRun(t, l, "echo hi\n", "-i", inv, "--accept-new-host-keys")
	if r.code != 0 {
		t.Fatalf("accept-new: exit %d\n%s", r.code, r.stderr)
	}
	recorded := readFile(t, l.KnownHosts)
	if !strings.HasPrefix(recorded, "[127.0.0.1]:"+strconv.Itoa(l.Hosts[0].Port)+" ssh-ed25519 ") {
		t.Errorf("known_hosts holds %q", recorded)
	}
	out, err := exec.Command("ssh", "-F", l.SSHConfig, "-o", "BatchMode=yes", "node1", "true").CombinedOutput()
	if err != nil {
		t.Errorf("OpenSSH does not accept the recorded line: %v %s", err, out)
	}
	if r = labRun(t, l, "echo hi\n", "-i", inv); r.code != 0 {
		t.Errorf("after recording: exit %d\n%s", r.code, r.stderr)
	}

	// Changed: always refused, even when accepting new keys.
	other := strings.Replace(known, l.Hosts[0].Name, "", 1)
	other = strings.Fields(other)[0] + " ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n"
	os.WriteFile(l.KnownHosts, []byte(other), 0o600)
	r = labRun(t, l, "echo hi\n", "-i", inv, "--accept-new-host-keys")
	if r.code != 2 || !strings.Contains(r.stderr, "host key changed") || strings.Count(r.stderr, fingerprint) < 2 {
		t.Errorf("changed key: exit %d\n%s", r.code, r.stderr)
	}
}

// A job's output reaches its log while it still runs.
func TestSSHStreamsWhileRunning(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{})
	cmd := labCmd(t, l, "echo first; sleep 3; echo second\n", "-i", l.Inventory(""), "-o", "logs")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitForFile(t, filepath.Join(l.Dir, "logs", "1.out"), func(s string) bool { return s == "first\n" })
	if d := time.Since(start); d > 2500*time.Millisecond {
		t.Errorf("first line arrived after %v, when the job was nearly done", d)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(l.Dir, "logs", "1.out")); got != "first\nsecond\n" {
		t.Errorf("log %q", got)
	}
}

// remotePIDs starts a run of two jobs that record their pids (shell and a
// child ignoring TERM) and waits until they run.
func remotePIDs(t *testing.T, l *sshtest.Lab, args ...string) (*exec.Cmd, []int, *bytes.Buffer) {
	t.Helper()
	pidFile := filepath.Join(l.Dir, "pids")
	job := "sleep 300 & echo $! >> " + pidFile + "; trap '' TERM; sleep 301 & echo $! >> " + pidFile + "; echo $$ >> " + pidFile + "; wait\n"
	cmd := labCmd(t, l, "", append([]string{"-i", l.Inventory(""), "-o", "logs"}, args...)...)
	stdin, errOut := startCmd(t, cmd)
	io.WriteString(stdin, job+job)
	return cmd, waitPids(t, pidFile, 6), errOut
}

// Ctrl-C twice: the remote process groups are killed, even children that
// ignore TERM, before gpudispatch exits.
func TestSSHCancelLeavesNoRemoteProcess(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 2})
	cmd, pids, errOut := remotePIDs(t, l)
	cmd.Process.Signal(syscall.SIGINT)
	time.Sleep(100 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); statusOf(err) != 130 {
		t.Fatalf("exit %v, want 130\n%s", err, errOut)
	}
	sshtest.WaitGone(t, pids, 0)
}

// A coordinator killed outright (kill -9) ends no job: both run on, and a
// run started with --resume on the log dir re-adopts them. The one still
// running is followed to its end, its log completed from the byte it had:
// every line once, in order; the one that ended meanwhile is recorded with
// its real exit status. Neither runs twice.
func TestSSHCoordinatorKilledJobsRunOnAndAreReadopted(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 2})
	effects := filepath.Join(l.Dir, "effects")
	logDir := filepath.Join(l.Dir, "logs")
	logJournalOnFailure(t, logDir)
	jobs := "echo 1 >> " + effects + "; for i in $(seq 1 40); do echo tick $i; sleep 0.1; done; exit 3\n" +
		"echo 2 >> " + effects + "; sleep 1; echo two; exit 5\n"
	cmd := labCmd(t, l, "", "-i", l.Inventory(""), "-o", "logs")
	stdin, _ := startCmd(t, cmd)
	io.WriteString(stdin, jobs)
	stdin.Close()
	waitForFile(t, filepath.Join(logDir, "1.out"), func(s string) bool { return strings.Contains(s, "tick 3\n") })
	cmd.Process.Kill()
	cmd.Wait()
	time.Sleep(1500 * time.Millisecond) // job 2 ends meanwhile
	// hosts names what runs on, and what ended, with no coordinator.
	h := labRun(t, l, "", "hosts", "-i", l.Inventory(""))
	for _, want := range []string{"log dir " + logDir + ", run ", "job 1, attempt 1, GPUs 0: runs on with no gpudispatch since ", "job 2, attempt 1, GPUs 1: ended with no gpudispatch"} {
		if !strings.Contains(h.stdout, want) {
			t.Errorf("hosts does not say %q:\n%s", want, h.stdout)
		}
	}
	r := labRun(t, l, jobs, "-i", l.Inventory(""), "-o", "logs", "--resume")
	if r.code != 1 {
		t.Fatalf("resumed run: exit %d, want 1 (jobs that failed)\n%s", r.code, r.stderr)
	}
	if got := readFile(t, effects); strings.Count(got, "1\n") != 1 || strings.Count(got, "2\n") != 1 {
		t.Errorf("each job ran %q; want once each", got)
	}
	if got := readFile(t, filepath.Join(logDir, "1.out")); got != ticks(40) {
		t.Errorf("1.out is %q; want every tick once, in order", got)
	}
	if got := readFile(t, filepath.Join(logDir, "2.out")); got != "two\n" {
		t.Errorf("2.out is %q", got)
	}
	outcomes := map[string]float64{}
	for _, e := range journal(t, logDir) {
		if e["event"] == "failed" || e["event"] == "finished" || e["event"] == "lost" {
			if _, dup := outcomes[e["job"].(string)]; dup {
				t.Errorf("job %v has two outcomes", e["job"])
			}
			code, _ := e["exit"].(float64)
			outcomes[e["job"].(string)] = code
		}
	}
	if outcomes["1"] != 3 || outcomes["2"] != 5 {
		t.Errorf("outcomes %v; want job 1 exit 3, job 2 exit 5 (their own)", outcomes)
	}
	// What the host kept of them is gone once it is home (the shells end
	// just after the run).
	spool := filepath.Join(l.Hosts[0].Home, ".gpudispatch", "jobs")
	if _, err := os.Stat(spool); err != nil {
		t.Errorf("no spool on the host: %v", err)
	}
	var left []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if left, _ = filepath.Glob(filepath.Join(spool, "*")); len(left) == 0 {
			break
		}
	}
	if len(left) != 0 {
		t.Errorf("kept on the host after the run: %v", left)
	}
}

// A job's life is its own, whatever happens to its coordinator or the
// network, each for longer than the keepalives take to call a connection
// dead: once both are back, the run takes the job up again from the byte
// its log had, to the job's own end. Every line (one every 100 ms) is in
// the log once, in order; the job ran once and finished once.
//
//   - paused: the coordinator stopped (a laptop's lid closed: SIGSTOP),
//     the job outlasting the pause;
//   - cut: the host's sshd killed, every connection with it, while the
//     host and the job live on (its network went away).
//
// Where CI asks for it (GPUDISPATCH_FULL_FAULTS), at full length with the
// default keepalive: a pause of two minutes, a cut of 90 s. Otherwise 20 s
// and 15 s, with --keepalive 2s: as far past the keepalives, in a sixth of
// the time.
func TestSSHJobOutlivesItsCoordinatorAndNetwork(t *testing.T) {
	t.Parallel()
	pause, cut, flags := 20*time.Second, 15*time.Second, []string{"--keepalive", "2s"}
	if os.Getenv("GPUDISPATCH_FULL_FAULTS") != "" {
		pause, cut, flags = 120*time.Second, 90*time.Second, nil
	}
	for _, tc := range []struct {
		name  string
		lines int // about 100 ms each: the job outlasts the fault by 10 s
		fault func(l *sshtest.Lab, coordinator *os.Process)
	}{
		{"paused", int((pause + 10*time.Second) / (100 * time.Millisecond)), func(_ *sshtest.Lab, p *os.Process) {
			p.Signal(syscall.SIGSTOP)
			time.Sleep(pause)
			p.Signal(syscall.SIGCONT)
		}},
		{"cut", int((cut + 10*time.Second) / (100 * time.Millisecond)), func(l *sshtest.Lab, _ *os.Process) {
			l.Hosts[0].Cut()
			time.Sleep(cut)
			l.Hosts[0].Start()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 1})
			logDir := filepath.Join(l.Dir, "logs")
			effects := filepath.Join(l.Dir, "effects")
			logJournalOnFailure(t, logDir)
			job := fmt.Sprintf("echo ran >> %s; for i in $(seq 1 %d); do echo line $i; sleep 0.1; done\n", effects, tc.lines)
			cmd := labCmd(t, l, job, append([]string{"-i", l.Inventory(""), "-o", "logs"}, flags...)...)
			var errOut bytes.Buffer
			cmd.Stderr = &errOut
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waitForFile(t, filepath.Join(logDir, "1.out"), func(s string) bool { return strings.Contains(s, "line 3\n") })
			tc.fault(l, cmd.Process)
			if err := waitExit(t, cmd, &errOut, 120*time.Second); err != nil {
				t.Fatalf("exit %v\n%s", err, errOut.String())
			}
			checkLines(t, filepath.Join(logDir, "1.out"), "line", tc.lines)
			if got := readFile(t, effects); got != "ran\n" {
				t.Errorf("the job ran %q; want once", got)
			}
			events := journal(t, logDir)
			if count(events, "finished") != 1 || count(events, "lost") != 0 {
				t.Errorf("%d finished and %d lost events; want the one job finished", count(events, "finished"), count(events, "lost"))
			}
		})
	}
}

// checkLines checks that path holds "WORD 1" to "WORD n", a line each,
// once, in order.
func checkLines(t *testing.T, path, word string, n int) {
	t.Helper()
	var want strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&want, "%s %d\n", word, i)
	}
	if got := readFile(t, path); got != want.String() {
		t.Errorf("%s has %d bytes (%d lines), want every line once, in order (%d bytes); it starts %q", path, len(got), strings.Count(got, "\n"), want.Len(), got[:min(len(got), 200)])
	}
}

// A second Ctrl-C while the job's host is cut off cannot stop the job
// there: the run records it cancelled, says that it may run on, and
// leaves it in the journal. A run with --resume on the log dir, once the
// host answers, stops it before it ends and records so; it is not
// re-adopted, nor run twice.
func TestSSHCancelOfCutOffHostIsCarriedOutByTheNextRun(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 1})
	logDir := filepath.Join(l.Dir, "logs")
	effects := filepath.Join(l.Dir, "effects")
	pidFile := filepath.Join(l.Dir, "pid")
	logJournalOnFailure(t, logDir)
	job := fmt.Sprintf("echo $$ > %s; echo started; sleep 60; echo ended >> %s\n", pidFile, effects)
	cmd := labCmd(t, l, job, "-i", l.Inventory(""), "-o", "logs")
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitForFile(t, filepath.Join(logDir, "1.out"), func(s string) bool { return s == "started\n" })
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, pidFile)))
	if err != nil {
		t.Fatal(err)
	}
	l.Hosts[0].Cut()
	cmd.Process.Signal(syscall.SIGINT)
	time.Sleep(300 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGINT)
	waitExit(t, cmd, &errOut, 30*time.Second)
	for _, want := range []string{"job 1 cancelled, but node1 did not answer: it may run on there", "attempt 1 of job 1 may still run there", "--resume"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("the run does not say %q:\n%s", want, errOut.String())
		}
	}
	if !sshtest.Running(pid) {
		t.Fatal("the job died with its connection; this test needs it running on")
	}
	l.Hosts[0].Start()
	r := labRun(t, l, "", "-i", l.Inventory(""), "-o", "logs", "--resume")
	if r.code != 0 {
		t.Fatalf("resumed run: exit %d\n%s", r.code, r.stderr)
	}
	sshtest.WaitGone(t, []int{pid}, 10*time.Second)
	if !strings.Contains(r.stderr, "job 1: attempt 1 stopped on node1") {
		t.Errorf("the resumed run does not say it stopped the attempt:\n%s", r.stderr)
	}
	events := journal(t, logDir)
	if count(events, "stopped") != 1 || count(events, "started") != 1 || count(events, "cancelled") != 1 {
		t.Errorf("journal: %d stopped, %d started, %d cancelled; want the attempt started, cancelled and stopped once each",
			count(events, "stopped"), count(events, "started"), count(events, "cancelled"))
	}
	if _, err := os.Stat(effects); err == nil {
		t.Error("the cancelled job ran to its end")
	}
}

// A host whose systemd kills a user's processes at logout, for a user with
// no linger, would kill the jobs left with no coordinator: the run and
// hosts say so, naming loginctl enable-linger. logind is asked once per
// boot (its answer is kept in the spool); linger is logind's file for the
// user, looked at every time.
func TestSSHWarnsOfKillUserProcesses(t *testing.T) {
	t.Parallel()
	l, linger := logindLab(t, "echo 'b true'")
	want := "node1: systemd there kills your processes when your last session ends (KillUserProcesses=yes) and you have no linger"
	r := labRun(t, l, "true\n", "-i", l.Inventory(""), "-o", "logs")
	if r.code != 0 || !strings.Contains(r.stderr, "gpudispatch: warning: "+want) || !strings.Contains(r.stderr, "loginctl enable-linger") {
		t.Errorf("run: exit %d\n%s", r.code, r.stderr)
	}
	h := labRun(t, l, "", "hosts", "-i", l.Inventory(""))
	if !strings.Contains(h.stdout, want) {
		t.Errorf("hosts does not warn:\n%s", h.stdout)
	}
	if asked, _ := os.ReadFile(filepath.Join(l.Hosts[0].Home, "busctl.calls")); strings.Count(string(asked), "\n") != 1 {
		t.Errorf("logind was asked %d times in two runs, want once", strings.Count(string(asked), "\n"))
	}
	// loginctl enable-linger makes logind's file for the user.
	if err := os.WriteFile(filepath.Join(linger, me(t)), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if h := labRun(t, l, "", "hosts", "-i", l.Inventory("")); strings.Contains(h.stdout, "KillUserProcesses") {
		t.Errorf("hosts warns of KillUserProcesses for a user with linger:\n%s", h.stdout)
	}
}

// me is the name of the user the tests run as, which they log in as too.
func me(t *testing.T) string {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}

// logindLab starts a lab of one host whose busctl is a shell script (what
// systemd-logind answers there, each call noted in ~/busctl.calls), and
// returns it with the directory of logind's linger files there.
func logindLab(t *testing.T, busctl string) (*sshtest.Lab, string) {
	t.Helper()
	fakes, linger := t.TempDir(), t.TempDir()
	script := "#!/bin/sh\necho asked >> \"$HOME/busctl.calls\"\n" + busctl + "\n"
	if err := os.WriteFile(filepath.Join(fakes, "busctl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 1, Env: []string{"PATH=" + fakes + ":/usr/local/bin:/usr/bin:/bin", "GPUDISPATCH_LINGER_DIR=" + linger}})
	return l, linger
}

// A host whose logind does not answer (busctl hangs, as on a server whose
// D-Bus is stuck) is not waited for beyond --probe-timeout: asking whether
// it would kill jobs left with no coordinator holds no job back, and the
// run says it could not tell. A logind that kills no one, or a user with
// linger, gets no warning.
func TestSSHStuckLogind(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, busctl string
		linger       bool
		silent       bool
	}{
		{"busctl hangs", "exec sleep 300", false, true},
		{"no kill", "echo 'b false'", false, false},
		{"kill, but linger", "echo 'b true'", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, linger := logindLab(t, tc.busctl)
			if tc.linger {
				if err := os.WriteFile(filepath.Join(linger, me(t)), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			out := runWithin(t, labCmd(t, l, "true\n", "-i", l.Inventory(""), "-o", "logs", "--probe-timeout", "1s"), time.Minute, "the host's logind")
			if n := count(journal(t, filepath.Join(l.Dir, "logs")), "started"); n != 1 {
				t.Errorf("%d jobs started, want 1", n)
			}
			want := "gpudispatch: warning: node1: its logind did not answer within 1s"
			if strings.Contains(out, want) != tc.silent {
				t.Errorf("the run says %q: %v, want %v:\n%s", want, !tc.silent, tc.silent, out)
			}
			if strings.Contains(out, "KillUserProcesses") {
				t.Errorf("the run warns of KillUserProcesses:\n%s", out)
			}
		})
	}
}

// A host reached through ssh_config's ProxyCommand, as ssh reaches it: the
// command (here OpenSSH's own ssh -W through node1) carries the
// connection, and the HostName, which resolves nowhere, is never looked up.
func TestSSHProxyCommand(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("ssh"); err != nil {
		sshtest.Missing(t, "GPUDISPATCH_REQUIRE_SSHD", "no ssh client here (apt-get install openssh-client)")
	}
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	f, _ := os.OpenFile(l.SSHConfig, os.O_APPEND|os.O_WRONLY, 0)
	fmt.Fprintf(f, "\nHost nodebehind\n  HostName behind.invalid\n  Port %d\n  ProxyCommand ssh -F %s -o BatchMode=yes -W 127.0.0.1:%%p node1\n  AddressFamily inet\n  HostKeyAlias behind-key\n", l.Hosts[1].Port, l.SSHConfig)
	// The alias as ssh writes it for a port that is not 22: node2's line
	// of known_hosts, used verbatim.
	fmt.Fprintf(f, "\nHost nodebracket\n  HostName behind.invalid\n  Port %d\n  ProxyCommand ssh -F %s -o BatchMode=yes -W 127.0.0.1:%%p node1\n  HostKeyAlias [127.0.0.1]:%d\n", l.Hosts[1].Port, l.SSHConfig, l.Hosts[1].Port)
	f.Close()
	inv := filepath.Join(l.Dir, "proxy.yaml")
	os.WriteFile(inv, []byte("ssh_config: "+l.SSHConfig+"\nhosts:\n  - name: nodebehind\n    gpus: 1\n"), 0o644)
	r := labRun(t, l, "echo $FAKE_HOST\n", "-i", inv, "-o", "logs", "--accept-new-host-keys")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if got := readFile(t, filepath.Join(l.Dir, "logs", "1.out")); got != "node2\n" {
		t.Errorf("job printed %q", got)
	}
	if log := readFile(t, filepath.Join(l.Hosts[0].Dir, "sshd.log")); !strings.Contains(log, "Accepted publickey for") {
		t.Errorf("nobody logged in to node1, through which the ProxyCommand goes; its log:\n%s", log)
	}
	// The host key is recorded under its HostKeyAlias, verbatim as ssh
	// records it, and found by it the next time, with no
	// --accept-new-host-keys, by gpudispatch and by ssh itself.
	if known := readFile(t, l.KnownHosts); !strings.Contains("\n"+known, "\nbehind-key ") {
		t.Errorf("known_hosts has no line for the HostKeyAlias:\n%s", known)
	}
	if r2 := labRun(t, l, "true\n", "-i", inv, "-o", "logs2"); r2.code != 0 {
		t.Errorf("again, by the recorded key: exit %d\n%s", r2.code, r2.stderr)
	}
	bracket := filepath.Join(l.Dir, "bracket.yaml")
	os.WriteFile(bracket, []byte("ssh_config: "+l.SSHConfig+"\nhosts:\n  - name: nodebracket\n    gpus: 1\n"), 0o644)
	if r3 := labRun(t, l, "true\n", "-i", bracket, "-o", "logs3"); r3.code != 0 {
		t.Errorf("a bracketed HostKeyAlias: exit %d\n%s", r3.code, r3.stderr)
	}
	for _, host := range []string{"nodebehind", "nodebracket"} {
		if out, err := exec.Command("ssh", "-F", l.SSHConfig, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", host, "true").CombinedOutput(); err != nil {
			t.Errorf("ssh %s, by the same known_hosts: %v: %s", host, err, out)
		}
	}
	// A key that would change the connection, not followed: said.
	if !strings.Contains(r.stderr, "warning: nodebehind: ssh_config sets AddressFamily inet, which gpudispatch does not follow") {
		t.Errorf("no warning for the key not followed:\n%s", r.stderr)
	}
}

// A host behind a jump host: the jump host's client carries the connection.
// node1 is not a job host of this inventory, so a login on node1 can only
// be the jump.
func TestSSHProxyJump(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	inv := filepath.Join(l.Dir, "jump.yaml")
	os.WriteFile(inv, []byte("ssh_config: "+l.SSHConfig+"\nhosts:\n  - name: node2\n    proxy_jump: node1\n    gpus: 1\n"), 0o644)
	r := labRun(t, l, "echo $FAKE_HOST\n", "-i", inv, "-o", "logs")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if got := readFile(t, filepath.Join(l.Dir, "logs", "1.out")); got != "node2\n" {
		t.Errorf("job printed %q", got)
	}
	log := readFile(t, filepath.Join(l.Hosts[0].Dir, "sshd.log"))
	if !strings.Contains(log, "Accepted publickey for") {
		t.Errorf("nobody logged in to the jump host node1; its log:\n%s", log)
	}
}

// A hung server (it takes the TCP connection and never speaks SSH) is
// named down in words that name it, its address and the flag, not in the
// network stack's; the job runs on the good host meanwhile.
func TestSSHHungHostInWords(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 1})
	port := strconv.Itoa(silentListener(t))
	f, _ := os.OpenFile(l.SSHConfig, os.O_APPEND|os.O_WRONLY, 0)
	fmt.Fprintf(f, "\nHost nodehung\n  HostName 127.0.0.1\n  Port %s\n", port)
	f.Close()
	inv := filepath.Join(l.Dir, "hung.yaml")
	os.WriteFile(inv, []byte(fmt.Sprintf("ssh_config: %s\nhosts:\n  - name: nodehung\n    gpus: [0]\n  - name: node1\n    gpus: auto\n", l.SSHConfig)), 0o644)
	// The job outlasts the connect timeout, so the run hears the hung host's end.
	r := labRun(t, l, "sleep 2; echo $FAKE_HOST\n", "-i", inv, "-o", "logs", "--connect-timeout", "1s")
	if r.code != 0 || !strings.Contains(r.stderr, "no SSH greeting from 127.0.0.1:"+port+" within 1s (--connect-timeout)") ||
		strings.Contains(r.stderr, "closed network connection") || strings.Contains(r.stderr, "i/o timeout") {
		t.Errorf("exit %d\n%s", r.code, r.stderr)
	}
	if got := readFile(t, filepath.Join(l.Dir, "logs", "1.out")); got != "node1\n" {
		t.Errorf("the job printed %q", got)
	}
}

// A gpus: auto host that is down at start does not hold the run up: it is
// tried again in the background (TestSSHAutoHostRejoins), and the run says
// at its end why it got no job; with every host down the run cannot start
// and says why for each.
func TestSSHHostDownAtStart(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	inv := l.Inventory("")
	l.Hosts[1].Stop()
	r := labRun(t, l, "echo $FAKE_HOST\n", "-i", inv, "-o", "logs")
	if r.code != 0 || !strings.Contains(r.stderr, "warning: node2 (") || !strings.Contains(r.stderr, "was still being opened as the run ended") ||
		!strings.Contains(r.stderr, "refused the connection: no SSH server listens there") {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	l.Hosts[0].Stop()
	r = labRun(t, l, "echo hi\n", "-i", inv, "-o", "logs")
	if r.code != 2 || !strings.Contains(r.stderr, "no host can be used") || !strings.Contains(r.stderr, "node1") || !strings.Contains(r.stderr, "node2") {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
}

// `gpudispatch hosts`: a line per host with its server and GPUs, the reason
// for a host that is down, exit 1 when one is; --json for scripts; exit 2
// for a bad inventory.
func TestSSHHostsCommand(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 2})
	inv := l.Inventory("")
	l.Hosts[0].SetGPUs("0, GPU-x, Fake GPU 80GB, 81920, 1234, 56\n1, GPU-y, Fake GPU 80GB, 81920, 0, 0\n")
	r := labRun(t, l, "", "hosts", "-i", inv)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"node1", "up", "0,1", "gpu 0", "1234/81920 MiB, 56%", "node2"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, r.stdout)
		}
	}
	// The SSH banner and the UUIDs, with -v only.
	if strings.Contains(r.stdout, "OpenSSH") || strings.Contains(r.stdout, "GPU-x") {
		t.Errorf("the table without -v shows the banner or a UUID:\n%s", r.stdout)
	}
	if r = labRun(t, l, "", "hosts", "-i", inv, "-v"); !strings.Contains(r.stdout, "OpenSSH") || !strings.Contains(r.stdout, "GPU-x") {
		t.Errorf("hosts -v lacks the banner or a UUID:\n%s", r.stdout)
	}
	// Busy GPUs: a process on node1's GPU 1, a run's job on node2's GPU 0.
	l.Hosts[0].SetApps("GPU-y, 4242, 10\n")
	run := labCmd(t, l, "", "-i", inv, "-o", "logs")
	stdin, runErr := startCmd(t, run)
	defer func() { t.Logf("run:\n%s", runErr) }()
	io.WriteString(stdin, "@node2:0 touch $HOME/started; sleep 30\n")
	waitForFile(t, filepath.Join(l.Hosts[1].Home, "started"), func(string) bool { return true })
	r = labRun(t, l, "", "hosts", "-i", inv, "-v")
	for _, want := range []string{
		`(?m)^\s+gpu 1\s+Fake GPU 80GB\s+0/81920 MiB, 0%\s+GPU-y\s+1 slot\s+1 process, 0 MiB used$`,
		`(?m)^\s+gpu 0\s+Fake GPU 80GB\s+0/81920 MiB, 0%\s+` + l.Hosts[1].UUID(0) + `\s+1 slot\s+locked by run \S+ of \S+@\S+ \(pid \d+\)$`,
		`(?m)^\s+gpu 1\s+Fake GPU 80GB\s+0/81920 MiB, 0%\s+` + l.Hosts[1].UUID(1) + `\s+1 slot\s+free$`,
	} {
		if !regexpMatch(want, r.stdout) {
			t.Errorf("table has no line like %s:\n%s", want, r.stdout)
		}
	}
	run.Process.Kill()
	run.Wait()
	l.Hosts[1].Stop()
	// A host down: the row says so, and why is on a line of its own, so
	// that no column widens for it.
	r = labRun(t, l, "", "hosts", "-i", inv)
	if !regexpMatch(`(?m)^node2\s+\S+\s+left out\s+auto\s+-\n\s{4}127\.0\.0\.1:\d+ refused the connection`, r.stdout) {
		t.Errorf("a down host's row:\n%s", r.stdout)
	}
	r = labRun(t, l, "", "hosts", "-i", inv, "--json")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1 with a host down\n%s%s", r.code, r.stdout, r.stderr)
	}
	var up, down int
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var h struct {
			Name  string
			Up    bool
			Error string
			Slots int
		}
		if err := json.Unmarshal([]byte(line), &h); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if h.Up && h.Slots == 2 {
			up++
		}
		if !h.Up && h.Name == "node2" && strings.Contains(h.Error, "refused the connection") {
			down++
		}
	}
	if up != 1 || down != 1 {
		t.Errorf("json:\n%s", r.stdout)
	}
	os.WriteFile(filepath.Join(l.Dir, "bad.yaml"), []byte("hosts: {}\n"), 0o644)
	if r = labRun(t, l, "", "hosts", "-i", "bad.yaml"); r.code != 2 {
		t.Errorf("bad inventory: exit %d", r.code)
	}
}

// Hashed known_hosts entries are honoured, and with HashKnownHosts yes a
// newly accepted key is recorded hashed, as OpenSSH does.
func TestSSHHashedKnownHosts(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{})
	inv := l.Inventory("")
	out, err := exec.Command("ssh-keygen", "-H", "-f", l.KnownHosts).CombinedOutput()
	if err != nil {
		t.Fatalf("ssh-keygen -H: %v\n%s", err, out)
	}
	if hashed := readFile(t, l.KnownHosts); !strings.HasPrefix(hashed, "|1|") {
		t.Fatalf("known_hosts not hashed: %q", hashed)
	}
	if r := labRun(t, l, "echo hi\n", "-i", inv); r.code != 0 {
		t.Fatalf("hashed entry: exit %d\n%s", r.code, r.stderr)
	}
	os.WriteFile(l.KnownHosts, nil, 0o600)
	cfg := readFile(t, l.SSHConfig)
	os.WriteFile(l.SSHConfig, []byte(cfg+"  HashKnownHosts yes\n"), 0o644)
	if r := labRun(t, l, "echo hi\n", "-i", inv, "--accept-new-host-keys"); r.code != 0 {
		t.Fatalf("accept-new: exit %d\n%s", r.code, r.stderr)
	}
	if recorded := readFile(t, l.KnownHosts); !strings.HasPrefix(recorded, "|1|") {
		t.Errorf("recorded %q, want a hashed name", recorded)
	}
	out, err = exec.Command("ssh", "-F", l.SSHConfig, "-o", "BatchMode=yes", "node1", "true").CombinedOutput()
	if err != nil {
		t.Errorf("OpenSSH does not accept the hashed line: %v %s", err, out)
	}
}

// Output is copied byte for byte, whatever the bytes: 20 MB of random data
// arrive with the checksum the host computed.
func TestSSHBinaryOutput(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{})
	job := "head -c 20000000 /dev/urandom > blob; sha256sum < blob | cut -d' ' -f1 >&2; cat blob\n"
	r := labRun(t, l, job, "-i", l.Inventory(""), "-o", "logs")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	out, err := exec.Command("sha256sum", filepath.Join(l.Dir, "logs", "1.out")).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := strings.TrimSpace(readFile(t, filepath.Join(l.Dir, "logs", "1.err")))
	if got := strings.Fields(string(out))[0]; got != want {
		t.Errorf("log checksum %s, host's %s", got, want)
	}
}

// On a remote host the login profile is read once for all its slots (the
// GPU lock holder, which takes the GPUs the run just looked at, reads
// none), or per job with login: per_job (and once more by the run's look
// at what others use on the GPUs), and its variables reach the jobs.
func TestSSHLoginPerSlotOrJob(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 1})
	h := l.Hosts[0]
	profile := filepath.Join(h.Home, ".bash_profile")
	p, _ := os.ReadFile(profile)
	os.WriteFile(profile, append(p, "echo read >> ~/reads\nMSG=from-profile\n"...), 0o644)
	for _, tt := range []struct {
		login string
		reads int
	}{{"per_slot", 1}, {"per_job", 3 + 1}} {
		os.Remove(filepath.Join(h.Home, "reads"))
		inv := filepath.Join(l.Dir, tt.login+".yaml")
		os.WriteFile(inv, []byte(fmt.Sprintf("ssh_config: %s\nhosts:\n  - name: node1\n    gpus: [0]\n    login: %s\n", l.SSHConfig, tt.login)), 0o644)
		r := labRun(t, l, strings.Repeat("echo $MSG\n", 3), "-i", inv, "-o", tt.login)
		if r.code != 0 || readFile(t, filepath.Join(l.Dir, tt.login, "3.out")) != "from-profile\n" {
			t.Fatalf("login %s: exit %d: %s", tt.login, r.code, r.stderr)
		}
		if got := strings.Count(readFile(t, filepath.Join(h.Home, "reads")), "\n"); got != tt.reads {
			t.Errorf("login %s: the profile was read %d times for 3 jobs on one slot, want %d", tt.login, got, tt.reads)
		}
	}
}

// A job that exits 127 because conda is not set up in a non-interactive
// shell gets one hint line naming what to set, in the run's output, its
// summary and status; a job that fails otherwise gets none.
func TestSSHHintWhenCondaIsMissing(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 1})
	r := labRun(t, l, "conda activate myenv && python train.py\nexit 3\n", "-i", l.Inventory(""), "-o", "logs")
	if r.code != 1 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	const want = "hint: conda is not set up in a non-interactive login shell on node1"
	if n := strings.Count(r.stderr, want); n != 2 { // the job's line and the summary
		t.Errorf("the hint is said %d times, want on the job's line and in the summary:\n%s", n, r.stderr)
	}
	s := labRun(t, l, "", "status", "-o", "logs")
	if !strings.Contains(s.stdout, want) || strings.Count(s.stdout, "hint:") != 1 {
		t.Errorf("status does not give the one hint:\n%s", s.stdout)
	}
}
