package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// Jobs that print $CUDA_VISIBLE_DEVICES and their start and end times: the
// logs hold the right GPU, N slots run N at a time, and one GPU never runs
// two jobs at once.
func TestE2ESlotsAndLogs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var jobs strings.Builder
	for i := 0; i < 9; i++ {
		jobs.WriteString(`s=$(date +%s%N); sleep 0.3; echo "$CUDA_VISIBLE_DEVICES $s $(date +%s%N) $GPUDISPATCH_JOB_ID $GPUDISPATCH_HOST $CUDA_DEVICE_ORDER"` + "\n")
	}
	r := gpd(t, dir, jobs.String(), "--gpus", "0,1,2", "-o", "logs")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	type span struct {
		gpu        string
		start, end int64
	}
	var spans []span
	for i := 1; i <= 9; i++ {
		f := strings.Fields(readFile(t, filepath.Join(dir, "logs", strconv.Itoa(i)+".out")))
		if len(f) != 6 || f[3] != strconv.Itoa(i) || f[4] != "localhost" || f[5] != "PCI_BUS_ID" {
			t.Fatalf("job %d printed %q", i, f)
		}
		if f[0] != "0" && f[0] != "1" && f[0] != "2" {
			t.Errorf("job %d got CUDA_VISIBLE_DEVICES=%q", i, f[0])
		}
		s, _ := strconv.ParseInt(f[1], 10, 64)
		e, _ := strconv.ParseInt(f[2], 10, 64)
		spans = append(spans, span{f[0], s, e})
	}
	peak := 0
	for _, a := range spans {
		n := 0
		for _, b := range spans {
			if b.start <= a.start && a.start < b.end {
				n++
				if b.gpu == a.gpu && b != a {
					t.Errorf("GPU %s ran two jobs at once", a.gpu)
				}
			}
		}
		peak = max(peak, n)
	}
	if peak != 3 {
		t.Errorf("%d jobs ran at once, want 3 (one per slot)", peak)
	}
	if !strings.Contains(r.stderr, "job 1 started on localhost:") || !strings.Contains(r.stderr, "9 jobs: 9 succeeded") {
		t.Errorf("stderr:\n%s", r.stderr)
	}
}

// The exact bytes of a job line reach the shell: its output is what bash
// itself prints for it.
func TestE2ENastyQuoting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	line := `echo "a'b" '$HOME' \\ ; printf '%s\n' "ü"`
	want, err := exec.Command("bash", "-c", line).Output()
	if err != nil {
		t.Fatal(err)
	}
	r := gpd(t, dir, line+"\n", "--gpus", "0")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if got := readFile(t, filepath.Join(dir, "gpudispatch-logs", "1.out")); got != string(want) {
		t.Errorf("job printed %q, bash prints %q", got, want)
	}
}

// --resume runs again only the jobs that did not succeed.
func TestE2EResume(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	jobs := "echo a >> ran\necho b >> ran; test -f fixed\n# comment\necho c >> ran\n"
	r := gpd(t, dir, jobs, "--gpus", "0,1")
	if r.code != 1 || !strings.Contains(r.stderr, "job 2 failed") {
		t.Fatalf("first run: exit %d\n%s", r.code, r.stderr)
	}
	os.WriteFile(filepath.Join(dir, "fixed"), nil, 0o644)
	// Reordered input: matched by the line, not its position.
	reordered := "echo c >> ran\necho b >> ran; test -f fixed\necho a >> ran\n"
	r = gpd(t, dir, reordered, "--gpus", "0,1", "--resume")
	if r.code != 0 {
		t.Fatalf("resumed run: exit %d\n%s", r.code, r.stderr)
	}
	lines := strings.Fields(readFile(t, filepath.Join(dir, "ran")))
	sort.Strings(lines)
	if strings.Join(lines, " ") != "a b b c" {
		t.Errorf("jobs ran: %v, want a, b twice, c", lines)
	}
	if !strings.Contains(r.stderr, "2 skipped") {
		t.Errorf("summary does not count the skipped jobs:\n%s", r.stderr)
	}
}

// simple_gpu_scheduler's queue recipe: jobs start as lines arrive on a pipe
// that stays open (tail -f -n0 gpu.queue | gpudispatch --gpus 0,1,2).
func TestE2EQueueRecipe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	queue := filepath.Join(dir, "gpu.queue")
	os.WriteFile(queue, nil, 0o644)
	sh := exec.Command("bash", "-c", "tail -f -n 0 gpu.queue | "+binary+" --gpus 0,1,2")
	sh.Dir = dir
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(-sh.Process.Pid, syscall.SIGKILL)
	time.Sleep(300 * time.Millisecond) // tail is following
	f, _ := os.OpenFile(queue, os.O_APPEND|os.O_WRONLY, 0)
	fmt.Fprintln(f, "echo from the queue $CUDA_VISIBLE_DEVICES")
	f.Close()
	waitForFile(t, filepath.Join(dir, "gpudispatch-logs", "1.out"), func(s string) bool { return s == "from the queue 0\n" })
}

