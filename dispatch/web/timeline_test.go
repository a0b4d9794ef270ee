package web

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch"
	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// The timeline has a row per slot in the overview's order, a GPU as many
// rows as it ran jobs at once, one bar per job attempt at its start, as
// long as it ran and coloured by its outcome; a running job's bar ends now,
// or, in a live update, is grown by the page's script.
func TestTimeline(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 28, 20, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	jobs := map[string]*jobInfo{
		"1": {ID: "1", State: dispatch.EventFinished.State(), Host: "n1", GPUs: []executor.GPUID{0}, Start: at(0), End: at(10), Command: "a"},
		"2": {ID: "2", State: dispatch.EventFailed.State(), Host: "n1", GPUs: []executor.GPUID{0}, Start: at(5), End: at(8), Command: "b"},
		"3": {ID: "3", State: dispatch.StateRunning, Host: "n2", GPUs: []executor.GPUID{1}, Start: at(20), Command: "c"},
		"4": {ID: "4", State: dispatch.EventFinished.State(), Host: "n1", GPUs: []executor.GPUID{0}, Start: at(12), End: at(14), Command: "d"},
		"5": {ID: "5", State: dispatch.StateWaiting, Command: "e"},
		"6": {ID: "6", State: dispatch.EventCancelled.State(), Host: "hpc", Start: at(1), End: at(2), Command: "f"},
	}
	hosts := []dispatch.HostView{
		{Name: "n2", GPUs: []dispatch.GPUView{{ID: 0}, {ID: 1}}},
		{Name: "n1", GPUs: []dispatch.GPUView{{ID: 0}}},
		{Name: "hpc", Cluster: true},
	}
	tl := buildTimeline(jobs, hosts, at(30), false)
	var got []string
	for _, r := range tl.Rows {
		row := r.Label + ":"
		for _, b := range r.Bars {
			row += " " + b.ID + "/" + b.Class + "/" + num(b.X) + "+" + num(b.W)
		}
		got = append(got, row)
	}
	want := []string{
		"n2:1: 3/run/20.00+10.00",
		"n1:0: 1/ok/0.00+10.00 4/ok/12.00+2.00",
		": 2/bad/5.00+3.00",
		"hpc: 6/off/1.00+1.00",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || tl.Span != 30 {
		t.Errorf("rows:\n%s\nspan %v; want:\n%s\nspan 30", strings.Join(got, "\n"), tl.Span, strings.Join(want, "\n"))
	}
	// A live update leaves the running bar to the script, and spans the
	// jobs that ended.
	live := buildTimeline(jobs, hosts, at(30), true)
	if live.Rows[0].Bars[0].W != 0 || live.Rows[0].Bars[0].Start.IsZero() || live.Span != 14 {
		t.Errorf("live: bar %+v, span %v", live.Rows[0].Bars[0], live.Span)
	}
	var b bytes.Buffer
	if err := render(&b, "timeline", &page{Base: "/t/x", Timeline: tl}); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	if strings.Count(html, "<rect ") != 5 || !strings.Contains(html, `<a href="/t/x/jobs/2"><rect class="bad" x="5.00" y="0" width="3.00" height="1"><title>job 2, failed, 3s: b</title>`) ||
		!strings.Contains(html, `data-start="`) {
		t.Errorf("timeline html:\n%s", html)
	}
}

// num writes seconds as the timeline does.
func num(x float64) string { return strconv.FormatFloat(x, 'f', 2, 64) }

// A GPU's chart has its samples of the last hour: memory used and
// utilisation in percent, x in seconds since the first kept, a figure
// nvidia-smi did not give left out; an hour-old sample is forgotten.
func TestGPUChart(t *testing.T) {
	t.Parallel()
	s := &Server{history: map[gpuPlace][]point{}}
	t0 := time.Date(2026, 11, 28, 20, 0, 0, 0, time.UTC)
	s.record("n1", []executor.GPU{{Index: 0, MemoryTotalMB: 100, MemoryUsedMB: 10, Utilization: 50}}, t0)
	if chartOf(s.history[gpuPlace{"n1", 0}]) != nil {
		t.Error("a chart of one sample")
	}
	s.record("n1", []executor.GPU{{Index: 0, MemoryTotalMB: 100, MemoryUsedMB: 40, Utilization: -1}}, t0.Add(5*time.Second))
	s.record("n1", []executor.GPU{{Index: 0, MemoryTotalMB: 100, MemoryUsedMB: 90, Utilization: 100}}, t0.Add(10*time.Second))
	c := chartOf(s.history[gpuPlace{"n1", 0}])
	if c == nil || c.Mem != "0,90 5,60 10,10" || c.Util != "0,50 10,0" || c.Span != 10 {
		t.Errorf("chart %+v", c)
	}
	var b bytes.Buffer
	p := &page{Base: "/t/x", Hosts: []hostCard{{HostView: dispatch.HostView{Name: "n1"}, GPUs: []gpuRow{{GPUView: dispatch.GPUView{ID: 0, MemBudgetMB: -1}, Chart: c}}}}}
	if err := render(&b, "hosts", p); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `<svg class="chart" viewBox="0 0 10 100"`) || !strings.Contains(b.String(), `<polyline class="mem" points="0,90 5,60 10,10"/>`) {
		t.Errorf("the hosts part draws no chart:\n%s", b.String())
	}
	s.record("n1", []executor.GPU{{Index: 0, MemoryTotalMB: 100, MemoryUsedMB: 0, Utilization: 0}}, t0.Add(time.Hour+6*time.Second))
	if h := s.history[gpuPlace{"n1", 0}]; len(h) != 2 {
		t.Errorf("%d samples kept, want the two of the last hour", len(h))
	}
}

// A job over several hosts is on the page at every place it holds: a bar
// on each of its GPUs' rows, a line on each of its hosts' GPUs.
func TestJobOverSeveralHostsOnThePage(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 28, 20, 0, 0, 0, time.UTC)
	j := &jobInfo{ID: "1", State: dispatch.StateRunning, Host: "n1", GPUs: []executor.GPUID{1}, Start: t0, Command: "torchrun",
		Parts: []dispatch.Part{{Rank: 1, Host: "n2", GPUs: []executor.GPUID{0}}}}
	hosts := []dispatch.HostView{
		{Name: "n1", GPUs: []dispatch.GPUView{{ID: 0}, {ID: 1}}},
		{Name: "n2", GPUs: []dispatch.GPUView{{ID: 0}, {ID: 1}}},
	}
	tl := buildTimeline(map[string]*jobInfo{"1": j}, hosts, t0.Add(10*time.Second), false)
	var rows []string
	for _, r := range tl.Rows {
		rows = append(rows, r.Label)
	}
	if strings.Join(rows, " ") != "n1:1 n2:0" {
		t.Errorf("timeline rows %v, want n1:1 n2:0", rows)
	}
	s := &Server{jobs: map[string]*jobInfo{"1": j}}
	p := s.build(&dispatch.Overview{Hosts: hosts}, false, t0, false, false)
	var on []string
	for _, c := range p.Hosts {
		for _, g := range c.GPUs {
			if len(g.Jobs) > 0 {
				on = append(on, c.Name+":"+g.ID.String())
			}
		}
	}
	if strings.Join(on, " ") != "n1:1 n2:0" {
		t.Errorf("the job is on %v, want n1:1 n2:0", on)
	}
	if j.Where() != "n1:1+n2:0" {
		t.Errorf("Where %q", j.Where())
	}
}
