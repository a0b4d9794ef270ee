package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// Two runs started with the same -o: the second exits 2 naming the first,
// which runs on, and the journal reads line by line.
func TestE2ETwoRunsOneLogDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, stdin, _ := startGPD(t, dir, "--gpus", "0", "-o", "logs")
	fmt.Fprintln(stdin, "echo first")
	waitForFile(t, filepath.Join(dir, "logs", "1.out"), func(s string) bool { return s == "first\n" })
	r := gpd(t, dir, "echo second\n", "--gpus", "1", "-o", "logs")
	want := fmt.Sprintf("is in use by another gpudispatch (pid %d on ", first.Process.Pid)
	if r.code != 2 || !strings.Contains(r.stderr, want) {
		t.Errorf("second run: exit %d, %q; want 2 and %q", r.code, r.stderr, want)
	}
	fmt.Fprintln(stdin, "echo more")
	stdin.Close()
	if err := first.Wait(); err != nil {
		t.Fatalf("first run: %v", err)
	}
	events := wholeJournal(t, filepath.Join(dir, "logs"))
	if count(events, "finished") != 2 || count(events, "queued") != 2 {
		t.Errorf("journal: %v, want the first run's two jobs only", events)
	}
}

// A journal whose middle line is damaged: status and --resume read the
// rest, naming the line.
func TestE2EDamagedJournal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if r := gpd(t, dir, "echo a\necho b\nexit 3\n", "--gpus", "0", "-o", "logs"); r.code != 1 {
		t.Fatalf("first run: exit %d: %s", r.code, r.stderr)
	}
	path := filepath.Join(dir, "logs", "journal.jsonl")
	lines := strings.SplitAfter(readFile(t, path), "\n")
	// Job 1's finished line, torn by a second writer in the middle.
	n := 0
	for n < len(lines) && !strings.Contains(lines[n], `"event":"finished","run"`) {
		n++
	}
	lines[n] = lines[n][:len(lines[n])/2] + lines[n+1]
	os.WriteFile(path, []byte(strings.Join(lines, "")), 0o644)
	where := fmt.Sprintf("journal.jsonl:%d: ", n+1)
	r := gpd(t, dir, "", "status", "logs")
	if r.code != 1 || !strings.Contains(r.stderr, where) || !strings.Contains(r.stdout, "3 jobs: ") {
		t.Errorf("status: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Job 1's success is lost with its line: --resume runs it again, and
	// skips job 2.
	r = gpd(t, dir, "echo a\necho b\n", "--gpus", "0", "-o", "logs", "--resume")
	if r.code != 0 || !strings.Contains(r.stderr, "warning: --resume: ") || !strings.Contains(r.stderr, where) || !strings.Contains(r.stderr, "1 succeeded, 1 skipped") {
		t.Errorf("--resume: exit %d\n%s", r.code, r.stderr)
	}
}

// Over the real-sshd lab: a lock dir that mallory could redirect leaves the
// hosts out, saying why; in a safe one, her link and FIFO where the run's
// locks of GPU 0 go make GPU 0 look busy, the jobs run on GPU 1, her target
// stays as it was and her innocent process lives.
func TestSSHHostileLocks(t *testing.T) {
	m := sshtest.NewUser(t, "gpdmallory")
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 2})
	shared := sshtest.SharedDir(t)
	os.Chmod(shared, 0o777|os.ModeSticky) // as /tmp is
	target := filepath.Join(l.Dir, "precious")
	os.WriteFile(target, []byte("mine\n"), 0o644)
	innocent := exec.Command("sleep", "60")
	if err := innocent.Start(); err != nil {
		t.Fatal(err)
	}
	defer innocent.Process.Kill()
	inv := l.Inventory("")
	hostile := filepath.Join(shared, "gpd-locks")
	as := func(script string) {
		t.Helper()
		if out, err := m.Command("/", "bash", "-c", script).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	as(fmt.Sprintf("mkdir -m 0777 %s", hostile))
	r := labRun(t, l, "echo hi\n", "-i", inv, "--lock-dir", hostile)
	if r.code != 2 || !strings.Contains(r.stderr, "no host can be used") || !strings.Contains(r.stderr, hostile+" is owned by gpdmallory with mode drwxrwxrwx") {
		t.Errorf("a hostile lock dir: exit %d\n%s", r.code, r.stderr)
	}
	safe := filepath.Join(shared, "safe")
	os.Mkdir(safe, 0o777)
	os.Chmod(safe, 0o777|os.ModeSticky)
	me := strconv.Itoa(os.Geteuid())
	for i, h := range l.Hosts {
		entry := filepath.Join(safe, "gpudispatch-gpu-"+h.UUID(0)+"."+me)
		if i == 0 {
			as("ln -s " + target + " " + entry)
		} else {
			as("mkfifo " + entry)
		}
		// A record of mallory's naming the innocent process as the run's.
		as(fmt.Sprintf("mkdir %s/gpudispatch-held-%s~%d~x~y~1", safe, h.UUID(0), innocent.Process.Pid))
	}
	jobs := strings.Repeat("echo $CUDA_VISIBLE_DEVICES\n", 6)
	r = labRun(t, l, jobs, "-i", inv, "--lock-dir", safe, "--busy-recheck", "1h", "-o", "logs")
	if r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	for i := 1; i <= 6; i++ {
		if got := readFile(t, filepath.Join(l.Dir, "logs", strconv.Itoa(i)+".out")); got != "1\n" {
			t.Errorf("job %d ran on GPU %q, want 1", i, got)
		}
	}
	if !strings.Contains(r.stderr, "is in the place of a lock directory") {
		t.Errorf("the run never said why GPU 0 is set aside:\n%s", r.stderr)
	}
	if b, _ := os.ReadFile(target); string(b) != "mine\n" {
		t.Errorf("the target is now %q", b)
	}
	if !sshtest.Running(innocent.Process.Pid) {
		t.Error("an innocent process was killed")
	}
}