// Ctrl-C once drains: the running job finishes, the waiting ones are
// cancelled, exit 130.
func TestE2EDrainOnFirstSignal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd, stdin, errOut := startGPD(t, dir, "--gpus", "0")
	io.WriteString(stdin, "echo started > started; sleep 1; echo done > done\necho never > never\n")
	waitForFile(t, filepath.Join(dir, "started"), func(string) bool { return true })
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	if statusOf(err) != 130 {
		t.Fatalf("exit %v, want 130\n%s", err, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "done")); err != nil {
		t.Errorf("the running job did not finish: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "never")); err == nil {
		t.Errorf("a job started after the drain")
	}
	events := journal(t, filepath.Join(dir, "gpudispatch-logs"))
	if count(events, "finished") != 1 || count(events, "cancelled") != 1 {
		t.Errorf("journal: %v", events)
	}
	if !strings.Contains(errOut.String(), "draining") {
		t.Errorf("no drain message:\n%s", errOut)
	}
	if !strings.Contains(errOut.String(), "run the same command again with --resume (log dir gpudispatch-logs)") {
		t.Errorf("the summary says nothing of --resume:\n%s", errOut)
	}
}

// submit's words: --gpus is a count, --host a host name, and a mistake in
// either is told in words that say what to write instead.
func TestE2ESubmitFlagsInWords(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--gpus", "0,1"}, "submit's --gpus is how many GPUs each job needs (--gpus 2); to put a job on given GPUs, begin its line with @HOST:GPU"},
		{[]string{"--gpus", "two"}, "--gpus two: want how many GPUs each job needs, a number from 1"},
		{[]string{"--host", "node1:2"}, "--host takes a host name; for GPU 2 of node1, begin the job line with @node1:2"},
	} {
		r := gpd(t, dir, "", append(append([]string{"submit"}, tc.args...), "--", "true")...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, "strconv") {
			t.Errorf("submit %v: exit %d\n%s", tc.args, r.code, r.stderr)
		}
	}
}

// Ctrl-C twice kills the running jobs' whole process groups: no child is
// left, even one that ignores TERM; the jobs are recorded cancelled.
func TestE2ECancelOnSecondSignal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd, stdin, errOut := startGPD(t, dir, "--gpus", "0,1")
	io.WriteString(stdin, "sleep 300 & echo $! >> pids; echo $$ >> pids; wait\ntrap '' TERM; sleep 301 & echo $! >> pids; wait\n")
	pidText := waitForFile(t, filepath.Join(dir, "pids"), func(s string) bool { return len(strings.Fields(s)) == 3 })
	cmd.Process.Signal(syscall.SIGINT)
	time.Sleep(100 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	if statusOf(err) != 130 {
		t.Fatalf("exit %v, want 130\n%s", err, errOut)
	}
	for _, p := range strings.Fields(pidText) {
		pid, _ := strconv.Atoi(p)
		if sshtest.Running(pid) {
			t.Errorf("process %d is still running after the cancel", pid)
		}
	}
	events := journal(t, filepath.Join(dir, "gpudispatch-logs"))
	if n := count(events, "cancelled"); n != 2 {
		t.Errorf("%d jobs recorded cancelled, want 2", n)
	}
	// Why, in words: not Go's "context canceled".
	for _, e := range events {
		if why, _ := e["error"].(string); e["event"] == "cancelled" && (!strings.Contains(why, "cancelled by a second Ctrl-C or SIGTERM") || strings.Contains(why, "context canceled")) {
			t.Errorf("cancelled job's error: %q", why)
		}
	}
}

// A job past its time limit is killed with its whole group and recorded
// timeout; --timeout applies to jobs without their own timeout=.
func TestE2ETimeout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := gpd(t, dir, "[timeout=1s] sleep 300 & echo $! > pid1; wait\nsleep 301 & echo $! > pid2; wait\necho fine\n", "--gpus", "0,1", "--timeout", "2s")
	if r.code != 1 || !strings.Contains(r.stderr, "job 1 timed out") || !strings.Contains(r.stderr, "job 2 timed out") {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	for _, f := range []string{"pid1", "pid2"} {
		pid, _ := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(dir, f))))
		if sshtest.Running(pid) {
			t.Errorf("%s: process %d outlived its timeout", f, pid)
		}
	}
	if n := count(journal(t, filepath.Join(dir, "gpudispatch-logs")), "timeout"); n != 2 {
		t.Errorf("%d timeout events, want 2", n)
	}
}

// --hosts keeps only the hosts named.
func TestE2EHostsFilter(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "lab.yaml"), []byte("hosts:\n  - {name: one, local: true, gpus: 1}\n  - {name: two, local: true, gpus: 1}\n"), 0o644)
	r := gpd(t, dir, "a\nb\nc\n", "-i", "lab.yaml", "--hosts", "two", "--dry-run")
	if r.code != 0 || strings.Contains(r.stdout, "on one:") || strings.Count(r.stdout, "on two:0") != 3 {
		t.Errorf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = gpd(t, dir, "a\n", "-i", "lab.yaml", "--hosts", "three")
	if r.code != 2 || !strings.Contains(r.stderr, "--hosts: three is not a host of lab.yaml") {
		t.Errorf("exit %d\n%s", r.code, r.stderr)
	}
}

