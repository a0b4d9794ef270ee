package main

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// exclusiveJob proves by its side effects that it had its GPU to itself:
// it makes a directory named after its host's GPU for its whole run, and a
// job that finds the directory there already (another job on that GPU)
// writes a line to ~/collisions. It then appends "ID GPU" to ~/done.
const exclusiveJob = `d=$HOME/on-gpu.$CUDA_VISIBLE_DEVICES; if mkdir "$d" 2>/dev/null; then sleep %s; rmdir "$d"; else echo "$GPUDISPATCH_JOB_ID $CUDA_VISIBLE_DEVICES" >> $HOME/collisions; fi; echo "$GPUDISPATCH_JOB_ID $CUDA_VISIBLE_DEVICES" >> $HOME/done`

// noCollisions fails t when a job of the lab found its GPU taken, and
// returns the lines of every host's ~/done.
func noCollisions(t *testing.T, l *sshtest.Lab) map[string][]string {
	t.Helper()
	done := map[string][]string{}
	for _, h := range l.Hosts {
		if b, err := os.ReadFile(filepath.Join(h.Home, "collisions")); err == nil {
			t.Errorf("%s: jobs that shared a GPU:\n%s", h.Name, b)
		}
		if b, err := os.ReadFile(filepath.Join(h.Home, "done")); err == nil {
			done[h.Name] = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		}
	}
	return done
}

// Two gpudispatch runs started at the same moment on the same hosts never
// put two jobs on one GPU: the second finds the GPUs the first holds
// locked, its jobs wait without using an attempt, and every job of both
// runs is done in the end.
func TestSSHTwoRunsNeverShareAGPU(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 2})
	inv := l.Inventory("")
	job := fmt.Sprintf(exclusiveJob, "0.3")
	results := make([]result, 2)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			results[i] = labRun(t, l, strings.Repeat(job+"\n", 10), "-i", inv, "-o", fmt.Sprintf("logs%d", i), "--busy-recheck", "200ms")
		})
	}
	wg.Wait()
	for i, r := range results {
		if r.code != 0 {
			t.Errorf("run %d: exit %d\n%s", i, r.code, r.stderr)
		}
	}
	done := noCollisions(t, l)
	if n := len(done["node1"]) + len(done["node2"]); n != 20 {
		t.Errorf("%d jobs done, want 20: %v", n, done)
	}
	waited := 0
	for i := range results {
		for _, e := range journal(t, filepath.Join(l.Dir, fmt.Sprintf("logs%d", i))) {
			switch {
			case e["event"] == "gpu_busy":
				waited++
				if !strings.Contains(fmt.Sprint(e["error"]), "locked by another gpudispatch run") {
					t.Errorf("gpu_busy %v", e)
				}
			case e["event"] == "started" && e["attempt"] != 1.0:
				t.Errorf("a job that found its GPU locked used an attempt: %v", e)
			}
		}
	}
	if waited == 0 {
		t.Error("no job of either run ever found a GPU locked: the runs did not contend, the test proves nothing")
	}
	// Both hosts' GPUs, by UUID, in the one lock dir they share here: one
	// lock directory per GPU and user.
	if locks, _ := filepath.Glob(filepath.Join(l.Dir, ".locks", "gpudispatch-gpu-GPU-*")); len(locks) != 4 {
		t.Errorf("locks %v, want one per GPU, named by UUID", locks)
	}
}

// Two runs want one host's two GPUs: the second, started while the first
// holds both with a queue of jobs behind, gets one as soon as one of the
// first run's jobs ends after it asked (fair share), not once the first
// run's queue is empty; nothing running is stopped, no GPU is shared.
func TestSSHTwoRunsShareAHost(t *testing.T) {
	t.Parallel()
	a, b := twoRunsOnAHost(t)
	if !b[0].Before(a[9]) {
		t.Errorf("the second run's first job started at %v, after the first run's last (%v): no share", b[0].Format("15:04:05.000"), a[9].Format("15:04:05.000"))
	}
}

