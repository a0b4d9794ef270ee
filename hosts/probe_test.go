package hosts

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/jobshell"
	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// fakeNvidiaSMI installs the fake nvidia-smi in a home of its own and
// returns the env that selects that home.
func fakeNvidiaSMI(t *testing.T, csv string, apps ...string) []string {
	home := t.TempDir()
	sshtest.NvidiaSMI(t, home, csv, strings.Join(apps, ""))
	return []string{"HOME=" + home}
}

// perJob reads the login profile per job: these tests choose the home, and
// so the profile, by the job's HOME.
var perJob = jobshell.Supervision{Heartbeat: fast.Heartbeat, Grace: fast.Grace, Login: jobshell.LoginPerJob}

// envRunner runs through Local with extra environment.
type envRunner struct {
	*Local
	env []string
}

func (r envRunner) Run(ctx context.Context, c executor.Command, stdout, stderr io.Writer) (int, error) {
	c.Env = append(append([]string(nil), r.env...), c.Env...)
	return r.Local.Run(ctx, c, stdout, stderr)
}

func TestProbeGPUsThroughLoginShell(t *testing.T) {
	t.Parallel()
	env := fakeNvidiaSMI(t, "0, GPU-a, Fake GPU, 100, 1, 2\n1, GPU-b, Fake GPU, 100, 3, 4\n")
	gpus, err := ProbeGPUs(context.Background(), envRunner{local(t, perJob), env})
	if err != nil || len(gpus) != 2 || gpus[1].UUID != "GPU-b" || gpus[1].Utilization != 4 {
		t.Fatalf("got %+v, %v", gpus, err)
	}
}

// Compute processes are counted per GPU, and make it busy whatever its
// memory says; so does memory above the threshold.
func TestProbeGPUsBusy(t *testing.T) {
	t.Parallel()
	env := fakeNvidiaSMI(t, "0, GPU-a, Fake GPU, 100, 1, 2\n1, GPU-b, Fake GPU, 100, 30, 4\n2, GPU-c, Fake GPU, 81920, 700, 0\n",
		"GPU-b, 123, 30\n", "GPU-b, 124, [N/A]\n")
	gpus, err := ProbeGPUs(context.Background(), envRunner{local(t, perJob), env})
	if err != nil || len(gpus) != 3 {
		t.Fatalf("got %+v, %v", gpus, err)
	}
	for i, want := range []string{"", "2 processes, 30 MiB used", "700 MiB used (more than 500)"} {
		if got := gpus[i].BusyWhy(500); got != want {
			t.Errorf("GPU %d (%+v): busy %q, want %q", i, gpus[i], got, want)
		}
	}
}

func TestProbeGPUsWithoutNvidiaSMI(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/usr/bin/nvidia-smi"); err == nil {
		t.Skip("nvidia-smi is installed here")
	}
	home := t.TempDir()
	_, err := ProbeGPUs(context.Background(), envRunner{local(t, perJob), []string{"HOME=" + home, "PATH=/nonexistent"}})
	if !errors.Is(err, ErrNoNvidiaSMI) {
		t.Fatalf("err = %v, want ErrNoNvidiaSMI", err)
	}
}

// Every look at a host's GPUs returns within its limit, and a host whose
// last look still hangs is not looked at again until that one returns.
func TestProbeLimit(t *testing.T) {
	t.Parallel()
	var p probes
	ctx := context.Background()
	const limit = 100 * time.Millisecond
	quick := func(context.Context) (any, error) { return nil, nil }
	stuck := make(chan struct{})
	hangs := func(context.Context) (any, error) { <-stuck; return nil, nil } // deaf to its context, as a process in state D
	obeys := func(ctx context.Context) (any, error) { <-ctx.Done(); return nil, ctx.Err() }
	for _, step := range []struct {
		name, host string
		look       func(context.Context) (any, error)
		still      bool // want a HungError saying an earlier look still hangs
		hung       bool
	}{
		{"an answer", "a", quick, false, false},
		{"a look that hangs", "a", hangs, false, true},
		{"again while it hangs: not started", "a", quick, true, true},
		{"another host meanwhile", "b", quick, false, false},
		{"a look that stops at its limit", "b", obeys, false, true},
		{"once it stopped: started", "b", quick, false, false},
	} {
		if step.name == "once it stopped: started" {
			// The look returns just after its limit, when its context ends.
			p.mu.Lock()
			done := p.cur["b"].done
			p.mu.Unlock()
			<-done
		}
		// Only a look that hangs meets its limit: the others get room, so
		// that a loaded machine does not make them late.
		l := limit
		if !step.hung {
			l = time.Minute
		}
		start := time.Now()
		_, err := p.run(ctx, step.host, "nvidia-smi", l, step.look)
		took := time.Since(start)
		var he *HungError
		switch {
		case step.hung != errors.As(err, &he), step.hung && he.Still != step.still:
			t.Fatalf("%s: %v", step.name, err)
		case step.hung && !errors.Is(err, executor.ErrProbeTimeout):
			t.Fatalf("%s: %v does not wrap ErrProbeTimeout", step.name, err)
		case step.hung && took > limit+5*time.Second:
			t.Fatalf("%s: took %v, far over the limit %v", step.name, took, limit)
		}
	}
	close(stuck)
	p.mu.Lock()
	done := p.cur["a"].done
	p.mu.Unlock()
	<-done
	if _, err := p.run(ctx, "a", "nvidia-smi", time.Minute, quick); err != nil {
		t.Errorf("once the hung look returned, a new one: %v", err)
	}
}