// simple_gpu_scheduler's spelling: GPU ids as separate words, then job files.
func TestE2EGPUsAsSeparateWords(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "jobs.txt"), []byte("echo $CUDA_VISIBLE_DEVICES\necho $CUDA_VISIBLE_DEVICES\n"), 0o644)
	r := gpd(t, dir, "", "--gpus", "3", "5", "jobs.txt")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	got := readFile(t, filepath.Join(dir, "gpudispatch-logs", "1.out")) + readFile(t, filepath.Join(dir, "gpudispatch-logs", "2.out"))
	if got != "3\n5\n" && got != "5\n3\n" {
		t.Errorf("jobs saw GPUs %q, want 3 and 5", got)
	}
}

// Two slots on GPU 0 (--gpus 0,0,1).
func TestE2ERepeatedGPUIsAnotherSlot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := gpd(t, dir, strings.Repeat("sleep 0.3\n", 3), "--gpus", "0,0,1", "--dry-run")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	want := "job 1 would run on localhost:0: sleep 0.3\njob 2 would run on localhost:1: sleep 0.3\njob 3 would run on localhost:0: sleep 0.3\n"
	if r.stdout != want {
		t.Errorf("dry run printed:\n%s\nwant:\n%s", r.stdout, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "gpudispatch-logs")); err == nil {
		t.Errorf("--dry-run created the log dir")
	}
}

// --dry-run takes a job's options as a run does: after= waits for the
// jobs it names (no "no job queued so far"), and a mem= job where the GPUs'
// memory can never be known (no nvidia-smi here) is rejected with the
// run's reason.
func TestE2EDryRunAfterAndMem(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := gpd(t, dir, "[name=prep_1] true\n[name=train after=prep_*] true\n[name=small mem=4G] true\n", "--gpus", "0", "--dry-run")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1 (one job rejected): %s", r.code, r.stderr)
	}
	for _, want := range []string{"job prep_1 would run on localhost:0: true\n", "job train would run on localhost:0 after prep_*: true\n",
		"job small rejected: mem=4G: no host it may use can tell its GPUs' memory: set memory_mb:"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("dry run does not say %q:\n%s%s", want, r.stdout, r.stderr)
		}
	}
}

// A flaky job runs again: [retries=1] gives a job that fails once a second
// attempt, with logs of its own, and the run succeeds; --retry-failed does
// the same for every line that does not say, and one that always fails
// fails the run after its last attempt.
func TestE2ERetryFailed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	flaky := "test -e flaky.mark || { touch flaky.mark; echo first; exit 3; }; echo second"
	r := gpd(t, dir, "[name=flaky retries=1] "+flaky+"\n", "--gpus", "0", "-o", "logs")
	if r.code != 0 || !strings.Contains(r.stderr, "job flaky queued again: attempt 1 failed: it exited 3; retry 1 of 1 (retries=1)") {
		t.Fatalf("exit %d, want 0 after a retry:\n%s", r.code, r.stderr)
	}
	if a, b := readFile(t, filepath.Join(dir, "logs", "flaky.out")), readFile(t, filepath.Join(dir, "logs", "flaky.2.out")); a != "first\n" || b != "second\n" {
		t.Errorf("attempts' logs %q and %q", a, b)
	}
	r = gpd(t, dir, "[name=always] exit 4\n", "--gpus", "0", "-o", "logs2", "--retry-failed", "2")
	if r.code != 1 || strings.Count(r.stderr, "job always queued again") != 2 {
		t.Errorf("exit %d, want 1 after three attempts:\n%s", r.code, r.stderr)
	}
}

func TestE2EInventory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "lab.yaml"), []byte(`defaults:
  env: { GREETING: "hello there" }
  workdir: ~/work
  setup: export FROM_SETUP=yes
hosts:
  - name: workstation
    local: true
    gpus: [0, 1]
`), 0o644)
	os.Mkdir(filepath.Join(dir, "work"), 0o755)
	r := gpd(t, dir, "echo \"$GREETING $FROM_SETUP $PWD $GPUDISPATCH_HOST\"\n", "-i", "lab.yaml")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	want := "hello there yes " + filepath.Join(dir, "work") + " workstation\n"
	if got := readFile(t, filepath.Join(dir, "gpudispatch-logs", "1.out")); got != want {
		t.Errorf("job printed %q, want %q", got, want)
	}
}