// A run with --no-share keeps the GPUs it frees, as before fair share: the
// second run gets one only once the first run's queue is empty.
func TestSSHNoShare(t *testing.T) {
	t.Parallel()
	a, b := twoRunsOnAHost(t, "--no-share")
	if b[0].Before(a[9]) {
		t.Errorf("the second run's first job started at %v, before the first run's last (%v): the first run shared", b[0].Format("15:04:05.000"), a[9].Format("15:04:05.000"))
	}
}

// Two people share a host: the tests' user's run holds both GPUs with a
// queue behind, and Bob (a second Unix user, logging in as himself)
// starts one, both with a lock dir as the manual recommends for that
// (root's, mode 1777). Bob's first job starts as soon as one of the first
// run's jobs ends after he asked, not once that queue is done; no GPU
// ever runs two jobs, whoever's.
func TestSSHTwoUsersShareAHost(t *testing.T) {
	t.Parallel()
	bob := sshtest.NewUser(t, "gpdbob")
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 2, Users: []sshtest.User{bob}})
	locks, marks := sshtest.SharedDir(t), sshtest.SharedDir(t)
	for _, d := range []string{locks, marks} {
		os.Chmod(d, 0o777|os.ModeSticky)
	}
	job := fmt.Sprintf(`d=%[1]s/on-gpu.$CUDA_VISIBLE_DEVICES; if mkdir "$d"; then sleep 1; rmdir "$d"; else echo "$USER $CUDA_VISIBLE_DEVICES" >> %[1]s/collisions; fi; id -un`, marks) + "\n"
	inv := l.Inventory("")
	bobInv := filepath.Join(l.Dir, "bob.yaml")
	if err := os.WriteFile(bobInv, []byte(strings.ReplaceAll(readFile(t, inv), "    gpus: auto\n", "    gpus: auto\n    user: gpdbob\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := labCmd(t, l, "", "-i", inv, "-o", "logsA", "--busy-recheck", "200ms", "--lock-dir", locks)
	stdin, errOut := startCmd(t, cmd)
	io.WriteString(stdin, strings.Repeat(job, 10))
	stdin.Close()
	waitForFile(t, filepath.Join(l.Dir, "logsA", "2.out"), func(string) bool { return true })
	logJournalOnFailure(t, filepath.Join(l.Dir, "logsB"))
	second := labRun(t, l, strings.Repeat(job, 4), "-i", bobInv, "-o", "logsB", "--busy-recheck", "200ms", "--lock-dir", locks)
	if err := waitExit(t, cmd, errOut, time.Minute); err != nil || second.code != 0 {
		t.Fatalf("runs: %v; exit %d\n%s", err, second.code, second.stderr)
	}
	if b, err := os.ReadFile(filepath.Join(marks, "collisions")); err == nil {
		t.Errorf("jobs that shared a GPU:\n%s", b)
	}
	if who := strings.TrimSpace(readFile(t, filepath.Join(l.Dir, "logsB", "1.out"))); who != "gpdbob" {
		t.Fatalf("Bob's job ran as %q", who)
	}
	a, b := jobStarts(t, l, "logsA"), jobStarts(t, l, "logsB")
	if len(a) != 10 || len(b) != 4 {
		t.Fatalf("%d and %d starts, want 10 and 4", len(a), len(b))
	}
	if !b[0].Before(a[9]) {
		t.Errorf("Bob's first job started at %v, after the other user's last (%v): no share", b[0].Format("15:04:05.000"), a[9].Format("15:04:05.000"))
	}
}

// --max-gpus caps the GPUs a run keeps busy over the whole lab, and so
// does the inventory's max_gpus: on two hosts of two GPUs, three at most
// run jobs at once, and three do.
func TestSSHMaxGPUs(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 2})
	for _, c := range []struct {
		name string
		args []string
	}{
		{"flag", []string{"-i", l.Inventory(""), "--max-gpus", "3"}},
		{"inventory", []string{"-i", l.Inventory("max_gpus: 3")}},
	} {
		logs := "logs-" + c.name
		r := labRun(t, l, strings.Repeat(timedJob+"\n", 12), append(c.args, "-o", logs)...)
		if r.code != 0 {
			t.Fatalf("%s: exit %d\n%s", c.name, r.code, r.stderr)
		}
		if p := peak(t, spans(t, filepath.Join(l.Dir, logs), 12)); p != 3 {
			t.Errorf("%s: %d jobs ran at once, want 3", c.name, p)
		}
	}
}

