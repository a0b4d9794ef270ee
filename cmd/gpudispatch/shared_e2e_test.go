package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
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
	r := labRun(t, l, strings.Repeat("echo $CUDA_VISIBLE_DEVICES\n", 6), "-i", l.Inventory(""), "-o", "logs")
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