// gpus: auto, and no inventory at all, both ask nvidia-smi (here a fake
// one on gpudispatch's PATH, where local jobs would find it).
func TestE2EAutoGPUs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sshtest.NvidiaSMI(t, dir, "0, GPU-a, Fake, 100, 0, 0\n7, GPU-b, Fake, 100, 0, 0\n", "")
	os.WriteFile(filepath.Join(dir, "auto.yaml"), []byte("hosts:\n  - name: here\n    local: true\n    gpus: auto\n"), 0o644)
	for _, args := range [][]string{{"-i", "auto.yaml", "--dry-run"}, {"--dry-run"}} {
		r := gpd(t, dir, "a\nb\n", args...)
		if r.code != 0 || !strings.Contains(r.stdout, ":0: a") || !strings.Contains(r.stdout, ":7: b") {
			t.Errorf("%v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
}

func TestE2EUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("hosts:\n  - name: a\n    gpus: []\n"), 0o644)
	tests := []struct {
		args    []string
		env     string
		wantErr string
	}{
		{args: []string{"-i", "bad.yaml"}, wantErr: "bad.yaml:3: hosts[0].gpus: empty"},
		{args: []string{"-i", "missing.yaml"}, wantErr: "missing.yaml: no such file"},
		{args: []string{"--gpus", "0", "nosuchjobs.txt"}, wantErr: "job file: open nosuchjobs.txt: no such file"},
		{args: []string{"--gpus", "x"}, wantErr: `--gpus: "x" is not a GPU id`},
		{args: []string{"--gpus", "0", "-i", "bad.yaml"}, wantErr: "give one"},
		{args: []string{"--bogus"}, wantErr: "unknown flag: --bogus"},
		// No inventory, no --gpus and no nvidia-smi on PATH.
		{args: nil, env: "PATH=/usr/bin:/bin", wantErr: "no inventory and no nvidia-smi here: say which GPUs to use with --gpus"},
	}
	for _, tt := range tests {
		if tt.args == nil && hasNvidiaSMI() {
			t.Log("nvidia-smi is installed here: the no-GPU default cannot be tested")
			continue
		}
		cmd := exec.Command(binary, tt.args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "HOME="+dir, lockEnv(dir))
		if tt.env != "" {
			cmd.Env = append(cmd.Env, tt.env)
		}
		cmd.Stdin = strings.NewReader("echo hi\n")
		out, err := cmd.CombinedOutput()
		if statusOf(err) != 2 || !strings.Contains(string(out), tt.wantErr) {
			t.Errorf("%v: exit %v, output %q; want exit 2 and %q", tt.args, err, out, tt.wantErr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "gpudispatch-logs")); err == nil {
		t.Errorf("a failed start created the log dir")
	}
}

// Every flag can be given as GPUDISPATCH_<FLAG>.
func TestE2EFlagsFromEnvironment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command(binary)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GPUDISPATCH_GPUS=4", "GPUDISPATCH_LOG_DIR=elsewhere", lockEnv(dir))
	cmd.Stdin = strings.NewReader("echo $CUDA_VISIBLE_DEVICES\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got := readFile(t, filepath.Join(dir, "elsewhere", "1.out")); got != "4\n" {
		t.Errorf("got %q", got)
	}
}

// --json prints the journal's events on stdout; rejected lines name their
// line and the rest still run.
func TestE2EJSONAndRejectedLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := gpd(t, dir, "echo ok\n[gpus=2] echo too many\necho ok too\n", "--gpus", "0", "--json", "-q")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1 (a line was rejected)", r.code)
	}
	if !strings.Contains(r.stderr, "line 2: job 2 rejected: gpus=2: no host has that many GPUs") {
		t.Errorf("stderr:\n%s", r.stderr)
	}
	var kinds []string
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var e struct{ Event string }
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("stdout line %q: %v", line, err)
		}
		kinds = append(kinds, e.Event)
	}
	if strings.Count(strings.Join(kinds, " "), "finished") != 2 || !strings.Contains(strings.Join(kinds, " "), "rejected") {
		t.Errorf("events %v", kinds)
	}
}

// The examples (examples/, which the README and the manual point to) run
// as they are.
func TestE2EExamples(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := gpd(t, dir, readFile(t, "../../examples/cmds.txt"), "--gpus", "0,1,2")
	if r.code != 0 {
		t.Fatalf("examples/cmds.txt: exit %d\n%s", r.code, r.stderr)
	}
	abs, _ := filepath.Abs("../../examples/local.yaml")
	r = gpd(t, dir, readFile(t, "../../examples/cmds.txt"), "--inventory", abs, "-o", "logs2")
	if r.code != 0 {
		t.Fatalf("examples/local.yaml: exit %d\n%s", r.code, r.stderr)
	}
	queue := exec.Command("bash", "../../examples/queue.sh")
	queue.Env = append(os.Environ(), "GPUDISPATCH="+binary, "HOME="+dir, lockEnv(dir), "TMPDIR="+dir)
	out, err := queue.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "gpudispatch: 9 jobs: 9 succeeded") || !strings.HasPrefix(string(out), "urgent\n") {
		t.Fatalf("examples/queue.sh: %v\n%s", err, out)
	}
}

func TestE2EVersion(t *testing.T) {
	t.Parallel()
	r := gpd(t, t.TempDir(), "", "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "gpudispatch ") {
		t.Errorf("version: %+v", r)
	}
}