// A forged record of waiting, another user's (mallory's: a live process
// of hers, and ten records naming runs of their own), costs a run no more
// than an equal share: on a host of two GPUs the run keeps one busy, not
// none, once its holder has looked (it starts on both: nothing running is
// stopped), and runs every job.
func TestSSHForgedDemandCostsAnEqualShare(t *testing.T) {
	t.Parallel()
	m := sshtest.NewUser(t, "gpdmallory")
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 2})
	locks := sshtest.SharedDir(t)
	os.Chmod(locks, 0o777|os.ModeSticky)
	forge := fmt.Sprintf(`sleep 60 >/dev/null 2>&1 & for k in 1 2 3 4 5 6 7 8 9 10; do mkdir -m 755 %s/gpudispatch-want-%s~$!~fake$k~evil; done`, locks, l.Hosts[0].UUID(0))
	if out, err := m.Command("/", "bash", "-c", forge).CombinedOutput(); err != nil {
		t.Fatalf("as mallory: %v: %s", err, out)
	}
	r := labRun(t, l, strings.Repeat(timedJob+"\n", 16), "-i", l.Inventory(""), "-o", "logs", "--lock-dir", locks)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	// From 2.5 s on: the holder looks once a second, later on a loaded
	// machine.
	ss := spans(t, filepath.Join(l.Dir, "logs"), 16)
	first := slices.MinFunc(ss, func(a, b span) int { return cmp.Compare(a.start, b.start) }).start
	later := slices.DeleteFunc(ss, func(s span) bool { return s.start < first+int64(2500*time.Millisecond) })
	if p := peak(t, later); len(later) < 3 || p != 1 {
		t.Errorf("%d jobs ran at once beside mallory's forged demand, from 2.5 s on (%d jobs), want 1 (an equal share of 2)", p, len(later))
	}
}

// A run that waits for a host's GPUs is named by hosts, with its user; its
// coordinator killed, it takes its demand with it: its lock holder,
// hearing it no more, removes the run's record of waiting, and the run
// that holds the GPUs keeps them all again.
func TestSSHKilledWaiterLeavesNoDemand(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 2})
	inv := l.Inventory("")
	holder := labCmd(t, l, "", "-i", inv, "-o", "logsA")
	stdin, errOut := startCmd(t, holder)
	io.WriteString(stdin, strings.Repeat("sleep 20\n", 2))
	stdin.Close()
	waitForFile(t, filepath.Join(l.Dir, "logsA", "2.out"), func(string) bool { return true })
	waiter := labCmd(t, l, "", "-i", inv, "-o", "logsB", "--busy-recheck", "200ms", "--keepalive", "1s")
	wstdin, _ := startCmd(t, waiter)
	io.WriteString(wstdin, "sleep 1\n")
	demand := filepath.Join(l.Dir, ".locks", "gpudispatch-want-*")
	records := func(n int) bool { m, _ := filepath.Glob(demand); return len(m) == n }
	for deadline := time.Now().Add(20 * time.Second); !records(1); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the waiting run left no record of waiting")
		}
	}
	// hosts names the run that waits, and its user.
	if h := labRun(t, l, "", "hosts", "-i", inv); !regexpMatch(`(?m)^\s+run \S+ of \S+@\S+ waits for its GPUs \(fair share\), first in line$`, h.stdout) {
		t.Errorf("hosts does not name the waiting run:\n%s", h.stdout)
	}
	waiter.Process.Signal(syscall.SIGKILL)
	waiter.Wait()
	// At once, not after the holder's linger (the grace and two keepalives).
	for deadline := time.Now().Add(5 * time.Second); !records(0); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the killed run's record of waiting is still there")
		}
	}
	// Ctrl-C twice: the holder's jobs are stopped rather than waited for.
	holder.Process.Signal(syscall.SIGINT)
	time.Sleep(200 * time.Millisecond)
	holder.Process.Signal(syscall.SIGINT)
	waitExit(t, holder, errOut, time.Minute)
}

