//go:build linux

package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/hosts/slurmtest"
	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// slurmLab writes an inventory of a workstation (one GPU, here) and the
// test's Slurm cluster, whose login node is this machine, and returns its
// path.
func slurmLab(t *testing.T, dir string, sc *slurmtest.Cluster, slurmKeys string) string {
	t.Helper()
	inv := fmt.Sprintf(`ssh_config: none
hosts:
  - name: ws
    local: true
    gpus: [0]
  - name: hpc
    local: true
    slurm: {partition: %s, poll: 1s, workdir: %s%s}
`, sc.Partition, filepath.Join(dir, "hpc-wd"), slurmKeys)
	path := filepath.Join(dir, "lab.yaml")
	if err := os.WriteFile(path, []byte(inv), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// sshSlurmLab writes an inventory whose one host, node1 of the lab l, is
// the login node of sc (slurmKeys: more keys of its slurm block), and
// returns its path. The lab's sessions carry sc's SLURM_CONF.
func sshSlurmLab(t testing.TB, dir string, l *sshtest.Lab, sc *slurmtest.Cluster, slurmKeys string) string {
	t.Helper()
	inv := fmt.Sprintf("ssh_config: %s\nhosts:\n  - name: node1\n    slurm: {partition: %s%s}\n", l.SSHConfig, sc.Partition, slurmKeys)
	path := filepath.Join(dir, "lab.yaml")
	if err := os.WriteFile(path, []byte(inv), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// slurmRun is a test's cluster, its workstation + cluster inventory and a
// log dir.
type slurmRun struct {
	sc               *slurmtest.Cluster
	dir, lab, logDir string
}

// newSlurmRun starts a cluster with gpus fake GPUs and writes its lab
// (slurmKeys are more keys of the slurm block).
func newSlurmRun(t *testing.T, gpus int, slurmKeys string) slurmRun {
	t.Helper()
	return newSlurmRunOf(t, slurmtest.Options{GPUs: gpus}, slurmKeys)
}

// newSlurmRunOf starts a cluster as o says and writes its lab.
func newSlurmRunOf(t *testing.T, o slurmtest.Options, slurmKeys string) slurmRun {
	t.Helper()
	sc := slurmtest.Start(t, o)
	dir := t.TempDir()
	r := slurmRun{sc: sc, dir: dir, lab: slurmLab(t, dir, sc, slurmKeys), logDir: filepath.Join(dir, "logs")}
	logJournalOnFailure(t, r.logDir)
	return r
}

// start starts a run of the lab (keepalive 1 s) with more args, with the
// cluster's SLURM_CONF for the commands of its login node (this machine).
func (r slurmRun) start(t *testing.T, args ...string) (*exec.Cmd, io.WriteCloser, *bytes.Buffer) {
	t.Helper()
	args = append([]string{"--inventory", r.lab, "-o", r.logDir, "--keepalive", "1s"}, args...)
	return startGPDEnv(t, r.dir, r.sc.Env(), args...)
}

// runJobs are the run's Slurm jobs still known to the cluster, by squeue.
func runJobs(sc *slurmtest.Cluster) []string {
	return strings.Fields(sc.Run("squeue", "-h", "-o", "%j:%T"))
}

// waitQueueEmpty waits until squeue lists no job of gpudispatch.
func waitQueueEmpty(t testing.TB, sc *slurmtest.Cluster, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if len(runJobs(sc)) == 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("squeue still lists %v", runJobs(sc))
}

// readFileOr is the file's content, or "".
func readFileOr(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// interval is when a job held its GPUs.
type interval struct {
	job        string
	cvd        []string
	start, end float64
}

// A sweep over a workstation and a cluster: jobs pinned to the cluster get
// their GPUs from Slurm (never two running jobs on one GPU, two for gpus=2),
// at most max_jobs of them are in the cluster at once, exit statuses and
// output come home, a GPU pin on the cluster is rejected, and the journal
// tells pending (with Slurm's job id) from started.
func TestE2ESlurmMixedSweep(t *testing.T) {
	t.Parallel()
	r := newSlurmRun(t, 4, ", max_jobs: 3")
	sc, logDir := r.sc, r.logDir
	job := `echo "$(date +%s.%N) $CUDA_VISIBLE_DEVICES $GPUDISPATCH_HOST"; sleep 2; echo "$(date +%s.%N)"; echo to-stderr >&2`
	var cmds []string
	for i := range 6 {
		cmds = append(cmds, fmt.Sprintf("[host=hpc name=h%d] %s", i, job))
	}
	cmds = append(cmds,
		"[host=hpc name=two gpus=2] "+job,
		"[host=hpc name=three] exit 3",
		"[host=hpc gpu=1 name=pinned] true",
		"[name=any1] sleep 1",
		"[name=any2] sleep 1",
	)
	cmd, stdin, errOut := r.start(t)
	io.WriteString(stdin, strings.Join(cmds, "\n")+"\n")
	stdin.Close()
	if err := cmd.Wait(); statusOf(err) != 1 {
		t.Fatalf("exit %v, want 1 (one job fails, one is rejected)\n%s", err, errOut)
	}
	if !strings.Contains(errOut.String(), "Slurm chooses the GPUs") {
		t.Errorf("the GPU pin on the cluster was not rejected with its reason:\n%s", errOut)
	}
	events := journal(t, logDir)
	var ivs []interval
	inCluster, most := map[string]bool{}, 0
	for _, e := range events {
		id, _ := e["job"].(string)
		switch e["event"] {
		case "pending":
			// Off the cluster, a job is pending while its shell is set up.
			if (e["host"] != "hpc") != (e["setting_up"] == true) {
				t.Errorf("pending event off the cluster without setting_up, or on it with: %v", e)
			}
			if e["host"] == "hpc" {
				inCluster[id] = true
			}
		case "started":
			if e["host"] == "hpc" && e["slurm_job_id"] == nil {
				t.Errorf("started on the cluster without its Slurm job id: %v", e)
			}
		case "finished", "failed":
			delete(inCluster, id)
		}
		most = max(most, len(inCluster))
	}
	if most > 3 {
		t.Errorf("%d jobs in the cluster at once, max_jobs is 3", most)
	}
	for _, name := range []string{"h0", "h1", "h2", "h3", "h4", "h5", "two"} {
		out := readFile(t, filepath.Join(logDir, name+".out"))
		f := strings.Fields(out)
		if len(f) != 4 || f[2] != "hpc" {
			t.Fatalf("%s.out = %q, want start, CUDA_VISIBLE_DEVICES, host, end", name, out)
		}
		if got := readFile(t, filepath.Join(logDir, name+".err")); got != "to-stderr\n" {
			t.Errorf("%s.err = %q", name, got)
		}
		start, _ := strconv.ParseFloat(f[0], 64)
		end, _ := strconv.ParseFloat(f[3], 64)
		ivs = append(ivs, interval{name, strings.Split(f[1], ","), start, end})
	}
	for _, a := range ivs {
		want := 1
		if a.job == "two" {
			want = 2
		}
		if len(a.cvd) != want {
			t.Errorf("%s saw CUDA_VISIBLE_DEVICES %v, want %d GPUs", a.job, a.cvd, want)
		}
		for _, b := range ivs {
			overlap := a.job < b.job && a.start < b.end && b.start < a.end
			for _, g := range a.cvd {
				if overlap && slices.Contains(b.cvd, g) {
					t.Errorf("%s and %s ran at once on GPU %s", a.job, b.job, g)
				}
			}
		}
	}
	var three map[string]any
	for _, e := range events {
		if e["job"] == "three" && e["event"] == "failed" {
			three = e
		}
	}
	if three == nil || three["exit"] != float64(3) {
		t.Errorf("job three's end: %v, want failed with exit 3", three)
	}
	waitQueueEmpty(t, sc, 5*time.Second)
}

// The first Ctrl-C cancels the jobs still pending in Slurm and lets the
// running ones finish; the second cancels them too; squeue is left empty.
func TestE2ESlurmStop(t *testing.T) {
	t.Parallel()
	r := newSlurmRun(t, 2, "")
	sc, logDir := r.sc, r.logDir
	cmd, stdin, errOut := r.start(t)
	for i := range 4 {
		fmt.Fprintf(stdin, "[host=hpc name=j%d] sleep 300\n", i)
	}
	stdin.Close()
	waitJournal(t, logDir, func(events []map[string]any) bool { return count(events, "started") == 2 })
	cmd.Process.Signal(syscall.SIGINT)
	waitJournal(t, logDir, func(events []map[string]any) bool { return count(events, "cancelled") == 2 })
	if jobs := runJobs(sc); len(jobs) != 2 || !strings.HasSuffix(jobs[0], ":RUNNING") || !strings.HasSuffix(jobs[1], ":RUNNING") {
		t.Errorf("after one Ctrl-C squeue lists %v, want the 2 running jobs", jobs)
	}
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); statusOf(err) != 130 {
		t.Fatalf("exit %v, want 130\n%s", err, errOut)
	}
	if n := count(journal(t, logDir), "cancelled"); n != 4 {
		t.Errorf("%d jobs cancelled, want 4", n)
	}
	waitQueueEmpty(t, sc, 5*time.Second)
}

// A coordinator killed outright ends no cluster job: the run's jobs stay in
// Slurm, and run, after the agent on the login node stopped hearing it (3
// keepalives and the grace); --resume tracks them again (the pending one
// too), completes their output and records their outcomes: no job runs
// twice, the queue ends empty.
func TestE2ESlurmCoordinatorKilled(t *testing.T) {
	t.Parallel()
	r := newSlurmRun(t, 2, "")
	sc, logDir := r.sc, r.logDir
	gate := filepath.Join(r.dir, "go")
	lines := ""
	for i := range 3 {
		lines += fmt.Sprintf("[host=hpc name=c%d] echo start >> %s/ran.%d; echo start; while [ ! -e %s ]; do sleep 0.2; done; echo end\n", i, r.dir, i, gate)
	}
	cmd, stdin, _ := r.start(t)
	io.WriteString(stdin, lines)
	waitJournal(t, logDir, func(events []map[string]any) bool { return count(events, "started") == 2 })
	cmd.Process.Kill()
	cmd.Wait()
	// Past the agent's silence limit (3 × 1 s and the 10 s grace): nothing
	// was cancelled.
	time.Sleep(15 * time.Second)
	if jobs := runJobs(sc); len(jobs) != 3 {
		t.Fatalf("squeue lists %v after the coordinator died, want its 3 jobs", jobs)
	}
	os.WriteFile(gate, nil, 0o644)
	resumed, in, errOut := r.start(t, "--resume")
	io.WriteString(in, lines)
	in.Close()
	if err := resumed.Wait(); err != nil {
		t.Fatalf("resume: exit %v\n%s", err, errOut)
	}
	for i := range 3 {
		if got := readFile(t, filepath.Join(r.dir, fmt.Sprintf("ran.%d", i))); got != "start\n" {
			t.Errorf("job c%d ran %d times, want once", i, strings.Count(got, "start"))
		}
		if got := readFile(t, filepath.Join(logDir, fmt.Sprintf("c%d.out", i))); got != "start\nend\n" {
			t.Errorf("c%d.out = %q, want its whole output once", i, got)
		}
	}
	events := journal(t, logDir)
	if n := count(events, "finished"); n != 3 {
		t.Errorf("%d finished, want 3", n)
	}
	// The job still pending in Slurm is followed as pending, and journaled
	// started once Slurm runs it.
	waiting := ""
	for _, e := range events {
		switch {
		case e["event"] == "pending" && strings.Contains(fmt.Sprint(e["message"]), "re-adopted"):
			waiting = fmt.Sprint(e["job"])
		case waiting != "" && e["job"] == waiting && e["event"] == "started":
			if e["slurm_job_id"] == nil || e["start"] == nil {
				t.Errorf("%s started with no Slurm job or start: %v", waiting, e)
			}
			waiting = "seen"
		}
	}
	if waiting != "seen" {
		t.Errorf("no re-adopted job journaled pending, then started:\n%v", events)
	}
	waitQueueEmpty(t, sc, 10*time.Second)
}

// A cluster that sets Slurm up in the login profile (here SLURM_CONF, only
// in the login node's ~/.profile, as Lmod's module load slurm does): the
// agent sees the login shell's whole environment, as jobs do.
func TestE2ESlurmProfileEnv(t *testing.T) {
	t.Parallel()
	sc := slurmtest.Start(t, slurmtest.Options{GPUs: 1})
	l := sshtest.Start(t, sshtest.Options{Hosts: 1})
	home := l.Hosts[0].Home
	os.Remove(filepath.Join(home, ".bash_profile"))
	os.WriteFile(filepath.Join(home, ".profile"), []byte("PATH=$HOME/bin:$PATH\nexport SLURM_CONF="+sc.Conf+"\n"), 0o644)
	dir := t.TempDir()
	lab := sshSlurmLab(t, dir, l, sc, ", poll: 1s")
	logDir := filepath.Join(dir, "logs")
	logJournalOnFailure(t, logDir)
	r := gpd(t, dir, "[name=j] echo ran\n", "--inventory", lab, "-o", logDir, "--keepalive", "1s")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if got := readFile(t, filepath.Join(logDir, "j.out")); got != "ran\n" {
		t.Errorf("j.out = %q", got)
	}
}

// A job whose node fails is lost and run again: by Slurm's NODE_FAIL, not
// by Slurm's own requeue, so the journal counts the attempt.
func TestE2ESlurmNodeLost(t *testing.T) {
	t.Parallel()
	r := newSlurmRun(t, 1, "")
	sc, logDir := r.sc, r.logDir
	cmd, stdin, errOut := r.start(t, "--retries", "1")
	io.WriteString(stdin, "[host=hpc name=victim] echo attempt; sleep 8\n")
	stdin.Close()
	waitJournal(t, logDir, func(events []map[string]any) bool { return count(events, "started") == 1 })
	sc.SetNode("down", "test")
	waitJournal(t, logDir, func(events []map[string]any) bool { return count(events, "lost") == 1 })
	// The node comes back by itself (ReturnToService=2): the second attempt,
	// submitted at once, waits in Slurm until then.
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit %v, want 0\n%s", err, errOut)
	}
	events := journal(t, logDir)
	var kinds []string
	for _, e := range events {
		if e["job"] == "victim" && e["event"] != "pending" {
			kinds = append(kinds, e["event"].(string))
		}
	}
	want := []string{"queued", "started", "lost", "retried", "started", "finished"}
	if !slices.Equal(kinds, want) {
		t.Errorf("the job's story: %v, want %v", kinds, want)
	}
	if out := readFile(t, filepath.Join(logDir, "victim.2.out")); out != "attempt\n" {
		t.Errorf("second attempt's output %q", out)
	}
	waitQueueEmpty(t, sc, 5*time.Second)
}

// The cluster's login node over SSH (a host of the real-sshd lab), with
// the output of a running job streamed home before it ends.
func TestE2ESlurmOverSSH(t *testing.T) {
	t.Parallel()
	sc := slurmtest.Start(t, slurmtest.Options{GPUs: 2})
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, Env: []string{"SLURM_CONF=" + sc.Conf}})
	dir := t.TempDir()
	lab := sshSlurmLab(t, dir, l, sc, ", poll: 1s")
	logDir := filepath.Join(dir, "logs")
	logJournalOnFailure(t, logDir)
	// SLURM_CONF reaches the login node's sessions only: this process
	// does not have it.
	cmd, stdin, errOut := startGPD(t, dir, "--inventory", lab, "-o", logDir, "--keepalive", "1s")
	io.WriteString(stdin, "[name=slow] echo first; while [ ! -e "+dir+"/go ]; do sleep 0.2; done; echo second\n[name=fast] echo $CUDA_VISIBLE_DEVICES\n")
	stdin.Close()
	deadline := time.Now().Add(30 * time.Second)
	for readFileOr(filepath.Join(logDir, "slow.out")) != "first\n" {
		if time.Now().After(deadline) {
			t.Fatalf("slow.out never said first\n%s", errOut)
		}
		time.Sleep(50 * time.Millisecond)
	}
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit %v\n%s", err, errOut)
	}
	if got := readFile(t, filepath.Join(logDir, "slow.out")); got != "first\nsecond\n" {
		t.Errorf("slow.out = %q", got)
	}
	if got := strings.TrimSpace(readFile(t, filepath.Join(logDir, "fast.out"))); got != "0" && got != "1" {
		t.Errorf("fast.out = %q, want a GPU Slurm gave", got)
	}
	files, _ := filepath.Glob(filepath.Join(l.Hosts[0].Home, ".gpudispatch", "*.exit"))
	sort.Strings(files)
	if len(files) != 2 {
		t.Errorf("exit files on the cluster: %v, want 2", files)
	}
	waitQueueEmpty(t, sc, 5*time.Second)
}