// gpudispatch killed outright mid-run: the journal is whole lines, and
// --resume with the same (here reordered) job file completes the rest, so
// that every job succeeds exactly once. Jobs count their runs in files.
//
// The kill lands while jobs 6-8 are in a sleep: with three slots, by then
// jobs 0-5 have ended and been journaled (a slot is reused only after its
// last job's record is written). Jobs 6-8 run on without their coordinator;
// the resumed run re-adopts them (it does not run them again) and records
// their ends.
func TestE2EKilledThenResume(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	logJournalOnFailure(t, filepath.Join(dir, "gpudispatch-logs"))
	var jobs []string
	for i := 0; i < 30; i++ {
		nap := ""
		if i >= 6 && i <= 8 {
			nap = "sleep 3; "
		}
		jobs = append(jobs, fmt.Sprintf("echo >> started.%d; %secho done >> ran.%d", i, nap, i))
	}
	os.WriteFile(filepath.Join(dir, "jobs.txt"), []byte(strings.Join(jobs, "\n")+"\n"), 0o644)
	cmd := exec.Command(binary, "--gpus", "0,1,2", "--keepalive", "200ms", "jobs.txt")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, lockEnv(dir)) // as gpd's
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 6; i <= 8; i++ {
		waitForFile(t, filepath.Join(dir, fmt.Sprintf("started.%d", i)), func(string) bool { return true })
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	wholeJournal(t, filepath.Join(dir, "gpudispatch-logs"))

	for i, j := 0, len(jobs)-1; i < j; i, j = i+1, j-1 {
		jobs[i], jobs[j] = jobs[j], jobs[i]
	}
	os.WriteFile(filepath.Join(dir, "jobs.txt"), []byte(strings.Join(jobs, "\n")+"\n"), 0o644)
	// The killed run's GPU locks are kept while its jobs run on: the
	// resumed run waits for them, trying again every 300 ms.
	r := gpd(t, dir, "", "--gpus", "0,1,2", "--resume", "--busy-recheck", "300ms", "jobs.txt")
	if r.code != 0 {
		t.Fatalf("resume: exit %d\n%s", r.code, r.stderr)
	}
	readopted := 0
	for _, e := range journal(t, filepath.Join(dir, "gpudispatch-logs")) {
		if msg, _ := e["message"].(string); e["event"] == "started" && strings.HasPrefix(msg, "re-adopted") {
			readopted++
		}
	}
	if readopted != 3 {
		t.Errorf("%d attempts re-adopted, want jobs 6-8's", readopted)
	}
	for i := range jobs {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("ran.%d", i)))
		if err != nil || string(b) != "done\n" {
			t.Errorf("job %d ran %d times, want exactly once", i, strings.Count(string(b), "done"))
		}
	}
}

// SIGHUP (a closed terminal or ssh session) does not stop a run.
func TestE2ESIGHUPIgnored(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd, stdin, errOut := startGPD(t, dir, "--gpus", "0")
	io.WriteString(stdin, "echo started > started; sleep 0.5; echo done > done\n")
	waitForFile(t, filepath.Join(dir, "started"), func(string) bool { return true })
	cmd.Process.Signal(syscall.SIGHUP)
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit %v after SIGHUP\n%s", err, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "done")); err != nil {
		t.Errorf("the job did not finish: %v", err)
	}
}

// sweep's lines, run by gpudispatch, give each job its values unchanged,
// whatever shell characters they hold; the same seed prints the same lines.
func TestE2ESweep(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	args := []string{"sweep", `printf '%s|%s\n' {v} {n} >> values`, "-p", "v", "a b", "it's", "$HOME", `"q"`, "-p", "n", "1", "-2", "--seed", "5"}
	sw := gpd(t, dir, "", args...)
	if sw.code != 0 || strings.Count(sw.stdout, "\n") != 8 {
		t.Fatalf("sweep: exit %d, %q\n%s", sw.code, sw.stdout, sw.stderr)
	}
	if again := gpd(t, dir, "", args...); again.stdout != sw.stdout {
		t.Errorf("--seed 5 twice:\n%s\n%s", sw.stdout, again.stdout)
	}
	r := gpd(t, dir, sw.stdout, "--gpus", "0,1")
	if r.code != 0 {
		t.Fatalf("running the sweep: exit %d\n%s", r.code, r.stderr)
	}
	got := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(dir, "values"))), "\n")
	sort.Strings(got)
	want := []string{`"q"|-2`, `"q"|1`, "$HOME|-2", "$HOME|1", "a b|-2", "a b|1", "it's|-2", "it's|1"}
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("values the jobs saw:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r := gpd(t, dir, "", "sweep", "x {lr}", "-p", "bs", "1"); r.code != 2 || !strings.Contains(r.stderr, "{lr} has no -p lr") {
		t.Errorf("placeholder without -p: exit %d, %s", r.code, r.stderr)
	}
}

