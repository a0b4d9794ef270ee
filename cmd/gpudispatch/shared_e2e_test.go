package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// --skip-busy on a host with four idle GPUs: six jobs use all four at
// once. The busy check of each GPU joins the look at nvidia-smi under way
// there, rather than taking it for one that hangs and setting the GPU
// aside.
func TestSSHSkipBusyUsesEveryIdleGPU(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 4})
	job := fmt.Sprintf(exclusiveJob, "1") + "\n"
	r := labRun(t, l, strings.Repeat(job, 6), "-i", l.Inventory(""), "-o", "logs", "--skip-busy")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	used := map[string]bool{}
	for _, line := range noCollisions(t, l)["node1"] {
		f := strings.Fields(line)
		used[f[len(f)-1]] = true
	}
	if len(used) != 4 || strings.Contains(r.stderr, "waits") || strings.Contains(r.stderr, "did not answer") {
		t.Errorf("jobs ran on GPUs %v, want all four, and no job waiting:\n%s", used, r.stderr)
	}
}

// Without --skip-busy, jobs go to the idle host's GPUs, not to those a
// colleague's work fills on the other host: what others use is known
// before a job is placed.
func TestSSHIdleHostFirst(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 2})
	busy := l.Hosts[0]
	busy.SetGPUs(sshtest.FakeGPU(0, busy.UUID(0), 40000) + sshtest.FakeGPU(1, busy.UUID(1), 40000))
	r := labRun(t, l, strings.Repeat("sleep 0.5; echo $GPUDISPATCH_HOST\n", 2), "-i", l.Inventory(""), "-o", "logs")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	for i := 1; i <= 2; i++ {
		if got := readFile(t, filepath.Join(l.Dir, "logs", fmt.Sprint(i)+".out")); got != "node2\n" {
			t.Errorf("job %d ran on %q, want the idle node2", i, got)
		}
	}
	if strings.Contains(r.stderr, "used by others too") {
		t.Errorf("a job went to a busy GPU:\n%s", r.stderr)
	}
}

// With --skip-busy, a job pinned to a host whose GPUs others fill waits,
// and says so with the usage, in the run's lines and in status; it runs
// once a look finds a GPU free.
func TestSSHPinnedToBusyHost(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 2})
	h := l.Hosts[0]
	h.SetGPUs(sshtest.FakeGPU(0, h.UUID(0), 40000) + sshtest.FakeGPU(1, h.UUID(1), 30000))
	cmd := labCmd(t, l, "", "-i", l.Inventory(""), "-o", "logs", "--skip-busy", "--busy-recheck", "300ms")
	stdin, errOut := startCmd(t, cmd)
	io.WriteString(stdin, "@node1 echo ran on $GPUDISPATCH_HOST:$CUDA_VISIBLE_DEVICES\n")
	want := "waits: every GPU of host node1 it may use is busy with other work (GPU 0: 40000 MiB used (more than 500); GPU 1: 30000 MiB used (more than 500))"
	var why string
	for deadline := time.Now().Add(20 * time.Second); !strings.HasPrefix(why, want); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("status says %q, want %q", why, want)
		}
		st := labRun(t, l, "", "status", "-o", "logs", "--json")
		var j map[string]any
		if json.Unmarshal([]byte(strings.SplitN(st.stdout, "\n", 2)[0]), &j) == nil {
			why, _ = j["why"].(string)
		}
	}
	h.SetGPUs(sshtest.FakeGPU(0, h.UUID(0), 40000) + sshtest.FakeGPU(1, h.UUID(1), 0))
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if got := readFile(t, filepath.Join(l.Dir, "logs", "1.out")); got != "ran on node1:1\n" {
		t.Errorf("the job printed %q, want it on node1:1 once free", got)
	}
	for _, line := range []string{
		"host node1: GPU 0 is busy with other work: 40000 MiB used (more than 500); --skip-busy keeps jobs off it until a look finds it free",
		"host node1: GPU 1 is busy with other work: 30000 MiB used (more than 500)",
	} {
		if !strings.Contains(errOut.String(), line) {
			t.Errorf("the run does not say %q:\n%s", line, errOut)
		}
	}
}

