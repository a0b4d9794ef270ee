//go:build linux

package slurm

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/slurmtest"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// localCluster is a Cluster whose login node is this machine, on a real
// Slurm cluster started for the test.
func localCluster(t *testing.T, sc *slurmtest.Cluster, s inventory.Slurm) *Cluster {
	t.Helper()
	t.Setenv("SLURM_CONF", sc.Conf)
	if s.Partition == "" {
		s.Partition = sc.Partition
	}
	if s.Workdir == "" {
		s.Workdir = t.TempDir()
	}
	if s.Poll == 0 {
		s.Poll = time.Second
	}
	if s.MaxJobs == 0 {
		s.MaxJobs = 16
	}
	c := New(Options{Name: "hpc", Slurm: s, Spawn: spawn.Local, Heartbeat: time.Second, Grace: time.Second})
	t.Cleanup(c.Close)
	return c
}

// A job on the real cluster: Slurm's GPU in CUDA_VISIBLE_DEVICES, stdout
// and stderr apart, the exit status, and the start Slurm gives (not the
// poll's that saw it).
func TestRunOne(t *testing.T) {
	sc := slurmtest.Start(t, slurmtest.Options{})
	c := localCluster(t, sc, inventory.Slurm{Poll: 3 * time.Second})
	var out, errs sshtest.Buffer
	var progress []executor.Progress
	cmd := executor.Command{Script: "echo cvd=$CUDA_VISIBLE_DEVICES; date +%s >&2; exit 3", Tag: "R1-1-1", GPUs: 1,
		Env:      []string{"GPUDISPATCH_JOB_ID=1"},
		Progress: func(p executor.Progress) { progress = append(progress, p) }}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	submitted := time.Now().Unix()
	code, err := c.Run(ctx, cmd, &out, &errs)
	t.Logf("code %d err %v out %q err %q progress %+v", code, err, out.String(), errs.String(), progress)
	if err != nil || code != 3 || out.String() != "cvd=0\n" {
		t.Fatalf("got %d, %v", code, err)
	}
	ran, err := strconv.ParseInt(strings.TrimSpace(errs.String()), 10, 64)
	if err != nil {
		t.Fatalf("stderr %q, want the job's start", errs.String())
	}
	i := slices.IndexFunc(progress, func(p executor.Progress) bool { return p.Running })
	if i < 0 {
		t.Fatal("never told running")
	}
	// Between the submission and the job's own clock (its login shell may
	// take seconds on a loaded machine), not when a later poll saw it.
	if started := progress[i].Started.Unix(); started < submitted || started > ran {
		t.Errorf("Slurm started the job at %d; it was submitted at %d and says it ran at %d", started, submitted, ran)
	}
}

// A cancel that did not reach the cluster is carried out by Reap: the job,
// left running in Slurm by a coordinator that went away, is cancelled
// there by its name.
func TestReapCancelsTheJobInSlurm(t *testing.T) {
	sc := slurmtest.Start(t, slurmtest.Options{})
	c := localCluster(t, sc, inventory.Slurm{})
	const tag = "R2-1-1"
	ctx, detach := context.WithCancelCause(context.Background())
	progress := make(chan executor.Progress, 16)
	cmd := executor.Command{Script: "sleep 300", Tag: tag, GPUs: 1,
		Progress: func(p executor.Progress) { progress <- p }}
	done := make(chan error, 1)
	go func() {
		_, err := c.Run(ctx, cmd, new(sshtest.Buffer), new(sshtest.Buffer))
		done <- err
	}()
	for p := range progress {
		if p.Running {
			break
		}
	}
	detach(executor.ErrDetached)
	if err := <-done; !errors.Is(err, executor.ErrDetached) {
		t.Fatalf("Run after detach: %v", err)
	}
	state := func() string {
		out, err := exec.Command("squeue", "--noheader", "--name=gpd-"+tag, "--format=%T").Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	if s := state(); s != "RUNNING" {
		t.Fatalf("the detached job is %q in squeue, want RUNNING", s)
	}
	if err := c.Reap(context.Background(), tag); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); state() != ""; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the job is still %q in squeue after Reap", state())
		}
	}
}

// A job over two nodes of a real two-node cluster is one batch job: its
// line runs once on each node, told its rank and the job's shape, with
// the node's GPUs, each part's output home in its own writers; a part
// that fails ends the other (srun --kill-on-bad-exit) and the job ends
// with its exit status.
func TestRunOverTwoNodes(t *testing.T) {
	sc := slurmtest.Start(t, slurmtest.Options{Nodes: 2, GPUs: 2})
	c := localCluster(t, sc, inventory.Slurm{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out, errs, out1, errs1 sshtest.Buffer
	cmd := executor.Command{Script: `echo "rank=$NODE_RANK of $NNODES master=$MASTER_ADDR port=$MASTER_PORT world=$WORLD_SIZE nodes=$GPUDISPATCH_NODES cvd=$CUDA_VISIBLE_DEVICES"; echo "err $NODE_RANK" >&2`,
		Tag: "R3-1-1", GPUs: 2, Nodes: 2, PartLogs: []executor.PartLog{{Stdout: &out1, Stderr: &errs1}}}
	code, err := c.Run(ctx, cmd, &out, &errs)
	if err != nil || code != 0 {
		t.Fatalf("got %d, %v: %s", code, err, errs.String())
	}
	if errs.String() != "err 0\n" || errs1.String() != "err 1\n" {
		t.Errorf("stderr of part 0 %q, of part 1 %q", errs.String(), errs1.String())
	}
	lines := []string{strings.TrimSpace(out.String()), strings.TrimSpace(out1.String())}
	port := strings.Fields(lines[0])[4]
	for i, line := range lines {
		want := fmt.Sprintf("rank=%d of 2 master=gpd1 %s world=4 nodes=gpd1,gpd2 cvd=0,1", i, port)
		if line != want || port == "port=" {
			t.Errorf("node %d said %q, want %q", i, line, want)
		}
	}
	begin := time.Now()
	cmd = executor.Command{Script: `if [ "$NODE_RANK" = 1 ]; then exit 7; fi; sleep 120`, Tag: "R3-2-1", GPUs: 1, Nodes: 2}
	code, err = c.Run(ctx, cmd, &out, &errs)
	if err != nil || code != 7 {
		t.Fatalf("a job whose part 1 exits 7: got %d, %v", code, err)
	}
	if took := time.Since(begin); took > 60*time.Second {
		t.Errorf("the job took %s: its other part was not ended", took)
	}
}