// gpudispatch hosts shows a cluster's partition (sinfo), max_jobs and the
// user's queue; a partition sbatch refuses leaves the cluster out with
// sbatch's words.
func TestE2ESlurmHosts(t *testing.T) {
	t.Parallel()
	sc := slurmtest.Start(t, slurmtest.Options{GPUs: 2})
	dir := t.TempDir()
	lab := slurmLab(t, dir, sc, ", max_jobs: 7")
	cmd := exec.Command(binary, "hosts", "--inventory", lab)
	cmd.Dir, cmd.Env = dir, append(sc.Env(), lockEnv(dir))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hosts: %v\n%s", err, out)
	}
	for _, want := range []string{"slurm", "7 (max_jobs)", "partition " + sc.Partition, "gpu:fake:2", "your queue"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("hosts does not show %q:\n%s", want, out)
		}
	}
	bad := slurmLab(t, dir, &slurmtest.Cluster{Partition: "nosuch"}, "")
	cmd = exec.Command(binary, "hosts", "--inventory", bad)
	cmd.Dir, cmd.Env = dir, append(sc.Env(), lockEnv(dir))
	out, _ = cmd.CombinedOutput()
	if !regexpMatch(`hpc .*left out.*\n\s+hpc: slurm: .*[Ii]nvalid partition`, string(out)) {
		t.Errorf("a bad partition does not say so:\n%s", out)
	}
}