// realAnswer reads a real nvidia-smi answer kept in hosts/nvidiasmi's
// testdata (its SOURCES.md says where each comes from).
func realAnswer(t *testing.T, name string) (stdout, stderr string, rc int) {
	t.Helper()
	dir := filepath.Join("..", "..", "hosts", "nvidiasmi", "testdata")
	rc, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(dir, name+".rc"))))
	if err != nil {
		t.Fatal(err)
	}
	return readFile(t, filepath.Join(dir, name+".stdout")), readFile(t, filepath.Join(dir, name+".stderr")), rc
}

// Real nvidia-smi answers over sshd: a GPU fallen off the bus (an error
// line among the other GPUs' rows, exit status 15) is left out alone, and
// the host's other GPUs run jobs; a driver that fails (its words on
// stdout, exit status 255) leaves a gpus: auto host out with those words.
func TestSSHRealNvidiaSMIAnswers(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	l.Hosts[0].SetAnswer(realAnswer(t, "d7_lost_gpu1_of4_rc15"))
	l.Hosts[1].SetAnswer(realAnswer(t, "d3_nvml_unknown_gpustack2078"))
	// Jobs that last a moment: a run waits for no host (node1 ran six
	// jobs of echo in 10 ms under CI's load, and the run ended with
	// node2's look still under way, its error unsaid).
	r := labRun(t, l, strings.Repeat("sleep 0.3; echo $CUDA_VISIBLE_DEVICES\n", 6), "-i", l.Inventory(""), "-o", "logs")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	used := map[string]bool{}
	for i := 1; i <= 6; i++ {
		used[strings.TrimSpace(readFile(t, filepath.Join(l.Dir, "logs", fmt.Sprint(i)+".out")))] = true
	}
	if used["1"] || len(used) == 0 {
		t.Errorf("jobs ran on GPUs %v: want 0, 2, 3 and never the lost GPU 1", used)
	}
	for _, want := range []string{
		`node1: GPU 1 is left out: nvidia-smi says "Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown Error"`,
		"node2", "nvidia-smi (exit status 255): Failed to initialize NVML: Unknown Error",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the run does not say %q:\n%s", want, r.stderr)
		}
	}
}

// A gpus: auto host that is down (here frozen: no greeting) or sick (its
// nvidia-smi hangs) at start joins the run once it answers, as a host with
// listed GPUs does: the jobs pinned to it wait for it, then run there.
func TestSSHAutoHostRejoins(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 3, GPUs: 1})
	down, sick := l.Hosts[0], l.Hosts[1]
	down.Freeze()
	sick.HangNvidiaSMI()
	cmd := labCmd(t, l, "", "-i", l.Inventory(""), "-o", "logs", "--connect-timeout", "1s", "--probe-timeout", "1s")
	stdin, errOut := startCmd(t, cmd)
	io.WriteString(stdin, "@node1 echo $GPUDISPATCH_HOST\n@node2 echo $GPUDISPATCH_HOST\necho $GPUDISPATCH_HOST\n")
	// node3's job runs first: the run did not wait for the other two.
	waitForFile(t, filepath.Join(l.Dir, "logs", "3.out"), func(s string) bool { return s == "node3\n" })
	down.Thaw()
	sick.ResumeNvidiaSMI()
	stdin.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%v\n%s", err, errOut)
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("the hosts never joined:\n%s", errOut)
	}
	for i, want := range []string{"node1\n", "node2\n"} {
		if got := readFile(t, filepath.Join(l.Dir, "logs", fmt.Sprint(i+1)+".out")); got != want {
			t.Errorf("job %d printed %q, want %q", i+1, got, want)
		}
	}
}

