package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// BenchmarkCondaCost measures what conda: costs per job: 400 jobs on 4
// OpenSSH hosts x 4 GPUs whose conda (laid out as real conda's, behind
// Ubuntu's ~/.bashrc guard) costs a python3 start per call, as real
// conda's does. It reports jobs/s with no env, with conda: torch in the
// inventory (activated once per slot's job shell), and with the
// activation written into every job line, as users do without conda:
// (source .../conda.sh && conda activate torch && ...); and the ms each
// adds per job over no env:
//
//	go test ./cmd/gpudispatch -run '^$' -bench CondaCost -benchtime 2x
func BenchmarkCondaCost(b *testing.B) {
	const hostCount, gpus, jobs = 4, 4, 400
	l := sshtest.Start(b, sshtest.Options{Hosts: hostCount, GPUs: gpus})
	cost := "sleep 0.1"
	if _, err := exec.LookPath("python3"); err == nil {
		cost = "python3 -c ''"
	}
	for _, h := range l.Hosts {
		sshtest.UbuntuBashrc(b, h.Home, sshtest.Conda(b, h.Home, "torch"), "")
		p, _ := os.ReadFile(filepath.Join(h.Home, ".bash_profile"))
		os.WriteFile(filepath.Join(h.Home, ".bash_profile"), append(p, "export FAKE_CONDA_COST=\""+cost+"\"\n"...), 0o644)
	}
	plain := l.Inventory("")
	withConda := filepath.Join(l.Dir, "conda.yaml")
	text, _ := os.ReadFile(plain)
	os.WriteFile(withConda, []byte(strings.Replace(string(text), "hosts:\n", "defaults:\n  conda: torch\nhosts:\n", 1)), 0o644)
	run := func(inv, line, logs string) time.Duration {
		cmd := exec.Command(binary, "-i", inv, "-o", logs, "-q")
		cmd.Env = append(os.Environ(), "HOME="+l.Dir, "SSH_AUTH_SOCK=", lockEnv(l.Dir))
		cmd.Stdin = strings.NewReader(strings.Repeat(line+"\n", jobs))
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("gpudispatch: %v\n%s", err, out)
		}
		return time.Since(start)
	}
	var none, slot, perJob time.Duration
	for i := 0; b.Loop(); i++ {
		none += run(plain, "true", filepath.Join(l.Dir, fmt.Sprintf("none%d", i)))
		slot += run(withConda, "true", filepath.Join(l.Dir, fmt.Sprintf("slot%d", i)))
		perJob += run(plain, "source ~/miniconda3/etc/profile.d/conda.sh && conda activate torch && true", filepath.Join(l.Dir, fmt.Sprintf("job%d", i)))
	}
	n := float64(jobs * b.N)
	b.ReportMetric(n/none.Seconds(), "none-jobs/s")
	b.ReportMetric(n/slot.Seconds(), "conda-key-jobs/s")
	b.ReportMetric(n/perJob.Seconds(), "per-job-activate-jobs/s")
	// Per job, over no env: wall time times the 16 slots that share it.
	extra := func(d time.Duration) float64 {
		return float64(d-none) / n * hostCount * gpus / float64(time.Millisecond)
	}
	b.ReportMetric(extra(slot), "conda-key-ms/job")
	b.ReportMetric(extra(perJob), "per-job-activate-ms/job")
}