// A third run arriving late on a host two runs share gets its share too,
// at once, not when the first two runs' queues are empty: its first job
// starts before either of them starts its last.
func TestSSHThirdRunArrivingLate(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 3})
	inv := l.Inventory("")
	job := fmt.Sprintf(exclusiveJob, "1") + "\n"
	start := func(logs string, jobs int) (*exec.Cmd, *bytes.Buffer) {
		cmd := labCmd(t, l, "", "-i", inv, "-o", logs, "--busy-recheck", "200ms")
		stdin, errOut := startCmd(t, cmd)
		io.WriteString(stdin, strings.Repeat(job, jobs))
		stdin.Close()
		return cmd, errOut
	}
	a, aErr := start("logsA", 15)
	waitForFile(t, filepath.Join(l.Dir, "logsA", "3.out"), func(string) bool { return true })
	b, bErr := start("logsB", 15)
	waitForFile(t, filepath.Join(l.Dir, "logsB", "1.out"), func(string) bool { return true })
	c, cErr := start("logsC", 4)
	for _, r := range []struct {
		cmd *exec.Cmd
		err *bytes.Buffer
	}{{a, aErr}, {b, bErr}, {c, cErr}} {
		if err := waitExit(t, r.cmd, r.err, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(noCollisions(t, l)["node1"]); n != 34 {
		t.Errorf("%d jobs done, want 34", n)
	}
	as, bs, cs := jobStarts(t, l, "logsA"), jobStarts(t, l, "logsB"), jobStarts(t, l, "logsC")
	if len(as) != 15 || len(bs) != 15 || len(cs) != 4 {
		t.Fatalf("started: %d, %d, %d", len(as), len(bs), len(cs))
	}
	if !cs[0].Before(as[14]) || !cs[0].Before(bs[14]) {
		t.Errorf("the third run's first job started at %v, after the others' last (%v, %v): no share for it", cs[0].Format("15:04:05.000"), as[14].Format("15:04:05.000"), bs[14].Format("15:04:05.000"))
	}
}

// A run whose queue empties gives its share back at once: run B, one job
// of 8 s, waits for the host's four GPUs, which run A holds with a queue
// of 1 s jobs. A gives up two (B's share, B holding none), B takes one for
// its one job, and its queue is empty: its record of waiting goes, so A
// takes the fourth GPU again while B's job runs (before, B's record stayed
// a minute, and the fourth GPU stood idle while A's jobs waited).
func TestSSHEmptiedQueueGivesItsShareBack(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 4})
	inv := l.Inventory("")
	cmd, errOut := startA(t, l, inv, 40, "1", 4)
	b := labRun(t, l, fmt.Sprintf(exclusiveJob, "8")+"\n", "-i", inv, "-o", "logsB", "--busy-recheck", "200ms")
	if err := waitExit(t, cmd, errOut, 2*time.Minute); err != nil || b.code != 0 {
		t.Fatalf("runs: %v; B exit %d\n%s", err, b.code, b.stderr)
	}
	noCollisions(t, l)
	type span struct{ start, end time.Time }
	spans := func(dir string) []span {
		var out []span
		for _, e := range journal(t, filepath.Join(l.Dir, dir)) {
			if e["event"] == "finished" {
				s, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(e["start"]))
				f, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(e["end"]))
				out = append(out, span{s, f})
			}
		}
		return out
	}
	bs, as := spans("logsB"), spans("logsA")
	if len(bs) != 1 || len(as) != 40 {
		t.Fatalf("finished: %d of B's jobs, %d of A's", len(bs), len(as))
	}
	// In the second half of B's job (the share said and taken back, each
	// within a second or two), A runs three jobs at once.
	from := bs[0].start.Add(4 * time.Second)
	most := 0
	for _, x := range as {
		at := x.start
		if at.Before(from) {
			at = from
		}
		if !at.Before(x.end) || !at.Before(bs[0].end) {
			continue
		}
		n := 0
		for _, y := range as {
			if !y.start.After(at) && y.end.After(at) {
				n++
			}
		}
		most = max(most, n)
	}
	if most != 3 {
		t.Errorf("while B's one job ran, A ran at most %d jobs at once after B's queue emptied, want 3 (B's record of waiting stayed)", most)
	}
}