// A host whose connection hangs while a job runs there is shown at once
// (keepalives notice), not minutes later: down, unreachable since when,
// with the jobs presumed running there, in the run's lines and in status.
// The job runs on; once the host answers, its time is its own run time,
// not the time the host was silent.
func TestSSHCutOffHostShownAtOnce(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	logDir := filepath.Join(l.Dir, "logs")
	logJournalOnFailure(t, logDir)
	cmd := labCmd(t, l, "", "-i", l.Inventory(""), "-o", "logs", "--keepalive", "500ms", "--connect-timeout", "1s")
	stdin, errOut := startCmd(t, cmd)
	// The job says it runs: its shell is up (not an sshd child still on
	// its way to bash, which the freeze would stop too).
	began := filepath.Join(l.Dir, "began")
	io.WriteString(stdin, "@node1 touch "+began+"; sleep 2; echo done\n")
	waitJournal(t, logDir, func(ev []map[string]any) bool { return len(running(ev, "node1")) == 1 })
	waitForFile(t, began, func(string) bool { return true })
	l.Hosts[0].Freeze()
	thawed := false
	defer func() {
		if !thawed {
			l.Hosts[0].Thaw()
		}
	}()
	frozen := time.Now()
	var down string
	waitJournal(t, logDir, func(ev []map[string]any) bool {
		for _, e := range ev {
			if e["event"] == "host_down" && e["host"] == "node1" {
				down, _ = e["error"].(string)
				return true
			}
		}
		return false
	})
	t.Logf("said down %v after the hang", time.Since(frozen).Round(time.Millisecond))
	if !strings.Contains(down, "unreachable since ") || !strings.Contains(down, "1 job presumed running there") {
		t.Errorf("host_down says %q, want when and the job presumed running", down)
	}
	if st := labRun(t, l, "", "status", "-o", "logs"); !strings.Contains(st.stdout, "presumed running") {
		t.Errorf("status does not say the job is presumed running:\n%s", st.stdout)
	}
	time.Sleep(4 * time.Second) // the job ends there meanwhile
	thawAt := time.Now()
	l.Hosts[0].Thaw()
	thawed = true
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	saidDown := false
	for _, e := range journal(t, logDir) {
		// Not said up again while frozen: the pool's connection made
		// before it froze, not yet found silent, was once taken for the
		// host back.
		saidDown = saidDown || e["event"] == "host_down" && e["host"] == "node1"
		if at, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(e["time"])); saidDown && e["event"] == "host_up" && e["host"] == "node1" && at.Before(thawAt) {
			t.Errorf("node1 said up at %v, while it was frozen (until %v)", at, thawAt)
		}
		if e["event"] != "finished" {
			continue
		}
		start, _ := time.Parse(time.RFC3339Nano, e["start"].(string))
		end, _ := time.Parse(time.RFC3339Nano, e["end"].(string))
		if took := end.Sub(start); took > 4*time.Second {
			t.Errorf("the job took %v by the journal, want its own ~2s, not the host's silence", took)
		}
	}
}

// GPUs of several kinds over sshd: a job that asks for a model, memory or
// tags runs where they are; one the lab cannot suit is rejected with what
// the lab has; hosts lists the tags.
func TestSSHGPUKinds(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	old, big := l.Hosts[0], l.Hosts[1]
	old.SetGPUs("0, " + old.UUID(0) + ", Tesla V100-SXM2-16GB, 16160, 0, 0\n")
	big.SetGPUs("0, " + big.UUID(0) + ", NVIDIA H100 80GB HBM3, 81559, 0, 0\n")
	inv := filepath.Join(l.Dir, "kinds.yaml")
	y := fmt.Sprintf("ssh_config: %s\nhosts:\n  - name: node1\n    gpus: auto\n  - name: node2\n    gpus: auto\n    tags: [nvlink]\n", l.SSHConfig)
	if err := os.WriteFile(inv, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	jobs := "[name=h100 model=h100] echo $GPUDISPATCH_HOST\n[name=v100 model=V100] echo $GPUDISPATCH_HOST\n" +
		"[name=big vram=40G] echo $GPUDISPATCH_HOST\n[name=linked tags=nvlink] echo $GPUDISPATCH_HOST\n[name=h200 model=H200] echo never\n"
	r := labRun(t, l, jobs, "-i", inv, "-o", "logs")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1 (one job rejected)\n%s", r.code, r.stderr)
	}
	for job, want := range map[string]string{"h100": "node2\n", "v100": "node1\n", "big": "node2\n", "linked": "node2\n"} {
		if got := readFile(t, filepath.Join(l.Dir, "logs", job+".out")); got != want {
			t.Errorf("job %s ran on %q, want %q", job, got, want)
		}
	}
	want := "model=H200: no GPU of the lab is one (the lab has: node1: 1× Tesla V100-SXM2-16GB (16160 MiB); node2: 1× NVIDIA H100 80GB HBM3 (81559 MiB), tags nvlink)"
	if !strings.Contains(r.stderr, want) {
		t.Errorf("the H200 job is not rejected with %q:\n%s", want, r.stderr)
	}
	if h := labRun(t, l, "", "hosts", "-i", inv); !strings.Contains(h.stdout, "tags: nvlink") || !strings.Contains(h.stdout, "NVIDIA H100 80GB HBM3") {
		t.Errorf("hosts does not show node2's model and tags:\n%s", h.stdout)
	}
	// Run-wide: --model for every line that does not say.
	r = labRun(t, l, "[name=flag] echo $GPUDISPATCH_HOST\n[name=own model=H100] echo $GPUDISPATCH_HOST\n", "-i", inv, "-o", "logs2", "--model", "V100")
	for job, want := range map[string]string{"flag": "node1\n", "own": "node2\n"} {
		if got := readFile(t, filepath.Join(l.Dir, "logs2", job+".out")); r.code != 0 || got != want {
			t.Errorf("--model V100: job %s ran on %q (exit %d), want %q\n%s", job, got, r.code, want, r.stderr)
		}
	}
	if r := labRun(t, l, "echo never\n", "-i", inv, "--vram", "lots"); r.code != 2 || !strings.Contains(r.stderr, "--vram: [vram=lots]") {
		t.Errorf("--vram lots: exit %d, want 2 naming the flag:\n%s", r.code, r.stderr)
	}
}