// A login node that goes away and comes back, for less than the watcher's
// limit: the cluster's jobs run on and end meanwhile, a new agent picks
// them up when the node is back, and none runs twice or loses output. sshd
// killed with its sessions (the agent dies with them), or frozen (the agent
// lives on, cut off, until the new one takes over).
func TestE2ESlurmLoginNodeLost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		lose, back func(*sshtest.Host)
	}{
		{"killed", (*sshtest.Host).Stop, (*sshtest.Host).Start},
		{"frozen", (*sshtest.Host).Freeze, (*sshtest.Host).Thaw},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sc := slurmtest.Start(t, slurmtest.Options{GPUs: 2})
			l := sshtest.Start(t, sshtest.Options{Hosts: 1, Env: []string{"SLURM_CONF=" + sc.Conf}})
			login := l.Hosts[0]
			dir := t.TempDir()
			lab := sshSlurmLab(t, dir, l, sc, ", poll: 1s")
			logDir := filepath.Join(dir, "logs")
			logJournalOnFailure(t, logDir)
			cmd, stdin, errOut := startGPD(t, dir, "--inventory", lab, "-o", logDir, "--keepalive", "1s", "--connect-timeout", "2s")
			// Three jobs on two GPUs: two run, one waits in Slurm. Each
			// notes each run of it beside the test, and waits for "go".
			for _, name := range []string{"a", "b", "c"} {
				fmt.Fprintf(stdin, "[name=%s] echo before; echo ran >>%s/ran.%s; while [ ! -e %s/go ]; do sleep 0.2; done; echo after; echo oops >&2\n",
					name, dir, name, dir)
			}
			stdin.Close()
			// Slurm picks which two run first; the third waits.
			var third string
			waitJournal(t, logDir, func(events []map[string]any) bool {
				started := map[any]bool{}
				for _, e := range events {
					if e["event"] == "started" {
						started[e["job"]] = true
					}
				}
				if len(started) != 2 {
					return false
				}
				for _, name := range []string{"a", "b", "c"} {
					if !started[name] {
						third = name
					} else if readFileOr(filepath.Join(logDir, name+".out")) != "before\n" {
						return false
					}
				}
				return true
			})
			tc.lose(login)
			lost := true
			defer func() {
				if lost {
					tc.back(login)
				}
			}()
			// Away for 6 s, the watcher's limit being 13 (3 × 1 s + the
			// 10 s grace): the jobs end meanwhile and the third runs.
			time.Sleep(2 * time.Second)
			os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
			waitForFile(t, filepath.Join(dir, "ran."+third), func(s string) bool { return s != "" }) // the third job ran
			time.Sleep(4 * time.Second)
			tc.back(login)
			lost = false
			if err := waitExit(t, cmd, errOut, time.Minute); err != nil {
				t.Fatalf("exit %v\n%s", err, errOut)
			}
			events := journal(t, logDir)
			for _, name := range []string{"a", "b", "c"} {
				if ran := readFileOr(filepath.Join(dir, "ran."+name)); ran != "ran\n" {
					t.Errorf("job %s ran %d times", name, strings.Count(ran, "ran"))
				}
				if out, errs := readFileOr(filepath.Join(logDir, name+".out")), readFileOr(filepath.Join(logDir, name+".err")); out != "before\nafter\n" || errs != "oops\n" {
					t.Errorf("job %s: stdout %q, stderr %q", name, out, errs)
				}
				var kinds []string
				for _, e := range events {
					if e["job"] == name && e["event"] != "pending" {
						kinds = append(kinds, e["event"].(string))
					}
				}
				if want := []string{"queued", "started", "finished"}; !slices.Equal(kinds, want) {
					t.Errorf("job %s: %v, want %v", name, kinds, want)
				}
			}
			waitQueueEmpty(t, sc, 5*time.Second)
			// The agents end: the last at the run's end, an earlier one
			// when it sees that a later one took over.
			agents := "gpudispatch-slurm-agent " + fmt.Sprint(events[0]["run"])
			deadline := time.Now().Add(5 * time.Second)
			for exec.Command("pgrep", "-f", agents).Run() == nil {
				if time.Now().After(deadline) {
					out, _ := exec.Command("pgrep", "-af", agents).Output()
					t.Fatalf("agents left on the login node:\n%s", out)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

// A snapshot of the code reaches a real Slurm cluster: it is built in the
// content store under the cluster's workdir (its shared filesystem), its
// jobs start in that tree and see the project as it was, their results
// come back, and hosts --clean empties that store.
func TestE2ESlurmSync(t *testing.T) {
	t.Parallel()
	r := newSlurmRun(t, 2, "")
	proj := filepath.Join(r.dir, "proj")
	os.MkdirAll(proj, 0o755)
	os.WriteFile(filepath.Join(proj, "conf.txt"), []byte("v1\n"), 0o644)
	cmd, stdin, errOut := r.start(t, "--sync", "proj")
	io.WriteString(stdin, "[host=hpc name=a return=res.txt] pwd; cat conf.txt > res.txt\n[host=ws name=b] cat conf.txt\n")
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit %v\n%s", err, errOut)
	}
	store := filepath.Join(r.dir, "hpc-wd", "code")
	if pwd := strings.TrimSpace(readFile(t, filepath.Join(r.logDir, "a.out"))); filepath.Dir(filepath.Dir(pwd)) != filepath.Join(store, "work") {
		t.Errorf("the cluster's job ran in %q; want a tree of %s", pwd, store)
	}
	if got := readFile(t, filepath.Join(r.logDir, "a", "res.txt")); got != "v1\n" {
		t.Errorf("the cluster's job returned %q", got)
	}
	if got := readFile(t, filepath.Join(r.logDir, "b.out")); got != "v1\n" {
		t.Errorf("the workstation's job printed %q", got)
	}
	clean := exec.Command(binary, "hosts", "--inventory", r.lab, "--clean")
	clean.Dir, clean.Env = r.dir, append(r.sc.Env(), lockEnv(r.dir))
	out, err := clean.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "hpc: removed 1 snapshots, 1 working trees and 1 files") {
		t.Errorf("hosts --clean: %v\n%s", err, out)
	}
	if snaps, _ := filepath.Glob(filepath.Join(store, "*", "*", "*")); len(snaps) != 0 {
		t.Errorf("left in the cluster's store: %v", snaps)
	}
}

// A job that asks for a GPU model goes to the cluster whose gres type
// names it, and Slurm gives it a GPU of that type (--gres=gpu:fake:1, as
// scontrol shows the job); one asking for a model the cluster has not is
// rejected with the cluster's gres types.
func TestE2ESlurmGPUTypes(t *testing.T) {
	t.Parallel()
	r := newSlurmRun(t, 1, "")
	cmd, stdin, errOut := r.start(t)
	io.WriteString(stdin, "[name=typed model=fake] scontrol show job $SLURM_JOB_ID | grep -o 'gpu:fake:1' | head -n1\n[name=other model=A100] echo never\n")
	stdin.Close()
	if err := cmd.Wait(); statusOf(err) != 1 {
		t.Fatalf("exit %v, want 1 (one job rejected)\n%s", err, errOut)
	}
	if got := readFileOr(filepath.Join(r.logDir, "typed.out")); got != "gpu:fake:1\n" {
		t.Errorf("typed.out = %q, want Slurm's gpu:fake:1\n%s", got, errOut)
	}
	if want := "hpc: a Slurm cluster, gres types fake)"; !strings.Contains(errOut.String(), want) {
		t.Errorf("the A100 job is not rejected with %q:\n%s", want, errOut)
	}
}

// A job over two hosts in a lab of one workstation and a two-node Slurm
// cluster goes to the cluster as one batch job of two nodes: its line runs
// on each node with its rank, and each part's output comes home in its
// own logs.
func TestE2ESlurmJobOverTwoNodes(t *testing.T) {
	t.Parallel()
	r := newSlurmRunOf(t, slurmtest.Options{Nodes: 2, GPUs: 1}, "")
	cmd, stdin, errOut := r.start(t)
	io.WriteString(stdin, `[nodes=2 name=dist] echo "rank=$NODE_RANK of $NNODES master=$MASTER_ADDR world=$WORLD_SIZE"`+"\n")
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit %v\n%s", err, errOut)
	}
	for log, want := range map[string]string{"dist.out": "rank=0 of 2 master=gpd1 world=2\n", "dist.rank1.out": "rank=1 of 2 master=gpd1 world=2\n"} {
		if got := readFile(t, filepath.Join(r.logDir, log)); got != want {
			t.Errorf("%s: %q, want %q", log, got, want)
		}
	}
	for _, e := range journal(t, r.logDir) {
		if e["event"] == "started" && e["host"] != "hpc" {
			t.Errorf("started on %v, want the cluster", e["host"])
		}
	}
}

