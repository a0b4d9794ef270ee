package dispatch

import (
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// The lines of a run say where a job ran only when it had a place, and
// every warning is gpudispatch's.
func TestTextReporterLines(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	t1 := t0.Add(40 * time.Millisecond)
	three := 3
	for _, tc := range []struct {
		e    Event
		want string
	}{
		{Event{Event: EventFailed, Job: "3", Error: `host nodee2 is left out of this run: no such host name nodee2`},
			`job 3 failed: host nodee2 is left out of this run: no such host name nodee2`},
		{Event{Event: EventFailed, Job: "4", Host: "n1", GPUs: []executor.GPUID{2}, Exit: &three, Start: &t0, End: &t1, Stderr: "logs/4.err"},
			"job 4 failed on n1:2 with exit status 3 after 40ms: see logs/4.err"},
		{Event{Event: EventFinished, Job: "5", Host: "n1", GPUs: []executor.GPUID{0}, Start: &t0, End: &t1}, "job 5 finished on n1:0 in 40ms"},
		{Event{Event: EventWarning, Host: "n1", Error: "no flock"}, "gpudispatch: warning: host n1: no flock"},
		{Event{Event: EventWarning, Error: "the inventory does not load"}, "gpudispatch: warning: the inventory does not load"},
	} {
		if got, _ := (&TextReporter{}).Line(tc.e); got != tc.want {
			t.Errorf("line %q, want %q", got, tc.want)
		}
	}
}

// Another run's locks are said once per host and holder, not once per GPU.
func TestTextReporterLocksOncePerHost(t *testing.T) {
	t.Parallel()
	holder := "run R of bob@laptop (pid 4242)"
	busy := func(host string, gpu int, holder string) Event {
		return Event{Event: EventBusy, Job: "1", Host: host, GPUs: []executor.GPUID{executor.GPUID(gpu)}, Message: holder,
			Error: host + ": GPU " + string(rune('0'+gpu)) + " (GPU-x) is locked by another gpudispatch run: " + holder}
	}
	var tr TextReporter
	var said []string
	for _, e := range []Event{busy("n1", 0, holder), busy("n1", 1, holder), busy("n2", 0, holder), busy("n1", 2, "run S of eve@box (pid 7)"),
		{Event: EventBusy, Job: "2", Host: "n1", GPUs: []executor.GPUID{3}, Error: "n1: GPU 3 is busy with other work: 1 process, 10 MiB used"}} {
		if line, ok := tr.Line(e); ok {
			said = append(said, line)
		}
	}
	if len(said) != 4 || !strings.Contains(said[0], "n1: GPU 0") || !strings.Contains(said[0], "(said once)") ||
		!strings.Contains(said[1], "n2: GPU 0") || !strings.Contains(said[2], "run S") || !strings.Contains(said[3], "GPU 3 is busy with other work") {
		t.Errorf("lines:\n%s", strings.Join(said, "\n"))
	}
}