// A GPU in MIG mode over sshd, as nvidia-smi -L prints an H100's (c1 in
// hosts/nvidiasmi/testdata): each instance is a slot, given to CUDA by its
// UUID; two runs at once never share an instance, each of which has a
// lock of its own; a job asks for an instance by its profile; hosts lists
// the instances under their GPU.
func TestSSHMIG(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 1})
	h := l.Hosts[0]
	dir := filepath.Join("..", "..", "hosts", "nvidiasmi", "testdata")
	h.SetGPUs(readFile(t, filepath.Join(dir, "c1_h100_mig_idle.gpu.txt")))
	h.SetList(readFile(t, filepath.Join(dir, "c1_h100_mig.L.txt")))
	inv := l.Inventory("")
	job := fmt.Sprintf(exclusiveJob, "0.5")
	results := make([]result, 2)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			jobs := strings.Repeat(job+"\n", 4) + "[model=3g.40gb] " + job + "\n"
			results[i] = labRun(t, l, jobs, "-i", inv, "-o", fmt.Sprintf("logs%d", i), "--busy-recheck", "200ms")
		})
	}
	wg.Wait()
	for i, r := range results {
		if r.code != 0 {
			t.Errorf("run %d: exit %d\n%s", i, r.code, r.stderr)
		}
	}
	on := map[string]int{}
	for _, line := range noCollisions(t, l)["node1"] {
		f := strings.Fields(line)
		on[f[len(f)-1]]++
	}
	if len(on) != 4 || on["0"] > 0 || on["MIG-00000000-0000-0000-0000-000000000000"] < 2 {
		t.Errorf("jobs ran with CUDA_VISIBLE_DEVICES %v: want the four MIG instances, never GPU 0 whole, the 3g.40gb one by both model= jobs", on)
	}
	for i := range results {
		for _, e := range journal(t, filepath.Join(l.Dir, fmt.Sprintf("logs%d", i))) {
			if e["event"] == "finished" && e["name"] == nil && !strings.HasPrefix(fmt.Sprint(e["gpus"]), "[0:") {
				t.Errorf("the journal names a job's MIG instance %v, want 0:N", e["gpus"])
			}
		}
	}
	locks, _ := filepath.Glob(filepath.Join(l.Dir, ".locks", "gpudispatch-gpu-GPU-00000000-0000-0000-0000-000000000000-mig*"))
	if len(locks) != 4 {
		t.Errorf("locks %v, want one per MIG instance", locks)
	}
	hosts := labRun(t, l, "", "hosts", "-i", inv)
	for _, want := range []string{`node1 .* up +0 +4\n`, `gpu 0 +NVIDIA H100 80GB HBM3 .* MIG: 4 instances`, `mig 0:0 +MIG 3g.40gb +40960 MiB +1 slot`, `mig 0:3 +MIG 1g.10gb +10240 MiB +1 slot`} {
		if !regexp.MustCompile(want).MatchString(hosts.stdout) {
			t.Errorf("hosts does not say %s:\n%s", want, hosts.stdout)
		}
	}
}
