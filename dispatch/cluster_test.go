package dispatch

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// clusterExec plays a Slurm cluster: each job is pending, then runs. A
// command says how its first attempt ends: "limit" (refused for a limit),
// "nodefail" (lost by Slurm), "timelimit", "block" (until cancelled);
// later attempts and other commands succeed.
type clusterExec struct {
	mu       sync.Mutex
	attempts map[string]int
	inside   int // jobs in the cluster now
	peak     int
	cmds     []executor.Command
}

func (c *clusterExec) Run(ctx context.Context, host string, cmd executor.Command, stdout, _ io.Writer) (int, error) {
	c.mu.Lock()
	c.attempts[cmd.Script]++
	first := c.attempts[cmd.Script] == 1
	c.cmds = append(c.cmds, cmd)
	c.inside++
	c.peak = max(c.peak, c.inside)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.inside--
		c.mu.Unlock()
	}()
	if first && cmd.Script == "limit" {
		return -1, fmt.Errorf("%s: %w: QOSMaxSubmitJobPerUserLimit", host, executor.ErrLimit)
	}
	// dispatch records "submitting" as it hands the job over, then this.
	cmd.Progress(executor.Progress{ID: "42", Reason: "Resources"})
	if first && cmd.Script == "block" {
		<-ctx.Done()
		return -1, context.Cause(ctx)
	}
	cmd.Progress(executor.Progress{ID: "42", Running: true})
	io.WriteString(stdout, "ran\n")
	switch {
	case first && cmd.Script == "nodefail":
		return -1, fmt.Errorf("%s: Slurm job 42 %w: NODE_FAIL", host, executor.ErrJobLost)
	case first && cmd.Script == "timelimit":
		return -1, fmt.Errorf("%s: %w", host, executor.ErrTimeLimit)
	}
	return 0, nil
}

func (*clusterExec) WaitUp(context.Context, string) error { return nil }
func (*clusterExec) Fetch(context.Context, string, executor.Return, string) (executor.Returned, error) {
	return executor.Returned{}, nil
}
func (*clusterExec) Reap(context.Context, string, string) error { return nil }
func (*clusterExec) LockGPU(context.Context, string, executor.GPUID, string) (executor.GPULock, error) {
	return nil, fmt.Errorf("no locks on a cluster")
}
func (*clusterExec) ProbeGPUs(context.Context, string) ([]executor.GPU, error) {
	return nil, fmt.Errorf("no nvidia-smi on a cluster")
}

func clusterInventory(maxJobs int) *inventory.Inventory {
	return &inventory.Inventory{SSHConfig: "none", Hosts: []inventory.Host{{
		Name: "hpc", Local: true, SlotsPerGPU: 1,
		Slurm: &inventory.Slurm{Partition: "gpu", MaxJobs: maxJobs, Poll: time.Second},
	}}}
}

// Jobs on a cluster: one slot each whatever gpus= asks (passed on to
// Slurm), no CUDA_VISIBLE_DEVICES, pending then started with Slurm's id; a
// limit refusal uses no attempt, a job Slurm lost is retried, Slurm's time
// limit is a timeout, a GPU pin is rejected.
func TestCluster(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		ex := &clusterExec{attempts: map[string]int{}}
		input := "[gpus=3] ok\nlimit\nnodefail\ntimelimit\n@hpc:1 pinned\n"
		sum, err := Run(context.Background(), Options{Inventory: clusterInventory(2), Executor: ex, LogDir: dir, Retries: 1},
			[]Input{{Name: "jobs", R: strings.NewReader(input)}})
		if err != nil {
			t.Fatal(err)
		}
		if sum.Counts[EventFinished] != 3 || sum.Counts[EventTimeout] != 1 || sum.Counts[EventRejected] != 1 {
			t.Errorf("counts %v, want 3 finished, 1 timeout, 1 rejected", sum.Counts)
		}
		if ex.peak > 2 {
			t.Errorf("%d jobs in the cluster at once, max_jobs is 2", ex.peak)
		}
		for _, c := range ex.cmds {
			if slices.ContainsFunc(c.Env, func(kv string) bool { return strings.HasPrefix(kv, "CUDA_VISIBLE_DEVICES=") }) {
				t.Errorf("%q got CUDA_VISIBLE_DEVICES: Slurm sets it", c.Script)
			}
			if want := map[bool]int{true: 3, false: 1}[c.Script == "ok"]; c.GPUs != want {
				t.Errorf("%q asks Slurm for %d GPUs, want %d", c.Script, c.GPUs, want)
			}
		}
		story := map[string][]string{}
		for _, e := range readJournal(t, dir) {
			if e.Job == "" {
				continue
			}
			story[e.Command] = append(story[e.Command], string(e.Event))
			if e.Event == EventStarted && e.SlurmJobID != "42" {
				t.Errorf("started without Slurm's job id: %+v", e)
			}
			if len(e.GPUs) > 0 {
				t.Errorf("%s event names GPUs of the cluster, which Slurm gives: %+v", e.Event, e)
			}
		}
		want := map[string][]string{
			"ok":        {"queued", "pending", "pending", "started", "finished"},
			"limit":     {"queued", "pending", "retried", "pending", "pending", "started", "finished"},
			"nodefail":  {"queued", "pending", "pending", "started", "lost", "retried", "pending", "pending", "started", "finished"},
			"timelimit": {"queued", "pending", "pending", "started", "timeout"},
			"pinned":    {"rejected"},
		}
		for cmd, w := range want {
			if !slices.Equal(story[cmd], w) {
				t.Errorf("%s: %v, want %v", cmd, story[cmd], w)
			}
		}
		if ex.attempts["limit"] != 2 {
			t.Errorf("the refused job was tried %d times, want 2", ex.attempts["limit"])
		}
	})
}

