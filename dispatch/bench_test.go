package dispatch

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpudispatch/gpudispatch/inventory"
)

// bigLab is hosts × gpus single-slot GPUs (SPEC's scale: 100 × 16 = 1,600).
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
// or claiming), whose free slot no waiting job may take:
//
//	go test ./dispatch -run '^$' -bench SchedulerSteadyState
func BenchmarkSchedulerSteadyState(b *testing.B) {
	for _, aside := range []bool{false, true} {
		for _, n := range []int{1_000, 10_000, 100_000} {
			b.Run(fmt.Sprintf("aside=%v/queued=%d", aside, n), func(b *testing.B) {
				s := &scheduler{table: newSlotTable(bigLab(100, 16))}
				if aside {
					g := s.table.hosts[0].gpus[0]
					s.table.setBlocked(g, func() { g.busy = "busy with other work" })
				}
				for i := range n + 1600 {
					s.add(&queued{job: &Job{Seq: i + 1, GPU: -1, GPUs: 1}})
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
					s.add(&queued{job: &Job{Seq: n + 1600 + i + 1, GPU: -1, GPUs: 1}})
				}
			})
		}
	}
}
