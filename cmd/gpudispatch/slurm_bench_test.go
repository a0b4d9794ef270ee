//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/hosts/slurmtest"
	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// BenchmarkSlurm measures, in one run on a test cluster (a real slurmctld
// and slurmd with 4 fake GPUs) whose login node is a local OpenSSH host:
//   - gpd-submit-jobs/s: 1,000 jobs pinned to the cluster (max_jobs 1000),
//     from gpudispatch's start until Slurm's job id of the last is in the
//     journal: connecting, the sbatch --test-only check and the agent's
//     start included;
//   - loop-submit-jobs/s: a plain `for` loop of `ssh host sbatch ...`
//     through a warm ControlMaster, the same 1,000 jobs; ratio is the first
//     over the second;
//   - squeue-per-min-10 and squeue-per-min-1000: the squeue calls on the
//     login node per minute (a wrapper on its PATH counts them) over 30 s,
//     with 10 and with 1,000 of the run's jobs in the cluster, at the
//     default poll of 5 s. They must not grow with the jobs.
//
// Run it with (it takes about three minutes):
//
//	go test ./cmd/gpudispatch -run '^$' -bench Slurm -benchtime 1x
func BenchmarkSlurm(b *testing.B) {
	const jobs = 1000
	sc := slurmtest.Start(b, slurmtest.Options{GPUs: 4})
	l := sshtest.Start(b, sshtest.Options{Hosts: 1, Env: []string{"SLURM_CONF=" + sc.Conf}})
	login := l.Hosts[0]
	squeue, err := exec.LookPath("squeue")
	if err != nil {
		b.Fatal(err)
	}
	calls := filepath.Join(login.Home, "squeue.calls")
	wrapper := fmt.Sprintf("#!/bin/sh\necho >>%s\nexec %s \"$@\"\n", calls, squeue)
	if err := os.WriteFile(filepath.Join(login.Home, "bin", "squeue"), []byte(wrapper), 0o755); err != nil {
		b.Fatal(err)
	}
	countCalls := func() int { return strings.Count(readFileOr(calls), "\n") }
	dir := b.TempDir()
	lab := sshSlurmLab(b, dir, l, sc, fmt.Sprintf(", max_jobs: %d", jobs))
	// run starts gpudispatch with n jobs that wait in the cluster, waits
	// until all are submitted, counts squeue calls for 30 s, then stops it
	// as a user would (Ctrl-C twice) and waits until the queue is empty.
	run := func(i, n int) (submit time.Duration, perMin float64) {
		logDir := filepath.Join(dir, fmt.Sprintf("logs-%d-%d", n, i))
		cmd := exec.Command(binary, "--inventory", lab, "-o", logDir, "-q")
		cmd.Dir, cmd.Env = dir, append(os.Environ(), lockEnv(dir))
		cmd.Stdin = strings.NewReader(strings.Repeat("sleep 600\n", n))
		var errOut bytes.Buffer
		cmd.Stderr = &errOut
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		defer cmd.Process.Kill()
		for submitted := 0; submitted < n; {
			if time.Since(start) > 5*time.Minute {
				b.Fatalf("%d of %d jobs submitted after 5 minutes\n%s", submitted, n, errOut.String())
			}
			time.Sleep(50 * time.Millisecond)
			if _, err := os.Stat(filepath.Join(logDir, "journal.jsonl")); err != nil {
				continue
			}
			ids := map[any]bool{}
			for _, e := range journal(b, logDir) {
				if e["slurm_job_id"] != nil {
					ids[e["job"]] = true
				}
			}
			submitted = len(ids)
		}
		submit = time.Since(start)
		before := countCalls()
		const window = 30 * time.Second
		time.Sleep(window)
		perMin = float64(countCalls()-before) * float64(time.Minute) / float64(window)
		cmd.Process.Signal(syscall.SIGINT)
		time.Sleep(time.Second)
		cmd.Process.Signal(syscall.SIGINT)
		if err := cmd.Wait(); statusOf(err) != 130 {
			b.Fatalf("gpudispatch after Ctrl-C twice: %v, want exit 130\n%s", err, errOut.String())
		}
		waitQueueEmpty(b, sc, time.Minute)
		return submit, perMin
	}
	control := filepath.Join(l.Dir, "cm-%n")
	if out, err := exec.Command("ssh", "-F", l.SSHConfig, "-o", "ControlMaster=yes", "-o", "ControlPath="+control,
		"-o", "ControlPersist=yes", "-fN", login.Name).CombinedOutput(); err != nil {
		b.Fatalf("ControlMaster: %v\n%s", err, out)
	}
	b.Cleanup(func() {
		exec.Command("ssh", "-F", l.SSHConfig, "-o", "ControlPath="+control, "-O", "exit", login.Name).Run()
	})
	loop := fmt.Sprintf(`for i in $(seq %d); do
  ssh -F %s -o ControlPath=%s %s "sbatch --parsable --partition=%s --gres=gpu:1 --job-name=loop-$i --output=/dev/null --wrap='sleep 600'" >/dev/null || exit
done`, jobs, l.SSHConfig, control, login.Name, sc.Partition)
	var gpd, plain time.Duration
	var few, many float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, perMin := run(i, 10)
		few += perMin
		took, perMin := run(i, jobs)
		gpd += took
		many += perMin

		start := time.Now()
		if out, err := exec.Command("bash", "-c", loop).CombinedOutput(); err != nil {
			b.Fatalf("sbatch loop: %v\n%s", err, out)
		}
		plain += time.Since(start)
		sc.Run("scancel", "-p", sc.Partition)
		waitQueueEmpty(b, sc, time.Minute)
	}
	rate := func(d time.Duration) float64 { return float64(jobs*b.N) / d.Seconds() }
	b.ReportMetric(rate(gpd), "gpd-submit-jobs/s")
	b.ReportMetric(rate(plain), "loop-submit-jobs/s")
	b.ReportMetric(rate(gpd)/rate(plain), "ratio")
	b.ReportMetric(few/float64(b.N), "squeue-per-min-10")
	b.ReportMetric(many/float64(b.N), "squeue-per-min-1000")
}