// status reads the journal of a run that is going on, and of one that ended.
func TestE2EStatus(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if r := gpd(t, dir, "", "status"); r.code != 2 || !strings.Contains(r.stderr, "no journal in gpudispatch-logs") {
		t.Errorf("status without a journal: exit %d, %s", r.code, r.stderr)
	}
	cmd, stdin, _ := startGPD(t, dir, "--gpus", "0,1", "-o", "logs")
	io.WriteString(stdin, "echo ok\nexit 3\n[name=long] touch started; sleep 30\n@nowhere true\n")
	waitForFile(t, filepath.Join(dir, "started"), func(string) bool { return true })
	waitJournal(t, filepath.Join(dir, "logs"), func(ev []map[string]any) bool {
		return count(ev, "finished") == 1 && count(ev, "failed") == 1 && count(ev, "rejected") == 1
	})
	r := gpd(t, dir, "", "status", "logs")
	if r.code != 1 || !regexpMatch(`(?m)^long\s+running\s+localhost:\d\s+1\s+-\s+\S+\s+touch started; sleep 30\s+logs/long.out$`, r.stdout) {
		t.Errorf("status while a job runs: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	stdin.Close()
	cmd.Process.Signal(syscall.SIGINT)
	time.Sleep(100 * time.Millisecond) // two signals at once would be one
	cmd.Process.Signal(syscall.SIGINT)
	cmd.Wait()

	r = gpd(t, dir, "", "status", "logs")
	for _, want := range []string{
		`(?m)^1\s+succeeded\s+localhost:\d\s+1\s+0\s+\S+\s+echo ok\s+logs/1.out$`,
		`(?m)^2\s+failed\s+localhost:\d\s+1\s+3\s+\S+\s+exit 3\s+logs/2.err$`,
		`(?m)^long\s+cancelled\s+localhost:\d\s+1\s+`,
		`(?m)^4\s+rejected\s+-\s+0\s+-\s+-\s+true\s+unknown host "nowhere"`,
		`(?m)^4 jobs: 1 succeeded, 1 failed, 1 cancelled, 1 rejected$`,
	} {
		if !regexpMatch(want, r.stdout) {
			t.Errorf("status after the run: no line like %s in\n%s", want, r.stdout)
		}
	}
	r = gpd(t, dir, "", "status", "--failed", "--json", "logs")
	var jobs []string
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var j struct{ Job, State string }
		if err := json.Unmarshal([]byte(line), &j); err != nil {
			t.Fatalf("status --json line %q: %v", line, err)
		}
		jobs = append(jobs, j.Job+":"+j.State)
	}
	if r.code != 1 || strings.Join(jobs, " ") != "2:failed long:cancelled 4:rejected" {
		t.Errorf("status --failed --json: exit %d, %v", r.code, jobs)
	}
	ok := t.TempDir()
	gpd(t, ok, "true\n", "--gpus", "0")
	if r := gpd(t, ok, "", "status"); r.code != 0 {
		t.Errorf("status of a run that succeeded: exit %d\n%s", r.code, r.stdout)
	}
}

// The shells' completion scripts ask "gpudispatch __complete ARGS": --hosts
// completes with the inventory's host names.
func TestE2ECompletion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	inv := filepath.Join(dir, "lab.yaml")
	os.WriteFile(inv, []byte("ssh_config: none\nhosts:\n  - {name: alpha, local: true, gpus: 1}\n  - {name: beta, local: true, gpus: 1}\n"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"__complete", "-i", inv, "--hosts", ""}, "alpha\nbeta\n"},
		{[]string{"__complete", "hosts", "--inventory", inv, "--hosts", "beta,"}, "beta,alpha\n"},
		{[]string{"__complete", "run", "--hosts", "a"}, ""}, // no inventory here: nothing to offer
	} {
		r := gpd(t, dir, "", tc.args...)
		names, _, _ := strings.Cut(r.stdout, ":")
		if r.code != 0 || names != tc.want {
			t.Errorf("%q: exit %d, %q; want %q", tc.args, r.code, names, tc.want)
		}
	}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		if r := gpd(t, dir, "", "completion", shell); r.code != 0 || !strings.Contains(r.stdout, "__complete") {
			t.Errorf("completion %s: exit %d\n%.200s", shell, r.code, r.stdout)
		}
	}
}

// Local jobs run with the caller's environment as it is, as xargs runs
// them: a venv activated in the terminal stays first on PATH even where
// the login profile resets PATH (as Debian's /etc/profile does), and no
// profile is read for them.
func TestE2ELocalJobsKeepTheCallersEnvironment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	venv := makeVenv(t, dir)
	os.WriteFile(filepath.Join(dir, ".bash_profile"), []byte("echo read >> ~/reads\nPATH=/usr/bin:/bin\n"), 0o644)
	// What "source venv/bin/activate" does to the environment.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+dir, "VIRTUAL_ENV="+venv, "PATH="+filepath.Join(venv, "bin")+":"+os.Getenv("PATH"))
	cmd, stdin, errOut := startGPDEnv(t, dir, env, "--gpus", "0,1", "-o", "logs")
	io.WriteString(stdin, "command -v python; python -c 'import sys; print(sys.prefix)'\n")
	stdin.Close()
	if err := waitExit(t, cmd, errOut, 30*time.Second); err != nil {
		t.Fatalf("exit %v\n%s", err, errOut)
	}
	if got, want := readFile(t, filepath.Join(dir, "logs", "1.out")), filepath.Join(venv, "bin", "python")+"\n"+venv+"\n"; got != want {
		t.Errorf("the job ran %q, want the venv's python: %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "reads")); err == nil {
		t.Error("a login profile was read, for a local run")
	}
}