// twoRunsOnAHost runs 10 jobs of a second on the two GPUs of one host, then
// 10 more in a second run started once the first run's second job runs,
// and returns when each run's jobs started. firstArgs go to the first run.
func twoRunsOnAHost(t *testing.T, firstArgs ...string) (a, b []time.Time) {
	t.Helper()
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 2})
	inv := l.Inventory("")
	job := fmt.Sprintf(exclusiveJob, "1") + "\n"
	cmd := labCmd(t, l, "", append([]string{"-i", inv, "-o", "logsA", "--busy-recheck", "200ms"}, firstArgs...)...)
	stdin, errOut := startCmd(t, cmd)
	io.WriteString(stdin, strings.Repeat(job, 10))
	stdin.Close()
	waitForFile(t, filepath.Join(l.Dir, "logsA", "2.out"), func(string) bool { return true })
	second := labRun(t, l, strings.Repeat(job, 10), "-i", inv, "-o", "logsB", "--busy-recheck", "200ms")
	if err := waitExit(t, cmd, errOut, time.Minute); err != nil || second.code != 0 {
		t.Fatalf("runs: %v; exit %d\n%s", err, second.code, second.stderr)
	}
	done := noCollisions(t, l)
	if n := len(done["node1"]); n != 20 {
		t.Errorf("%d jobs done, want 20", n)
	}
	a, b = jobStarts(t, l, "logsA"), jobStarts(t, l, "logsB")
	if len(a) != 10 || len(b) != 10 {
		t.Fatalf("%d and %d starts, want 10 each", len(a), len(b))
	}
	return a, b
}

// --skip-busy over real sshd: a GPU whose nvidia-smi shows other people's
// memory gets no job until nvidia-smi says it is free; then one with a
// compute process on it gets none either. Jobs started together never
// share a GPU, and the event line says why jobs wait.
func TestSSHSkipBusy(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 2})
	h := l.Hosts[0]
	h.SetGPUs(sshtest.FakeGPU(0, h.UUID(0), 4000) + sshtest.FakeGPU(1, h.UUID(1), 0))
	cmd := labCmd(t, l, "", "-i", l.Inventory(""), "-o", "logs", "--skip-busy", "--busy-recheck", "200ms")
	stdin, errOut := startCmd(t, cmd)
	job := fmt.Sprintf(exclusiveJob, "0.2") + "\n"
	io.WriteString(stdin, strings.Repeat(job, 4))
	done := filepath.Join(h.Home, "done")
	waitForFile(t, done, func(s string) bool { return strings.Count(s, "\n") == 4 })
	for _, line := range strings.Split(strings.TrimSpace(readFile(t, done)), "\n") {
		if !strings.HasSuffix(line, " 1") {
			t.Errorf("job on the busy GPU 0: %s", line)
		}
	}
	// GPU 0 is free now, and someone's process is on GPU 1.
	h.SetGPUs(sshtest.FakeGPU(0, h.UUID(0), 0) + sshtest.FakeGPU(1, h.UUID(1), 300))
	h.SetApps(h.UUID(1) + ", 4242, 300\n")
	io.WriteString(stdin, strings.Repeat(job, 4))
	waitForFile(t, done, func(s string) bool { return strings.Count(s, "\n") == 8 })
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	lines := strings.Split(strings.TrimSpace(readFile(t, done)), "\n")
	for _, line := range lines[4:] {
		if !strings.HasSuffix(line, " 0") {
			t.Errorf("job on GPU 1, busy with another process: %s", line)
		}
	}
	noCollisions(t, l)
	for _, want := range []string{
		"GPU 0 is busy with other work: 4000 MiB used (more than 500)",
		"GPU 1 is busy with other work: 1 process, 300 MiB used",
	} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr does not say %q:\n%s", want, errOut)
		}
	}
}

