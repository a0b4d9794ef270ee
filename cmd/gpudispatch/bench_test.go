package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// BenchmarkDispatchVsControlMaster puts gpudispatch next to the usual
// hand-made alternative on the same lab in the same run: 400 `true` jobs on
// 4 OpenSSH hosts x 4 GPUs, against `xargs -P16` + `ssh` through a warm
// ControlMaster per host (which does not even give each job its own GPU).
// gpudispatch runs from its own start to its end: connecting, locking the
// 16 GPUs, journal and two log files per job included. It reports:
//   - gpd-jobs/s, with the log dir on tmpfs (/dev/shm) when there is one:
//     the ControlMaster pool writes no files, so this compares dispatching;
//   - gpd-disk-jobs/s, with the log dir beside the lab, on TMPDIR's disk;
//   - gpd-sync-jobs/s, with --sync of a 50-file project (the snapshot is
//     taken by each run, shipped by the first), and sync-cost, its time
//     over gpd-jobs/s's;
//   - controlmaster-jobs/s, and ratio = gpd-jobs/s / controlmaster-jobs/s;
//   - login-floor-jobs/s: `xargs -P16 bash -lc true` here, no SSH at all,
//     with a lab host's home. Every gpudispatch job runs a login shell,
//     which `ssh host true` does not: this is the ceiling;
//   - slow-gpd-jobs/s, slow-controlmaster-jobs/s and slow-ratio: the same
//     with a ~/.bashrc that costs ~50 ms, as `conda init` or `pyenv init`
//     can (a python start, `sleep 0.05` where there is no python3), sourced
//     by the login profile as Debian's is, and by bash for `ssh host cmd`.
//     gpudispatch reads it once per slot;
//   - share-alone: gpd-jobs/s over the same run's with --no-share: fair
//     share costs a run alone nothing (about 1);
//   - gpd-collisions: times two of gpudispatch's jobs ran on one GPU at once,
//     from the journal (each job's start and end bracket its processes). It
//     fails the benchmark unless 0.
//
// Run it with:
//
//	go test ./cmd/gpudispatch -run '^$' -bench DispatchVsControlMaster -benchtime 3x
//
// GPUDISPATCH_BENCH_JOBS=2000 runs more jobs than 400, so that what a run
// pays once (connecting, a login shell per slot) weighs less.
func BenchmarkDispatchVsControlMaster(b *testing.B) {
	const hostCount, gpus = 4, 4
	jobs := 400
	if n, err := strconv.Atoi(os.Getenv("GPUDISPATCH_BENCH_JOBS")); err == nil && n > 0 {
		jobs = n
	}
	l := sshtest.Start(b, sshtest.Options{Hosts: hostCount, GPUs: gpus})
	inv := benchInventory(b, l, gpus)
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
	fast := l.Dir
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		dir, err := os.MkdirTemp("/dev/shm", "gpd-bench")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		fast = dir
	}
	collisions := 0
	// A project of 50 small files for the runs with --sync.
	proj := filepath.Join(l.Dir, "proj")
	for i := range 50 {
		os.MkdirAll(filepath.Join(proj, fmt.Sprint("d", i%5)), 0o755)
		os.WriteFile(filepath.Join(proj, fmt.Sprint("d", i%5), fmt.Sprint("f", i, ".py")), []byte(fmt.Sprint("print(", i, ")\n")), 0o644)
	}
	dispatch := func(logs string, extra ...string) time.Duration {
		cmd := exec.Command(binary, append([]string{"-i", inv, "-o", logs, "-q"}, extra...)...)
		cmd.Env = append(os.Environ(), "HOME="+l.Dir, "SSH_AUTH_SOCK=", lockEnv(l.Dir))
		cmd.Stdin = strings.NewReader(strings.Repeat("true\n", jobs))
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("gpudispatch: %v\n%s", err, out)
		}
		took := time.Since(start)
		collisions += overlaps(b, logs)
		return took
	}
	pool := func() time.Duration {
		x := exec.Command("xargs", "-P16", "-I{}", "ssh", "-F", l.SSHConfig, "-o", "ControlPath="+control, "{}", "true")
		x.Stdin = strings.NewReader(targets.String())
		start := time.Now()
		if out, err := x.CombinedOutput(); err != nil {
			b.Fatalf("xargs + ssh: %v\n%s", err, out)
		}
		return time.Since(start)
	}
	// bashrc makes every host's ~/.bashrc say what, sourced by its profile.
	bashrc := func(what string) {
		for _, h := range l.Hosts {
			profile := filepath.Join(h.Home, ".bash_profile")
			p, _ := os.ReadFile(profile)
			if !strings.Contains(string(p), ". ~/.bashrc") {
				os.WriteFile(profile, append(p, ". ~/.bashrc\n"...), 0o644)
			}
			os.WriteFile(filepath.Join(h.Home, ".bashrc"), []byte(what), 0o644)
		}
	}
	// A python start, as conda's or pyenv's set-up costs, else a sleep.
	slowBashrc := "sleep 0.05\n"
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		slowBashrc = "/usr/bin/python3 -c ''\n"
	}
	var gpd, disk, cm, floor, slowGPD, slowCM, synced, noShare time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bashrc("")
		gpd += dispatch(filepath.Join(fast, fmt.Sprintf("logs%d", i)))
		noShare += dispatch(filepath.Join(fast, fmt.Sprintf("alone%d", i)), "--no-share")
		disk += dispatch(filepath.Join(l.Dir, fmt.Sprintf("logs%d", i)))
		synced += dispatch(filepath.Join(fast, fmt.Sprintf("sync%d", i)), "--sync", proj)
		cm += pool()
		bashrc(slowBashrc)
		slowGPD += dispatch(filepath.Join(fast, fmt.Sprintf("slow%d", i)))
		slowCM += pool()
		bashrc("")

		x := exec.Command("xargs", "-P16", "-I{}", "bash", "-lc", "{}")
		x.Env = append(os.Environ(), "HOME="+l.Hosts[0].Home)
		x.Stdin = strings.NewReader(strings.Repeat("true\n", jobs))
		start := time.Now()
		if out, err := x.CombinedOutput(); err != nil {
			b.Fatalf("xargs + bash -lc: %v\n%s", err, out)
		}
		floor += time.Since(start)
	}
	rate := func(d time.Duration) float64 { return float64(jobs*b.N) / d.Seconds() }
	b.ReportMetric(rate(gpd), "gpd-jobs/s")
	b.ReportMetric(rate(disk), "gpd-disk-jobs/s")
	b.ReportMetric(rate(synced), "gpd-sync-jobs/s")
	b.ReportMetric(synced.Seconds()/gpd.Seconds(), "sync-cost")
	b.ReportMetric(rate(cm), "controlmaster-jobs/s")
	b.ReportMetric(rate(floor), "login-floor-jobs/s")
	b.ReportMetric(rate(gpd)/rate(cm), "ratio")
	b.ReportMetric(rate(gpd)/rate(noShare), "share-alone")
	b.ReportMetric(rate(slowGPD), "slow-gpd-jobs/s")
	b.ReportMetric(rate(slowCM), "slow-controlmaster-jobs/s")
	b.ReportMetric(rate(slowGPD)/rate(slowCM), "slow-ratio")
	b.ReportMetric(float64(collisions), "gpd-collisions")
	if collisions > 0 {
		b.Errorf("%d times two jobs ran on one GPU at once", collisions)
	}
}

// overlaps counts the pairs of jobs in logDir's journal whose runs on one
// GPU overlap in time.
func overlaps(t testing.TB, logDir string) int {
	type run struct{ start, end time.Time }
	byGPU := map[string][]run{}
	for _, e := range journal(t, logDir) {
		start, err1 := time.Parse(time.RFC3339Nano, fmt.Sprint(e["start"]))
		end, err2 := time.Parse(time.RFC3339Nano, fmt.Sprint(e["end"]))
		if e["event"] != "finished" || err1 != nil || err2 != nil {
			continue
		}
		for _, g := range e["gpus"].([]any) {
			key := fmt.Sprint(e["host"], ":", g)
			byGPU[key] = append(byGPU[key], run{start, end})
		}
	}
	n := 0
	for _, runs := range byGPU {
		slices.SortFunc(runs, func(a, b run) int { return a.start.Compare(b.start) })
		for i := 1; i < len(runs); i++ {
			if runs[i].start.Before(runs[i-1].end) {
				n++
			}
		}
	}
	return n
}