// makeVenv makes a real venv in dir (python3 -m venv, without pip) and
// returns its path.
func makeVenv(t *testing.T, dir string) string {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		sshtest.Missing(t, "GPUDISPATCH_REQUIRE_PYTHON", "no python3 here to make a venv (apt-get install python3)")
	}
	venv := filepath.Join(dir, "venv")
	if out, err := exec.Command("python3", "-m", "venv", "--without-pip", venv).CombinedOutput(); err != nil {
		t.Fatalf("python3 -m venv: %v\n%s", err, out)
	}
	return venv
}

// A job that submit adds to a local serve runs with that submit's
// environment (its activated venv), not serve's.
func TestE2ESubmitCarriesItsEnvironment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	venv := makeVenv(t, dir)
	serve, _, errOut := startGPDEnv(t, dir, append(os.Environ(), "HOME="+dir, "SAME=in-both"), "serve", "--gpus", "0", "-o", "logs")
	waitServing(t, dir, errOut)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	submit := exec.Command(binary, "submit", "-o", "logs", "--wait", "--", "python -c 'import sys; print(sys.prefix)'; echo $MARK")
	submit.Dir = dir
	submit.Env = append(env, "HOME="+dir, "SAME=in-both", "VIRTUAL_ENV="+venv, "MARK=from-submit", "PATH="+filepath.Join(venv, "bin")+":"+os.Getenv("PATH"))
	if out, err := submit.CombinedOutput(); err != nil {
		t.Fatalf("submit: %v\n%s\n%s", err, out, errOut)
	}
	if got, want := readFile(t, filepath.Join(dir, "logs", "1.out")), venv+"\nfrom-submit\n"; got != want {
		t.Errorf("the job printed %q, want the submitter's venv and variable: %q", got, want)
	}
	// The journal, which a group may be let read, holds none of it; a
	// file of the user's alone keeps what differs from serve's
	// environment, no more.
	if j := readFile(t, filepath.Join(dir, "logs", "journal.jsonl")); strings.Contains(j, "MARK=from-submit") || !strings.Contains(j, `"env_file":"`) {
		t.Errorf("the journal holds the submitter's environment, or names no file of it:\n%s", j)
	}
	kept, _ := filepath.Glob(filepath.Join(dir, "logs", ".env", "*"))
	if len(kept) != 1 {
		t.Fatalf("kept environments: %v; want one", kept)
	}
	if env := readFile(t, kept[0]); !strings.Contains(env, "MARK=from-submit") || strings.Contains(env, "SAME=in-both") {
		t.Errorf("the kept environment is not just what differs from serve's: %q", env)
	}
	for p, want := range map[string]os.FileMode{kept[0]: 0o600, filepath.Dir(kept[0]): 0o700} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, %v; want mode %v", p, fi.Mode(), err, want)
		}
	}
	gpd(t, dir, "", "stop", "-o", "logs")
	serve.Wait()
}