// Editing the inventory during a run over SSH: a host added to the file
// gets jobs within a few seconds, without a restart; an edit that does not
// load is reported and the run goes on with the hosts it had.
func TestSSHInventoryReload(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	inv := filepath.Join(l.Dir, "reload.yaml")
	write := func(s string) {
		t.Helper()
		tmp := inv + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, inv); err != nil {
			t.Fatal(err)
		}
	}
	head := "ssh_config: " + l.SSHConfig + "\nhosts:\n  - {name: node1, gpus: auto}\n"
	write(head)
	logDir := filepath.Join(l.Dir, "logs")
	cmd := labCmd(t, l, "", "-i", inv, "-o", "logs")
	stdin, errOut := startCmd(t, cmd)
	// node2 comes with a snapshot of a project: its jobs run there.
	os.MkdirAll(filepath.Join(l.Dir, "proj"), 0o755)
	os.WriteFile(filepath.Join(l.Dir, "proj", "tag"), []byte("snap"), 0o644)
	job := `sleep 0.2; echo "$GPUDISPATCH_JOB_ID $(cat tag 2>/dev/null) $GPUDISPATCH_HOST" >> ` + filepath.Join(l.Dir, "ran") + "\n"
	io.WriteString(stdin, strings.Repeat(job, 2))
	waitJournal(t, logDir, func(ev []map[string]any) bool { return count(ev, "finished") == 2 })

	edited := time.Now()
	write(head + "  - {name: node2, gpus: auto, sync: proj}\n")
	waitJournal(t, logDir, func(ev []map[string]any) bool { return count(ev, "inventory") == 1 })
	t.Logf("the edit took effect after %v", time.Since(edited).Round(time.Millisecond))
	io.WriteString(stdin, strings.Repeat(job, 6))
	waitJournal(t, logDir, func(ev []map[string]any) bool { return count(ev, "finished") == 8 })

	write("hosts: [ {name: node1\n")
	waitJournal(t, logDir, func(ev []map[string]any) bool { return count(ev, "warning") == 1 })
	io.WriteString(stdin, strings.Repeat(job, 4))
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	ran := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(l.Dir, "ran"))), "\n")
	onNode2 := 0
	for _, line := range ran {
		if strings.HasSuffix(line, " node2") {
			onNode2++
			if !strings.HasSuffix(line, " snap node2") {
				t.Errorf("a job on node2 did not run in the snapshot: %q", line)
			}
		}
	}
	if len(ran) != 12 || onNode2 == 0 {
		t.Errorf("%d jobs ran, %d on the added node2; want 12, some there:\n%s", len(ran), onNode2, strings.Join(ran, "\n"))
	}
	for _, e := range wholeJournal(t, logDir) {
		switch e["event"] {
		case "inventory":
			if e["message"] != "added host node2 (GPUs 0)" {
				t.Errorf("reload event %v", e)
			}
		case "warning":
			if msg := fmt.Sprint(e["error"]); !strings.Contains(msg, "inventory edit ignored, the run goes on as it was: ") || !strings.Contains(msg, "reload.yaml") {
				t.Errorf("warning %v", e)
			}
		}
	}
	if !strings.Contains(errOut.String(), "gpudispatch: snapshot ") || !strings.Contains(errOut.String(), "inventory reloaded: added host node2 (GPUs 0)") {
		t.Errorf("stderr does not say the inventory was reloaded:\n%s", errOut)
	}
}

