package dispatch

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// bigLab is hosts × gpus single-slot GPUs (the scale we promise: 100 × 16 = 1,600).
func bigLab(hosts, gpus int) *inventory.Inventory {
	var spec []string
	for h := range hosts {
		var ids []string
		for g := range gpus {
			ids = append(ids, fmt.Sprint(g))
		}
		spec = append(spec, fmt.Sprintf("h%d:%s", h, strings.Join(ids, ",")))
	}
	return lab(strings.Join(spec, " "))
}

// BenchmarkSchedulerSteadyState measures one scheduling pass in a full lab
// with a long queue: a job ends, the pass gives its slot to the next job.
// The cost must not grow with the queue. "aside" sets one GPU aside (busy
// or claiming), whose free slot no waiting job may take; "models" gives
// the hosts two GPU models, every fourth host's GPU 0 split into two MIG
// instances, and the jobs ask for one model or the other in turn:
//
//	go test ./dispatch -run '^$' -bench SchedulerSteadyState
func BenchmarkSchedulerSteadyState(b *testing.B) {
	for _, c := range []struct {
		aside, mem, models bool
	}{{false, false, false}, {true, false, false}, {false, true, false}, {false, false, true}} {
		for _, n := range []int{1_000, 10_000, 100_000} {
			name := fmt.Sprintf("aside=%v/mem=%v/queued=%d", c.aside, c.mem, n)
			if c.models {
				name = fmt.Sprintf("models/queued=%d", n)
			}
			b.Run(name, func(b *testing.B) {
				inv := bigLab(100, 16)
				jobMem, perGPU := 0, 1
				if c.mem {
					// 80 GB GPUs, jobs of 19G: four share each GPU.
					for i := range inv.Hosts {
						inv.Hosts[i].MemoryMB, inv.Hosts[i].ReserveMB = 81920, 1024
					}
					jobMem, perGPU = 19*1024, 4
				}
				s := &scheduler{table: newSlotTable(inv)}
				if c.aside {
					g := s.table.hosts[0].gpus[0]
					s.table.setBlocked(g, func() { g.busy = "busy with other work" })
				}
				models := []string{"NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"}
				job := func(seq int) *Job {
					j := &Job{Seq: seq, GPU: -1, GPUs: 1, MemMB: jobMem}
					if c.models {
						j.Models = []string{[]string{"A100", "H100"}[seq%2]}
					}
					return j
				}
				if c.models {
					for i, h := range s.table.hosts {
						seen := map[int]executor.GPU{}
						for _, g := range h.gpus {
							g.setKind(models[i%2], 81920)
							seen[int(g.id)] = executor.GPU{Index: int(g.id), Name: g.model, MemoryTotalMB: g.vramMB}
						}
						if i%4 == 0 {
							seen[0] = executor.GPU{Index: 0, Name: models[i%2], MemoryTotalMB: 81920, MIG: []executor.MIGInstance{
								{Device: 0, Profile: "3g.40gb", UUID: "MIG-a", MemoryMB: 40960}, {Device: 1, Profile: "3g.40gb", UUID: "MIG-b", MemoryMB: 40960}}}
							s.table.migSlots(h, seen)
						}
					}
				}
				for i := range n + 1600*perGPU {
					s.add(&queued{job: job(i + 1)})
				}
				running := s.next()
				b.ResetTimer()
				for i := range b.N {
					done := running[i%len(running)]
					s.table.release(done.p)
					if got := s.next(); len(got) != 1 {
						b.Fatalf("pass %d started %d jobs, want 1", i, len(got))
					} else {
						running[i%len(running)] = got[0]
					}
					s.add(&queued{job: job(n + 1600*perGPU + i + 1)})
				}
			})
		}
	}
}

// instantExec runs every job successfully as soon as gate is closed: what
// is left to measure is the coordinator (parse, schedule, journal, logs).
type instantExec struct{ gate chan struct{} }

func (x instantExec) Run(context.Context, string, executor.Command, io.Writer, io.Writer) (int, error) {
	<-x.gate
	return 0, nil
}
func (instantExec) WaitUp(context.Context, string) error { return nil }
func (instantExec) Fetch(context.Context, string, executor.Return, string) (executor.Returned, error) {
	return executor.Returned{}, nil
}
func (instantExec) Reap(context.Context, string, string) error { return nil }
func (instantExec) LockGPU(_ context.Context, host string, gpu executor.GPUID, _ string) (executor.GPULock, error) {
	return &fakeLock{locks: newFakeLocks(), slot: fmt.Sprintf("%s:%d", host, gpu), lost: make(chan struct{})}, nil
}
func (instantExec) ProbeGPUs(context.Context, string) ([]executor.GPU, error) { return nil, nil }

