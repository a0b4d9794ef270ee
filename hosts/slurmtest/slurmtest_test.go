//go:build linux

package slurmtest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The cluster is real: jobs get GPUs from Slurm, with CUDA_VISIBLE_DEVICES
// set and never two on one GPU; jobs beyond the GPUs wait with a reason;
// a node taken down ends its job NODE_FAIL when it may not be requeued.
func TestCluster(t *testing.T) {
	c := Start(t, Options{GPUs: 4})
	out := filepath.Join(c.Dir, "out")
	if err := os.Mkdir(out, 0o777); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 6 {
		sbatch := c.Command("sbatch", "--parsable", "--no-requeue", "--gres=gpu:1", "-o", out+"/%j.log", "-p", c.Partition)
		sbatch.Stdin = strings.NewReader("#!/bin/bash\necho \"$CUDA_VISIBLE_DEVICES\" > " + out + "/$SLURM_JOB_ID.cvd\nsleep 30\n")
		id, err := sbatch.Output()
		if err != nil {
			t.Fatalf("sbatch: %v", err)
		}
		ids = append(ids, strings.TrimSpace(string(id)))
	}
	var states []string
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		states = strings.Fields(c.Run("squeue", "-h", "-o", "%T:%r", "-j", strings.Join(ids, ",")))
		slices.Sort(states)
		if slices.Equal(states[:4], []string{"PENDING:Priority", "PENDING:Resources", "RUNNING:None", "RUNNING:None"}) ||
			strings.Count(strings.Join(states, " "), "RUNNING") == 4 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := strings.Count(strings.Join(states, " "), "RUNNING"); n != 4 {
		t.Fatalf("states %q: want 4 running (4 GPUs), 2 pending", states)
	}
	var cvds []string
	deadline = time.Now().Add(10 * time.Second)
	for len(cvds) < 4 && time.Now().Before(deadline) {
		cvds = nil
		files, _ := filepath.Glob(out + "/*.cvd")
		for _, f := range files {
			b, _ := os.ReadFile(f)
			if s := strings.TrimSpace(string(b)); s != "" {
				cvds = append(cvds, s)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Without cgroups to hide the others, each job sees its own GPU's
	// index: four jobs, four GPUs.
	slices.Sort(cvds)
	if !slices.Equal(cvds, []string{"0", "1", "2", "3"}) {
		t.Errorf("CUDA_VISIBLE_DEVICES of the running jobs: %q, want one job per GPU", cvds)
	}
	c.SetNode("down", "test")
	deadline = time.Now().Add(20 * time.Second)
	var final string
	for time.Now().Before(deadline) {
		final = c.Run("scontrol", "show", "job", ids[0])
		if strings.Contains(final, "JobState=NODE_FAIL") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(final, "JobState=NODE_FAIL") {
		t.Errorf("after the node went down:\n%s", final)
	}
}
