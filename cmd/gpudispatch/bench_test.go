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

// BenchmarkDispatchVsControlMaster puts gpudispatch next to the usual
// hand-made alternative on the same lab in the same run: 400 `true` jobs on
// 4 OpenSSH hosts x 4 GPUs, against `xargs -P16` + `ssh` through a warm
// ControlMaster per host (which does not even give each job its own GPU).
// It reports both rates and their ratio:
//
//	go test ./cmd/gpudispatch -run '^$' -bench DispatchVsControlMaster -benchtime 3x
func BenchmarkDispatchVsControlMaster(b *testing.B) {
	const jobs, hostCount, gpus = 400, 4, 4
	l := sshtest.Start(b, sshtest.Options{Hosts: hostCount, GPUs: gpus})
	inv := filepath.Join(l.Dir, "bench.yaml")
	var y strings.Builder
	fmt.Fprintf(&y, "ssh_config: %s\nhosts:\n", l.SSHConfig)
	for _, h := range l.Hosts {
		fmt.Fprintf(&y, "  - name: %s\n    gpus: %d\n", h.Name, gpus)
	}
	if err := os.WriteFile(inv, []byte(y.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	// Warm ControlMasters, one per host.
	control := filepath.Join(l.Dir, "cm-%n")
	for _, h := range l.Hosts {
		out, err := exec.Command("ssh", "-F", l.SSHConfig, "-o", "ControlMaster=yes", "-o", "ControlPath="+control,
			"-o", "ControlPersist=yes", "-fN", h.Name).CombinedOutput()
		if err != nil {
			b.Fatalf("ControlMaster for %s: %v\n%s", h.Name, err, out)
		}
		name := h.Name
		b.Cleanup(func() {
			exec.Command("ssh", "-F", l.SSHConfig, "-o", "ControlPath="+control, "-O", "exit", name).Run()
		})
	}
	var targets strings.Builder
	for i := 0; i < jobs; i++ {
		fmt.Fprintln(&targets, l.Hosts[i%hostCount].Name)
	}
	var gpd, cm time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		logs := filepath.Join(l.Dir, fmt.Sprintf("logs%d", i))
		cmd := exec.Command(binary, "-i", inv, "-o", logs, "-q")
		cmd.Env = append(os.Environ(), "HOME="+l.Dir, "SSH_AUTH_SOCK=", lockEnv(l.Dir))
		cmd.Stdin = strings.NewReader(strings.Repeat("true\n", jobs))
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("gpudispatch: %v\n%s", err, out)
		}
		gpd += time.Since(start)

		x := exec.Command("xargs", "-P16", "-I{}", "ssh", "-F", l.SSHConfig, "-o", "ControlPath="+control, "{}", "true")
		x.Stdin = strings.NewReader(targets.String())
		start = time.Now()
		if out, err := x.CombinedOutput(); err != nil {
			b.Fatalf("xargs + ssh: %v\n%s", err, out)
		}
		cm += time.Since(start)
	}
	gpdRate := float64(jobs*b.N) / gpd.Seconds()
	cmRate := float64(jobs*b.N) / cm.Seconds()
	b.ReportMetric(gpdRate, "gpd-jobs/s")
	b.ReportMetric(cmRate, "controlmaster-jobs/s")
	b.ReportMetric(gpdRate/cmRate, "ratio")
}
