package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// BenchmarkReadopt measures how long a coordinator that comes back takes
// to re-adopt its running jobs: 16 jobs, each printing a line every 0.1 s,
// run on 4 OpenSSH hosts x 4 GPUs; the coordinator is killed (kill -9),
// and a run with --resume on the log dir is timed from its start until
// the journal holds all 16 re-adopted attempts (readopt-seconds) and until
// every job's log grows again, from what its host kept
// (readopt-streaming-seconds). Then the jobs are cancelled (Ctrl-C twice).
//
//	go test ./cmd/gpudispatch -run '^$' -bench Readopt -benchtime 3x
func BenchmarkReadopt(b *testing.B) {
	const hostCount, gpus = 4, 4
	l := sshtest.Start(b, sshtest.Options{Hosts: hostCount, GPUs: gpus})
	inv := benchInventory(b, l, gpus)
	var total, streaming time.Duration
	for i := 0; b.Loop(); i++ {
		logs := filepath.Join(l.Dir, fmt.Sprintf("logs%d", i))
		jobs := strings.Repeat(fmt.Sprintf("while :; do echo tick; sleep 0.1; done # %d\n", i), hostCount*gpus)
		first := labCmd(b, l, jobs, "-i", inv, "-o", logs)
		if err := first.Start(); err != nil {
			b.Fatal(err)
		}
		// Journaled as started is not yet running there: wait for output.
		waitEvents(b, logs, func(ev []map[string]any) bool {
			for n := 1; n <= hostCount*gpus; n++ {
				if st, err := os.Stat(filepath.Join(logs, fmt.Sprintf("%d.out", n))); err != nil || st.Size() == 0 {
					return false
				}
			}
			return true
		})
		first.Process.Kill()
		first.Wait()
		sizes := map[int]int64{}
		for n := 1; n <= hostCount*gpus; n++ {
			if st, err := os.Stat(filepath.Join(logs, fmt.Sprintf("%d.out", n))); err == nil {
				sizes[n] = st.Size()
			}
		}
		start := time.Now()
		resumed := labCmd(b, l, jobs, "-i", inv, "-o", logs, "--resume")
		if err := resumed.Start(); err != nil {
			b.Fatal(err)
		}
		waitEvents(b, logs, func(ev []map[string]any) bool {
			n := 0
			for _, e := range ev {
				if msg, _ := e["message"].(string); e["event"] == "started" && strings.HasPrefix(msg, "re-adopted") {
					n++
				}
			}
			return n == hostCount*gpus
		})
		total += time.Since(start)
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
			grown := 0
			for n := 1; n <= hostCount*gpus; n++ {
				if st, err := os.Stat(filepath.Join(logs, fmt.Sprintf("%d.out", n))); err == nil && st.Size() > sizes[n] {
					grown++
				}
			}
			if grown == hostCount*gpus {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("after a minute, %d of the %d logs grew again", grown, hostCount*gpus)
			}
		}
		streaming += time.Since(start)
		resumed.Process.Signal(syscall.SIGINT)
		time.Sleep(100 * time.Millisecond)
		resumed.Process.Signal(syscall.SIGINT)
		resumed.Wait()
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "readopt-seconds")
	b.ReportMetric(streaming.Seconds()/float64(b.N), "readopt-streaming-seconds")
}

// waitEvents polls logDir's journal until ok holds, for at most a minute.
func waitEvents(b *testing.B, logDir string, ok func([]map[string]any) bool) {
	b.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(logDir, "journal.jsonl")); err == nil && ok(journal(b, logDir)) {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("waited a minute for the journal of %s", logDir)
		}
	}
}

// benchInventory writes an inventory of every host of l with gpus GPUs
// each, and returns its path.
func benchInventory(b *testing.B, l *sshtest.Lab, gpus int) string {
	b.Helper()
	inv := filepath.Join(l.Dir, "bench.yaml")
	var y strings.Builder
	fmt.Fprintf(&y, "ssh_config: %s\nhosts:\n", l.SSHConfig)
	for _, h := range l.Hosts {
		fmt.Fprintf(&y, "  - name: %s\n    gpus: %d\n", h.Name, gpus)
	}
	if err := os.WriteFile(inv, []byte(y.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	return inv
}