// A job over two nodes of a cluster outlives its coordinator as any
// cluster job does: --resume tracks it again and completes both parts'
// logs from the bytes that were home.
func TestE2ESlurmJobOverTwoNodesReadopted(t *testing.T) {
	t.Parallel()
	r := newSlurmRunOf(t, slurmtest.Options{Nodes: 2, GPUs: 1}, "")
	gate := filepath.Join(r.dir, "go")
	line := fmt.Sprintf("[nodes=2 name=dist] echo start $NODE_RANK; while [ ! -e %s ]; do sleep 0.2; done; echo end $NODE_RANK\n", gate)
	cmd, stdin, _ := r.start(t)
	io.WriteString(stdin, line)
	for _, log := range []string{"dist.out", "dist.rank1.out"} {
		waitForFile(t, filepath.Join(r.logDir, log), func(s string) bool { return strings.HasPrefix(s, "start") })
	}
	cmd.Process.Kill()
	cmd.Wait()
	os.WriteFile(gate, nil, 0o644)
	resumed, in, errOut := r.start(t, "--resume")
	io.WriteString(in, line)
	in.Close()
	if err := resumed.Wait(); err != nil {
		t.Fatalf("resume: exit %v\n%s", err, errOut)
	}
	for log, want := range map[string]string{"dist.out": "start 0\nend 0\n", "dist.rank1.out": "start 1\nend 1\n"} {
		if got := readFile(t, filepath.Join(r.logDir, log)); got != want {
			t.Errorf("%s: %q, want %q", log, got, want)
		}
	}
	if n := count(journal(t, r.logDir), "finished"); n != 1 {
		t.Errorf("%d finished, want 1", n)
	}
	waitQueueEmpty(t, r.sc, 10*time.Second)
}