// A host whose nvidia-smi hangs (a GPU fallen off the bus) stalls nothing:
// with gpus: auto it is left out, with --skip-busy and with GPU locks its
// GPUs are set aside, and hosts answers; every look has --probe-timeout,
// the line names the host and nvidia-smi, and no look is left running.
func TestSSHNvidiaSMIHangs(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	l.Hosts[0].HangNvidiaSMI()
	jobs := strings.Repeat("echo $FAKE_HOST\n", 4)
	hung := "nvidia-smi did not answer within 2s"

	// The run does not wait for node1's GPUs: it ends first, and says so.
	r := labRun(t, l, jobs, "-i", l.Inventory(""), "-o", "auto", "--probe-timeout", "2s")
	if r.code != 0 || !strings.Contains(r.stderr, "node1 (root@127.0.0.1:") || !strings.Contains(r.stderr, "was still being opened as the run ended (asking nvidia-smi for its GPUs") {
		t.Errorf("gpus: auto: exit %d\n%s", r.code, r.stderr)
	}
	for i := 1; i <= 4; i++ {
		if got := readFile(t, filepath.Join(l.Dir, "auto", fmt.Sprintf("%d.out", i))); got != "node2\n" {
			t.Errorf("gpus: auto: job %d ran on %q", i, got)
		}
	}

	fixed := filepath.Join(l.Dir, "fixed.yaml")
	os.WriteFile(fixed, []byte(fmt.Sprintf("ssh_config: %s\nhosts:\n  - name: node1\n    gpus: [0]\n  - name: node2\n    gpus: [0]\n", l.SSHConfig)), 0o644)
	// Jobs long enough for node1's first look to meet its limit.
	slow := strings.Repeat("sleep 1; echo $FAKE_HOST\n", 4)
	for _, flags := range [][]string{nil, {"--skip-busy"}} {
		args := append([]string{"-i", fixed, "-o", "fixed" + strings.Join(flags, ""), "--probe-timeout", "2s", "--busy-recheck", "1s"}, flags...)
		r = labRun(t, l, slow, args...)
		if r.code != 0 || !strings.Contains(r.stderr, hung) {
			t.Errorf("gpus: [0] %v: exit %d\n%s", flags, r.code, r.stderr)
		}
	}

	start := time.Now()
	r = labRun(t, l, "", "hosts", "-i", l.Inventory(""), "--probe-timeout", "2s")
	if took := time.Since(start); r.code != 1 || !strings.Contains(r.stdout, hung) || took > 15*time.Second {
		t.Errorf("hosts: exit %d after %v\n%s%s", r.code, took, r.stdout, r.stderr)
	}
	// The looks that hung were killed on the host: none is left (of this
	// lab's: other tests hang their own hosts' nvidia-smi meanwhile).
	time.Sleep(3 * time.Second) // TERM, and KILL after the grace
	out, _ := exec.Command("pgrep", "-f", "sleep 3601").Output()
	for _, pid := range strings.Fields(string(out)) {
		env, _ := os.ReadFile("/proc/" + pid + "/environ")
		if bytes.Contains(env, []byte("HOME="+l.Hosts[0].Home+"\x00")) {
			t.Errorf("hung look left running: pid %s", pid)
		}
	}
}

// Without --skip-busy, a GPU that someone else's work uses gets jobs, and
// the run says so once, with its usage and the flag.
func TestSSHSharedGPUWarned(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 2})
	h := l.Hosts[0]
	h.SetGPUs(sshtest.FakeGPU(0, h.UUID(0), 0) + sshtest.FakeGPU(1, h.UUID(1), 40000))
	r := labRun(t, l, strings.Repeat("sleep 0.5\n", 4), "-i", l.Inventory(""), "-o", "logs")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	want := "gpudispatch: warning: host node1: GPU 1 is used by others too (40000 MiB used (more than 500)): this run's jobs there share it; --skip-busy keeps jobs off GPUs that others use"
	if n := strings.Count(r.stderr, "is used by others too"); n != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("%d warnings; want one:\n%s\ngot:\n%s", n, want, r.stderr)
	}
}

