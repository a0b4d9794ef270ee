package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch"
	"github.com/gpudispatch/gpudispatch/dispatch/control"
)

// BenchmarkSubmit measures the standing queue in local mode (8 slots, jobs
// of `true`, a HOME with no profile of its own), in one run:
//   - submit-ms: one `gpudispatch submit -- true`, from the process's start
//     to its exit, which is after the job's queued event is in the journal;
//   - client-submit-ms: the same request from a client already running
//     (the socket round trip, parsing and the journal write);
//   - stdin-jobs/s: a run of 400 jobs read from its standard input, from
//     its start to its end (starting its 8 job shells included);
//   - batch-jobs/s: the same 400 jobs in one `submit --wait` to the server,
//     whose job shells are running already;
//   - single-jobs/s: 400 submits of one job each, from 8 clients at once,
//     until the last job ends;
//   - ratio: batch-jobs/s / stdin-jobs/s.
//
// Run it with:
//
//	go test ./cmd/gpudispatch -run '^$' -bench Submit -benchtime 2x
func BenchmarkSubmit(b *testing.B) {
	const jobs, clients = 400, 8
	gpus := "0,1,2,3,4,5,6,7"
	dir := b.TempDir()
	lines := strings.Repeat("true\n", jobs)
	run := func(stdin string, args ...string) {
		cmd := exec.Command(binary, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), lockEnv(dir), "HOME="+dir)
		cmd.Stdin = strings.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s: %v\n%s", args, err, out)
		}
	}
	var submit, client, stdin, batch, single time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		run(lines, "-q", "--gpus", gpus, "-o", fmt.Sprintf("stdin%d", i))
		stdin += time.Since(start)

		logs := fmt.Sprintf("served%d", i)
		serve := exec.Command(binary, "serve", "-q", "--gpus", gpus, "-o", logs)
		serve.Dir = dir
		serve.Env = append(os.Environ(), lockEnv(dir), "HOME="+dir)
		if err := serve.Start(); err != nil {
			b.Fatal(err)
		}
		for _, err := os.Stat(filepath.Join(dir, logs, control.SocketName)); err != nil; _, err = os.Stat(filepath.Join(dir, logs, control.SocketName)) {
			time.Sleep(10 * time.Millisecond)
		}
		const latencyRuns = 40
		start = time.Now()
		for range latencyRuns {
			run("", "submit", "-o", logs, "--", "true")
		}
		submit += time.Since(start) / latencyRuns

		c, err := control.Dial(filepath.Join(dir, logs))
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		start = time.Now()
		for range latencyRuns {
			if _, err := c.Submit(ctx, dispatch.Batch{Text: "true\n"}); err != nil {
				b.Fatal(err)
			}
		}
		client += time.Since(start) / latencyRuns
		// Let those jobs end before the timed runs.
		run("", "submit", "-o", logs, "--wait", "--", "true")

		start = time.Now()
		run(lines, "submit", "-o", logs, "--wait")
		batch += time.Since(start)

		start = time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var ids []string
		for w := range clients {
			wg.Go(func() {
				for range jobs / clients {
					got, err := c.Submit(ctx, dispatch.Batch{Text: fmt.Sprintf("true # %d\n", w)})
					if err != nil {
						b.Error(err)
						return
					}
					mu.Lock()
					ids = append(ids, got.IDs...)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if _, err := c.Wait(ctx, ids); err != nil {
			b.Fatal(err)
		}
		single += time.Since(start)
		c.Stop(ctx, false)
		c.Close()
		serve.Wait()
	}
	n := float64(b.N)
	b.ReportMetric(submit.Seconds()*1000/n, "submit-ms")
	b.ReportMetric(client.Seconds()*1000/n, "client-submit-ms")
	b.ReportMetric(jobs*n/stdin.Seconds(), "stdin-jobs/s")
	b.ReportMetric(jobs*n/batch.Seconds(), "batch-jobs/s")
	b.ReportMetric(jobs*n/single.Seconds(), "single-jobs/s")
	b.ReportMetric(stdin.Seconds()/batch.Seconds(), "ratio")
}