// ID.N.out is attempt N of job ID for the life of the log dir: a line added
// on top and --resume, or another run into the same log dir, never moves an
// id to another job; status sums up the latest run (with the runs it
// resumed), and says when no coordinator is left for jobs it shows running.
func TestE2ELogNamesAndLatestRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	logs := filepath.Join(dir, "gpudispatch-logs")
	r := gpd(t, dir, "echo one\necho two\nexit 1\n", "--gpus", "0")
	if r.code != 1 {
		t.Fatalf("first run: exit %d\n%s", r.code, r.stderr)
	}
	r = gpd(t, dir, "echo zero\necho one\necho two\nexit 1\n", "--gpus", "0", "--resume")
	if r.code != 1 || !strings.Contains(r.stderr, "job 3 failed") {
		t.Fatalf("resumed run: exit %d\n%s", r.code, r.stderr)
	}
	for name, want := range map[string]string{"1.out": "one\n", "2.out": "two\n", "4.out": "zero\n", "3.2.out": ""} {
		if got := readFile(t, filepath.Join(logs, name)); got != want {
			t.Errorf("%s holds %q, want %q", name, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(logs, "1.2.out")); err == nil {
		t.Errorf("1.2.out exists: job 1 (echo one) succeeded and did not run again")
	}
	r = gpd(t, dir, "", "status")
	if r.code != 1 || !regexpMatch(`(?m)^4 jobs: 3 succeeded, 1 failed$`, r.stdout) || strings.Count(r.stdout, "\n3 ") != 1 {
		t.Errorf("status of the resumed run: exit %d\n%s", r.code, r.stdout)
	}

	// Another run into the same log dir, afresh: its job is number 5, and
	// status is about it alone.
	if r = gpd(t, dir, "echo again\n", "--gpus", "0"); r.code != 0 {
		t.Fatalf("second run: exit %d\n%s", r.code, r.stderr)
	}
	if got := readFile(t, filepath.Join(logs, "5.out")); got != "again\n" {
		t.Errorf("5.out holds %q", got)
	}
	r = gpd(t, dir, "", "status")
	if r.code != 0 || !regexpMatch(`(?m)^1 job: 1 succeeded$`, r.stdout) || !strings.Contains(r.stderr, "4 jobs of earlier runs") {
		t.Errorf("status of the latest run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = gpd(t, dir, "", "status", "--all"); r.code != 1 || !regexpMatch(`(?m)^5 jobs: 4 succeeded, 1 failed$`, r.stdout) {
		t.Errorf("status --all: exit %d\n%s", r.code, r.stdout)
	}

	// A coordinator killed mid-job: status says no one is there.
	cmd, stdin, _ := startGPD(t, dir, "--gpus", "0")
	io.WriteString(stdin, "touch started; sleep 30\n")
	waitForFile(t, filepath.Join(dir, "started"), func(string) bool { return true })
	r = gpd(t, dir, "", "status")
	if strings.Contains(r.stderr, "no gpudispatch is running") {
		t.Errorf("status of a live run says no coordinator:\n%s", r.stderr)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	r = gpd(t, dir, "", "status")
	if !regexpMatch(`(?m)^6\s+running\s`, r.stdout) || !strings.Contains(r.stderr, "no gpudispatch is running on gpudispatch-logs: the 1 job shown running or waiting lost their coordinator") ||
		!strings.Contains(r.stderr, "--resume -o gpudispatch-logs") {
		t.Errorf("status after the coordinator was killed:\n%s%s", r.stdout, r.stderr)
	}
}

// A sweep value with a space, in a name= of its template's prefix: the line
// sweep writes parses, is rejected for its name with its line number, and
// never runs as a command.
func TestE2EBadPrefixNeverRuns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := gpd(t, dir, "", "sweep", "[name=lr{lr}_{opt}] echo {opt} >> ran", "-p", "lr", "1e-2", "-p", "opt", "adam", "sgd nesterov", "--ordered")
	if r.code != 0 || !strings.Contains(r.stdout, `[name=lr1e-2_'sgd nesterov']`) {
		t.Fatalf("sweep: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = gpd(t, dir, r.stdout+"[gpus=1 echo unclosed >> ran\n", "--gpus", "0")
	if r.code != 1 || !strings.Contains(r.stderr, "line 2: job 2 rejected: [name=lr1e-2_sgd nesterov]: a name is letters") ||
		!strings.Contains(r.stderr, "line 3: job 3 rejected: no closing ]") {
		t.Errorf("run: exit %d\n%s", r.code, r.stderr)
	}
	if got := readFile(t, filepath.Join(dir, "ran")); got != "adam\n" {
		t.Errorf("jobs ran %q, want only adam's", got)
	}
	if out := readFile(t, filepath.Join(dir, "gpudispatch-logs", "journal.jsonl")); strings.Contains(out, "command not found") {
		t.Errorf("a prefix ran as a command:\n%s", out)
	}
}

// A run that finds its GPU locked by another run starts its job as soon as
// that run lets go of it, not at its next look (--busy-recheck, here a
// minute away).
func TestE2ELockedGPUTakenAsSoonAsFree(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, stdin, errA := startGPDEnv(t, dir, append(os.Environ(), "HOME="+dir), "--gpus", "0", "-o", "a")
	io.WriteString(stdin, "sleep 2\n")
	stdin.Close()
	waitForFile(t, filepath.Join(dir, "a", "journal.jsonl"), func(s string) bool { return strings.Contains(s, `"event":"started"`) })
	start := time.Now()
	r := gpd(t, dir, "echo second\n", "--gpus", "0", "-o", "b", "--busy-recheck", "60s")
	took := time.Since(start)
	if r.code != 0 || readFile(t, filepath.Join(dir, "b", "1.out")) != "second\n" {
		t.Fatalf("second run: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "is locked by another gpudispatch run") {
		t.Errorf("the second run never found GPU 0 locked:\n%s", r.stderr)
	}
	if took > 30*time.Second {
		t.Errorf("the second run took %v: it waited for --busy-recheck, not for the lock to go\n%s", took, r.stderr)
	}
	if err := waitExit(t, first, errA, 30*time.Second); err != nil {
		t.Errorf("first run: %v\n%s", err, errA)
	}
}

// A job file with no job line (empty, or comments only) is nothing to do:
// said so, exit 0, and neither a log dir nor a host is made or asked.
func TestE2EEmptyJobFileMakesNoLogDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "empty.txt"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "comments.txt"), []byte("# lr sweep, to do\n\n"), 0o644)
	r := gpd(t, dir, "", "--gpus", "0", "empty.txt", "comments.txt")
	if r.code != 0 || !strings.Contains(r.stderr, "gpudispatch: 0 jobs: nothing to do (no job line in empty.txt, comments.txt)") {
		t.Errorf("exit %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "gpudispatch-logs")); err == nil {
		t.Error("a log dir was made for no job")
	}
}
