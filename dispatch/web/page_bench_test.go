package web

import (
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch"
	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// BenchmarkFirstPage draws the page of a run of 10,000 jobs that all ran
// on 100 hosts × 16 GPUs, as its first load does (timeline included): the
// target is well under a second.
//
//	go test ./dispatch/web -run '^$' -bench FirstPage
func BenchmarkFirstPage(b *testing.B) {
	s, err := New(Options{Control: dispatch.NewControl(), SampleEvery: time.Hour, ListLimit: 50})
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now().Add(-time.Hour)
	o := &dispatch.Overview{}
	for h := range 100 {
		hv := dispatch.HostView{Name: fmt.Sprintf("node%d", h)}
		for g := range 16 {
			hv.GPUs = append(hv.GPUs, dispatch.GPUView{ID: executor.GPUID(g), Slots: 1, MemBudgetMB: -1})
		}
		o.Hosts = append(o.Hosts, hv)
	}
	for i := range 10_000 {
		start, end := t0.Add(time.Duration(i)*300*time.Millisecond), t0.Add(time.Duration(i)*300*time.Millisecond+5*time.Minute)
		id, host, gpu := fmt.Sprint(i+1), fmt.Sprintf("node%d", i%100), executor.GPUID(i/100%16)
		s.Report(dispatch.Event{Event: dispatch.EventQueued, Job: id, Command: "python train.py --seed " + id})
		s.Report(dispatch.Event{Event: dispatch.EventStarted, Job: id, Host: host, GPUs: []executor.GPUID{gpu}, Start: &start, Stdout: "logs/" + id + ".out"})
		s.Report(dispatch.Event{Event: dispatch.EventFinished, Job: id, Host: host, GPUs: []executor.GPUID{gpu}, Start: &start, End: &end})
	}
	b.ResetTimer()
	for range b.N {
		s.mu.Lock()
		p := s.build(o, false, time.Now(), false, true)
		s.mu.Unlock()
		if err := render(io.Discard, "index", p); err != nil {
			b.Fatal(err)
		}
	}
}