// A drain cancels the jobs a cluster still holds pending; the running
// ones finish.
func TestClusterDrainCancelsPending(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		ex := &clusterExec{attempts: map[string]int{}}
		drain := make(chan struct{})
		pr, pw := io.Pipe()
		done := make(chan *Summary)
		go func() {
			sum, err := Run(context.Background(), Options{Inventory: clusterInventory(4), Executor: ex, LogDir: dir, Drain: drain},
				[]Input{{Name: "jobs", R: pr}})
			if err != nil {
				t.Error(err)
			}
			done <- sum
		}()
		io.WriteString(pw, "block\n")
		deadline := time.Now().Add(10 * time.Second)
		for !slices.ContainsFunc(readJournal(t, dir), func(e Event) bool { return e.Message == "Resources" }) {
			if time.Now().After(deadline) {
				t.Fatal("the job never became pending")
			}
			time.Sleep(10 * time.Millisecond)
		}
		close(drain)
		sum := <-done
		pw.Close()
		if sum.Counts[EventCancelled] != 1 {
			t.Errorf("counts %v, want the pending job cancelled", sum.Counts)
		}
	})
}

// Adopt finds nothing to follow: the fake keeps no attempt.
func (*clusterExec) Adopt(context.Context, string, executor.Command, int64, int64, io.Writer, io.Writer) (int, time.Time, error) {
	return -1, time.Now(), executor.ErrJobLost
}

// typedCluster is a clusterExec whose cluster names its GPUs' gres types.
type typedCluster struct {
	*clusterExec
	types []string
}

func (c typedCluster) GPUTypes(string) []string { return c.types }

// A job that asks for a model goes to a cluster one of whose gres types
// names it, with that type (--gres=gpu:TYPE:N); one asking for a model it
// has not, or for memory, is rejected with what the lab has, as it is on a
// cluster that names no type.
func TestClusterGPUTypes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		types []string
		// want is the GPUType each command is sent with; rejected, why
		// the others are rejected.
		want     map[string]string
		rejected map[string]string
	}{
		{name: "gres types", types: []string{"v100", "a100_80gb"},
			want: map[string]string{"a": "a100_80gb", "v": "v100", "any": "", "either": "v100"},
			rejected: map[string]string{
				"h":   "model=H100: no GPU of the lab is one (the lab has: hpc: a Slurm cluster, gres types v100,a100_80gb)",
				"mem": "vram=40G: no GPU of the lab is one (the lab has: hpc: a Slurm cluster, gres types v100,a100_80gb)"}},
		{name: "no types", want: map[string]string{"any": ""},
			rejected: map[string]string{
				"a":      "model=A100: no GPU of the lab is one (the lab has: hpc: a Slurm cluster that names no GPU type)",
				"v":      "model=v100: no GPU of the lab is one (the lab has: hpc: a Slurm cluster that names no GPU type)",
				"either": "model=H100|V100: no GPU of the lab is one (the lab has: hpc: a Slurm cluster that names no GPU type)",
				"h":      "model=H100: no GPU of the lab is one (the lab has: hpc: a Slurm cluster that names no GPU type)",
				"mem":    "vram=40G: no GPU of the lab is one (the lab has: hpc: a Slurm cluster that names no GPU type)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			ex := typedCluster{&clusterExec{attempts: map[string]int{}}, tt.types}
			input := "[model=A100 gpus=2] a\n[model=v100] v\n[model=H100|V100] either\n[model=H100] h\n[vram=40G] mem\nany\n"
			if _, err := Run(context.Background(), Options{Inventory: clusterInventory(4), Executor: ex, LogDir: dir},
				[]Input{{Name: "jobs", R: strings.NewReader(input)}}); err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, c := range ex.cmds {
				got[c.Script] = c.GPUType
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("sent with types %v, want %v", got, tt.want)
			}
			rejected := map[string]string{}
			for _, e := range readJournal(t, dir) {
				if e.Event == EventRejected {
					rejected[e.Command] = e.Error
				}
			}
			if !maps.Equal(rejected, tt.rejected) {
				t.Errorf("rejected %q\nwant %q", rejected, tt.rejected)
			}
		})
	}
}

// A job over several hosts on a Slurm cluster (or pinned to one) is one
// batch job of that many nodes, in one slot: the cluster runs its parts,
// the coordinator gives them no ranks of its own.
func TestClusterJobOverNodes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ex := &clusterExec{attempts: map[string]int{}}
		sum, err := Run(context.Background(), Options{Inventory: clusterInventory(2), Executor: ex, LogDir: t.TempDir()},
			[]Input{{Name: "jobs", R: strings.NewReader("[nodes=3 gpus=4] ok\n@hpc [nodes=2] pinned\n")}})
		if err != nil {
			t.Fatal(err)
		}
		if sum.Counts[EventFinished] != 2 || len(ex.cmds) != 2 {
			t.Fatalf("counts %v, %d submitted", sum.Counts, len(ex.cmds))
		}
		for _, c := range ex.cmds {
			want := map[string][2]int{"ok": {3, 4}, "pinned": {2, 1}}[c.Script]
			if c.Nodes != want[0] || c.GPUs != want[1] || len(c.PartLogs) != want[0]-1 || slices.ContainsFunc(c.Env, func(kv string) bool { return strings.HasPrefix(kv, "NODE_RANK=") }) {
				t.Errorf("%s: submitted %d nodes of %d GPUs, %d parts' logs, env %v; want %v, no rank from the coordinator", c.Script, c.Nodes, c.GPUs, len(c.PartLogs), c.Env, want)
			}
		}
	})
}