// A look under way within its limit is not a look that hangs: looks at
// nvidia-smi that come meanwhile (a job's busy check on each GPU of a host
// at once) join it and get its answer, asked once; a look of another kind
// waits for it, then asks.
func TestProbeJoinsALookUnderWay(t *testing.T) {
	t.Parallel()
	var p probes
	ctx := context.Background()
	var mu sync.Mutex
	asked := map[string]int{}
	slow := func(what string) func(context.Context) (any, error) {
		return func(context.Context) (any, error) {
			mu.Lock()
			asked[what]++
			mu.Unlock()
			time.Sleep(300 * time.Millisecond)
			return what, nil
		}
	}
	type answer struct {
		v   any
		err error
	}
	answers := make(chan answer, 5)
	for i := range 5 {
		what := "nvidia-smi"
		if i == 4 {
			what = "the look at its GPU locks"
		}
		go func() {
			v, err := p.run(ctx, "a", what, time.Minute, slow(what))
			answers <- answer{v, err}
		}()
		time.Sleep(20 * time.Millisecond)
	}
	got := map[any]int{}
	for range 5 {
		a := <-answers
		if a.err != nil {
			t.Fatalf("a look while another was under way: %v", a.err)
		}
		got[a.v]++
	}
	if got["nvidia-smi"] != 4 || got["the look at its GPU locks"] != 1 {
		t.Errorf("answers %v, want 4 from nvidia-smi and 1 from the lock look", got)
	}
	if asked["nvidia-smi"] != 1 || asked["the look at its GPU locks"] != 1 {
		t.Errorf("asked %v, want nvidia-smi once for the four, the lock look once", asked)
	}
}

// nvidia-smi -L is asked only when a GPU's utilisation is [N/A], as in MIG
// mode (nvidia-smi can take a second a call): then the instances it lists
// come with the GPU.
func TestProbeGPUsMIG(t *testing.T) {
	t.Parallel()
	list := "GPU 0: NVIDIA A100 80GB PCIe (UUID: GPU-932b)\n  MIG 3g.40gb     Device  0: (UUID: MIG-0929)\n  MIG 3g.40gb     Device  1: (UUID: MIG-3adb)\n"
	tests := []struct {
		name, csv string
		askedL    bool
		instances int
	}{
		{"whole GPUs", "0, GPU-932b, NVIDIA A100 80GB PCIe, 81920, 1, 2\n", false, 0},
		{"MIG mode", "0, GPU-932b, NVIDIA A100 80GB PCIe, 81920, 25, [N/A]\n", true, 2},
	}
	for _, tt := range tests {
		env := fakeNvidiaSMI(t, tt.csv)
		home := strings.TrimPrefix(env[0], "HOME=")
		if err := os.WriteFile(filepath.Join(home, "gpus.L"), []byte(list), 0o644); err != nil {
			t.Fatal(err)
		}
		gpus, err := ProbeGPUs(context.Background(), envRunner{local(t, perJob), env})
		if err != nil || len(gpus) != 1 || len(gpus[0].MIG) != tt.instances {
			t.Errorf("%s: %+v, %v; want %d instances", tt.name, gpus, err, tt.instances)
		}
		calls, _ := os.ReadFile(filepath.Join(home, "nvidia-smi.calls"))
		if asked := strings.Contains(string(calls), "-L\n"); asked != tt.askedL {
			t.Errorf("%s: nvidia-smi -L asked %v, want %v (calls: %q)", tt.name, asked, tt.askedL, calls)
		}
	}
}