// jobStarts is when the jobs of the run logged in the lab's dir started,
// in order.
func jobStarts(t *testing.T, l *sshtest.Lab, dir string) []time.Time {
	t.Helper()
	var out []time.Time
	for _, e := range journal(t, filepath.Join(l.Dir, dir)) {
		if e["event"] == "started" {
			at, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(e["start"]))
			out = append(out, at)
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// A run whose first job needs more GPUs together than its share (a job
// of two GPUs, its share one of two) has its turn, first in the line: the
// run that holds the host, with a queue of jobs for seconds more, takes no
// new job on a GPU it frees, B's holder takes each for it, and the big job
// runs long before that queue is done (without turns, after it); then A
// has both GPUs again. No GPU ever runs two jobs.
func TestSSHJobTooBigForItsShare(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 2})
	inv := l.Inventory("")
	cmd, errOut := startA(t, l, inv, 16, "0.6", 2)
	big := `[gpus=2] for g in 0 1; do mkdir $HOME/on-gpu.$g || echo "$GPUDISPATCH_JOB_ID $g" >> $HOME/collisions; done; sleep 0.3; rmdir $HOME/on-gpu.0 $HOME/on-gpu.1; echo "$GPUDISPATCH_JOB_ID big" >> $HOME/done` + "\n"
	second := labRun(t, l, big, "-i", inv, "-o", "logsB", "--busy-recheck", "200ms")
	if err := waitExit(t, cmd, errOut, time.Minute); err != nil || second.code != 0 {
		t.Fatalf("runs: %v; exit %d\n%s", err, second.code, second.stderr)
	}
	if done := noCollisions(t, l); len(done["node1"]) != 17 {
		t.Errorf("%d jobs done, want 17", len(done["node1"]))
	}
	asked, bigStart, lastA := turnTimes(t, l)
	// A's holder looks once a second, B's takes the GPUs at its look, A's
	// jobs take 0.6 s: the big job starts within a few seconds, where A's
	// queue lasts about five more.
	t.Logf("B's job of two GPUs started %v after B asked; A's last job %v after", bigStart.Sub(asked), lastA.Sub(asked))
	if !bigStart.Before(lastA) {
		t.Errorf("B's job of two GPUs started %v after B asked, after A's last job (%v): it waited for A's queue to be done", bigStart.Sub(asked), lastA.Sub(asked))
	}
}

// turnTimes reads, from the journals of run A (logsA, in the lab's dir)
// and of run B (logsB, one job), when B first found a GPU locked, when its
// job started, and when A's last job started.
func turnTimes(t *testing.T, l *sshtest.Lab) (asked, bStart, lastA time.Time) {
	t.Helper()
	at := func(e map[string]any, field string) time.Time {
		v, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(e[field]))
		return v
	}
	for _, e := range journal(t, filepath.Join(l.Dir, "logsB")) {
		switch {
		case e["event"] == "gpu_busy" && asked.IsZero():
			asked = at(e, "time")
		case e["event"] == "finished":
			bStart = at(e, "start")
		}
	}
	if asked.IsZero() {
		t.Fatal("B never found a GPU locked: the runs did not contend, the test proves nothing")
	}
	for _, e := range journal(t, filepath.Join(l.Dir, "logsA")) {
		if e["event"] == "finished" && at(e, "start").After(lastA) {
			lastA = at(e, "start")
		}
	}
	return asked, bStart, lastA
}

// startA starts run A (its logs in logsA, in the lab's dir) on the lab's
// inventory inv with n jobs of exclusiveJob, of secs seconds each, and
// returns once job number started has started (its log file is made).
func startA(t *testing.T, l *sshtest.Lab, inv string, n int, secs string, started int) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := labCmd(t, l, "", "-i", inv, "-o", "logsA", "--busy-recheck", "200ms")
	stdin, errOut := startCmd(t, cmd)
	io.WriteString(stdin, strings.Repeat(fmt.Sprintf(exclusiveJob, secs)+"\n", n))
	stdin.Close()
	waitForFile(t, filepath.Join(l.Dir, "logsA", fmt.Sprint(started, ".out")), func(string) bool { return true })
	return cmd, errOut
}
