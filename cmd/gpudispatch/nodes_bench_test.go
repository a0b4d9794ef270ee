package main

import (
	"fmt"
	"math"
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

// BenchmarkJobsOverHosts measures what a job over several hosts costs a
// mixed workload on a lab of 3 OpenSSH hosts × 2 GPUs: 54 one-GPU jobs of
// 0.4 s with 2 jobs of 2 hosts × 2 GPUs (0.6 s) among them (mix=nodes), or
// with 4 one-GPU jobs of 0.6 s in the place of each (mix=flat: the same
// GPU-seconds). It prints how far apart a job's two parts start
// (spread-ms, by the parts' own clocks), the GPU-seconds left idle while
// jobs waited (idle-gpu-s: mix=nodes less mix=flat is what holding GPUs
// for the job over two hosts as they free up costs), and the GPUs' use
// over the run (util: busy GPU-seconds over 6 × the run's length).
//
//	go test ./cmd/gpudispatch -run '^$' -bench JobsOverHosts -benchtime 3x
func BenchmarkJobsOverHosts(b *testing.B) {
	const hosts, gpus = 3, 2
	l := sshtest.Start(b, sshtest.Options{Hosts: hosts, GPUs: gpus})
	inv := benchInventory(b, l, gpus)
	small := strings.Repeat("sleep 0.4\n", 18)
	for _, mix := range []struct{ name, big string }{
		{"nodes", "[nodes=2 gpus=2] date +%s.%N; sleep 0.6\n"},
		{"flat", strings.Repeat("sleep 0.6\n", 4)},
	} {
		b.Run("mix="+mix.name, func(b *testing.B) {
			input := small + mix.big + small + mix.big + small
			var spread, idle, util float64
			for i := 0; i < b.N; i++ {
				logs := filepath.Join(l.Dir, fmt.Sprintf("logs-%s-%d", mix.name, i))
				cmd := exec.Command(binary, "-i", inv, "-o", logs, "-q")
				cmd.Env = append(os.Environ(), "HOME="+l.Dir, "SSH_AUTH_SOCK=", lockEnv(l.Dir))
				cmd.Stdin = strings.NewReader(input)
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("gpudispatch: %v\n%s", err, out)
				}
				for _, id := range []string{"19", "38"} {
					if mix.name != "nodes" {
						break
					}
					at := func(log string) float64 {
						v, err := strconv.ParseFloat(strings.TrimSpace(readFile(b, filepath.Join(logs, log))), 64)
						if err != nil {
							b.Fatalf("%s: %v", log, err)
						}
						return v
					}
					spread += math.Abs(at(id+".out")-at(id+".rank1.out")) / 2
				}
				idle1, util1 := gpuUse(b, journal(b, logs), hosts*gpus)
				idle += idle1
				util += util1
			}
			if mix.name == "nodes" {
				b.ReportMetric(spread*1000/float64(b.N), "spread-ms")
			}
			b.ReportMetric(idle/float64(b.N), "idle-gpu-s")
			b.ReportMetric(util/float64(b.N), "util")
		})
	}
}

// gpuUse reads a run's journal: the GPU-seconds left idle while jobs
// waited, and the GPUs' use over the run (busy GPU-seconds over gpus ×
// its length, from the first job queued to the last ended).
func gpuUse(b *testing.B, events []map[string]any, gpus int) (idle, util float64) {
	b.Helper()
	type change struct {
		at            time.Time
		waiting, busy int
	}
	var changes []change
	at := func(e map[string]any, key string) time.Time {
		t, err := time.Parse(time.RFC3339Nano, fmt.Sprint(e[key]))
		if err != nil {
			b.Fatalf("%s of %v: %v", key, e, err)
		}
		return t
	}
	held := func(e map[string]any) int {
		n := len(e["gpus"].([]any))
		parts, _ := e["parts"].([]any)
		for _, p := range parts {
			n += len(p.(map[string]any)["gpus"].([]any))
		}
		return n
	}
	for _, e := range events {
		switch e["event"] {
		case "queued":
			changes = append(changes, change{at(e, "time"), 1, 0})
		case "started":
			changes = append(changes, change{at(e, "start"), -1, held(e)})
		case "finished":
			changes = append(changes, change{at(e, "end"), 0, -held(e)})
		}
	}
	slices.SortStableFunc(changes, func(x, y change) int { return x.at.Compare(y.at) })
	waiting, busy, used := 0, 0, 0.0
	for i, c := range changes {
		if i > 0 {
			dt := c.at.Sub(changes[i-1].at).Seconds()
			used += float64(busy) * dt
			if waiting > 0 {
				idle += float64(gpus-busy) * dt
			}
		}
		waiting += c.waiting
		busy += c.busy
	}
	span := changes[len(changes)-1].at.Sub(changes[0].at).Seconds()
	return idle, used / (float64(gpus) * span)
}