// queuedCounter closes full once n jobs are queued.
type queuedCounter struct {
	n    int
	full chan struct{}
}

func (c *queuedCounter) Report(e Event) {
	if e.Event == EventQueued {
		if c.n--; c.n == 0 {
			close(c.full)
		}
	}
}

// BenchmarkRunQueued reads N jobs of `true` into the whole coordinator on
// 1,600 slots while the first 1,600 hold them (the scale target: 100,000
// queued jobs, `seq` lines), then lets them all run. It reports the cost per
// job and the process's peak RSS; deps=true has half the jobs wait for
// the job before them (after=). The cost includes creating each job's two
// log files: run it with TMPDIR on a tmpfs to see the coordinator alone.
//
//	TMPDIR=/dev/shm go test ./dispatch -run '^$' -bench RunQueued -benchtime 1x
func BenchmarkRunQueued(b *testing.B) {
	inv := bigLab(100, 16)
	for _, c := range []struct {
		n    int
		deps bool
	}{{1_000, false}, {10_000, false}, {10_000, true}, {100_000, false}} {
		n := c.n
		b.Run(fmt.Sprintf("jobs=%d/deps=%v", n, c.deps), func(b *testing.B) {
			var input strings.Builder
			for i := range n {
				switch {
				case !c.deps:
					fmt.Fprintf(&input, "echo %d\n", i)
				case i%2 == 0:
					fmt.Fprintf(&input, "[name=j%d] echo %d\n", i, i)
				default:
					// Half the jobs wait for the one before them.
					fmt.Fprintf(&input, "[after=j%d] echo %d\n", i-1, i)
				}
			}
			b.ResetTimer()
			for range b.N {
				x := instantExec{gate: make(chan struct{})}
				c := &queuedCounter{n: n, full: make(chan struct{})}
				go func() { <-c.full; close(x.gate) }()
				opts := Options{Inventory: inv, Executor: x, LogDir: b.TempDir(), Reporters: []Reporter{c}}
				s, err := Run(context.Background(), opts, []Input{{R: strings.NewReader(input.String())}})
				if err != nil || s.Counts[EventFinished] != n {
					b.Fatalf("%v %+v", err, s.Counts)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/job")
			if mb, ok := peakRSSMB(); ok {
				b.ReportMetric(mb, "peak-RSS-MB")
			}
		})
	}
}

// peakRSSMB is this process's peak resident set (Linux's VmHWM).
func peakRSSMB() (float64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if kb, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var n float64
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(kb), " kB"), &n)
			return n / 1024, true
		}
	}
	return 0, false
}

// BenchmarkResumeJournal reads a journal of 100,000 jobs' events (queued,
// started, finished: 300,000 lines) as --resume does before the run starts
// (the target: under 1 s).
//
//	go test ./dispatch -run '^$' -bench ResumeJournal -benchtime 3x
func BenchmarkResumeJournal(b *testing.B) {
	dir := b.TempDir()
	j, err := openJournal(filepath.Join(dir, JournalName), 0o600)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	for i := range 100_000 {
		text := fmt.Sprintf("python train.py --seed %d", i)
		for _, kind := range []EventKind{EventQueued, EventStarted, EventFinished} {
			e := Event{Time: now, Event: kind, Run: "r", Job: fmt.Sprint(i + 1), Seq: i + 1, Source: fmt.Sprintf("jobs.txt:%d", i+1),
				Text: text, Occurrence: 1, Command: text, Host: "node1", GPUs: []executor.GPUID{executor.GPUID(i % 8)}, Attempt: 1,
				Stdout: fmt.Sprintf("logs/%d.out", i+1), Stderr: fmt.Sprintf("logs/%d.err", i+1)}
			if kind != EventQueued {
				e.Start = &now
			}
			if kind == EventFinished {
				code := 0
				e.End, e.Exit = &now, &code
			}
			if err := j.append(e); err != nil {
				b.Fatal(err)
			}
		}
	}
	j.close()
	b.ResetTimer()
	for range b.N {
		done, _, _, _, _, err := openAttempts(filepath.Join(dir, JournalName))
		if err != nil || len(done) != 100_000 {
			b.Fatalf("%d jobs done, %v", len(done), err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/resume")
}

// Adopt finds nothing to follow: the fake keeps no attempt.
func (instantExec) Adopt(context.Context, string, executor.Command, int64, int64, io.Writer, io.Writer) (int, time.Time, error) {
	return -1, time.Now(), executor.ErrJobLost
}
