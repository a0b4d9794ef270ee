package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// BenchmarkStartup measures how soon a run gets going on a lab of 4 and
// of 100 OpenSSH hosts (4 fake GPUs each, one sshd per host on loopback):
// from launch to the first job's start (first-start-s), and to every slot
// busy (all-busy-s), with one `sleep 3` job per slot. A run waits for no
// host: each takes jobs as soon as it is connected and its GPU locks are
// taken, so the first start should not grow with the lab.
//
//	go test ./cmd/gpudispatch -run '^$' -bench Startup -benchtime 3x
//
// The 100-host lab takes about 30 s and 1 GB to start.
func BenchmarkStartup(b *testing.B) {
	for _, n := range []int{4, 100} {
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
			const gpus = 4
			l := sshtest.Start(b, sshtest.Options{Hosts: n, GPUs: gpus})
			inv := benchInventory(b, l, gpus)
			var first, busy time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				logs := filepath.Join(l.Dir, fmt.Sprintf("logs%d", i))
				cmd := exec.Command(binary, "-i", inv, "-o", logs, "-q")
				cmd.Env = append(os.Environ(), "HOME="+l.Dir, "SSH_AUTH_SOCK=", lockEnv(l.Dir))
				cmd.Stdin = strings.NewReader(strings.Repeat("sleep 3\n", n*gpus))
				launch := time.Now()
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("gpudispatch: %v\n%s", err, out)
				}
				var starts []time.Time
				for _, e := range journal(b, logs) {
					if e["event"] == "started" {
						at, _ := time.Parse(time.RFC3339Nano, e["time"].(string))
						starts = append(starts, at)
					}
				}
				slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
				first += starts[0].Sub(launch)
				busy += starts[len(starts)-1].Sub(launch)
			}
			b.ReportMetric(first.Seconds()/float64(b.N), "first-start-s")
			b.ReportMetric(busy.Seconds()/float64(b.N), "all-busy-s")
		})
	}
}
