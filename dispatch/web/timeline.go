package web

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch"
	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// maxBars is how many jobs the timeline draws at most: the latest to
// start. A run of 10,000 jobs draws its last 2,000.
const maxBars = 2000

// timeline is the run drawn over time: a row per slot (a GPU has as many
// rows as it ran jobs at once), each job a bar from its start to its end,
// in seconds since the run's first start. A running job's bar ends now;
// in a live update it has none, and the page's script grows it (so that
// the part changes only when the run does).
type timeline struct {
	T0   time.Time
	Span float64 // seconds drawn
	Rows []timelineRow
}

// timelineRow is one slot: its place ("node1:0"; "" for a GPU's second
// row and on) and its jobs' bars.
type timelineRow struct {
	Label string
	Bars  []timelineBar
}

// timelineBar is one job's attempt: X and W in seconds, Class its
// outcome, Title what a hover says; Start is set while it runs.
type timelineBar struct {
	ID, Title, Class string
	X, W             float64
	Start            time.Time
}

// buildTimeline draws jobs on the places of hosts (the overview's order),
// now, for a live update or not.
func buildTimeline(jobs map[string]*jobInfo, hosts []dispatch.HostView, now time.Time, live bool) timeline {
	var started []*jobInfo
	for _, j := range jobs {
		if !j.Start.IsZero() && j.Host != "" && (j.State == dispatch.StateRunning || dispatch.Ended(j.State)) {
			started = append(started, j)
		}
	}
	slices.SortFunc(started, func(a, b *jobInfo) int { return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.ID, b.ID)) })
	if len(started) > maxBars {
		started = started[len(started)-maxBars:]
	}
	var t timeline
	if len(started) == 0 {
		return t
	}
	t.T0 = started[0].Start
	sec := func(at time.Time) float64 { return at.Sub(t.T0).Seconds() }
	// Places in the overview's order: hosts, then GPUs; then any other.
	type place struct {
		host string
		gpu  executor.GPUID
	}
	var order []place
	known := map[place]bool{}
	add := func(p place) {
		if !known[p] {
			known[p] = true
			order = append(order, p)
		}
	}
	for _, h := range hosts {
		if h.Cluster {
			add(place{h.Name, -1})
		}
		for _, g := range h.GPUs {
			add(place{h.Name, g.ID})
		}
	}
	lanes := map[place][][]timelineBar{}
	laneEnd := map[place][]float64{}
	for _, j := range started {
		end, running := j.End, j.State == dispatch.StateRunning
		if running {
			end = now
		}
		bar := timelineBar{ID: j.ID, Class: barClass(j.State), X: sec(j.Start), W: max(end.Sub(j.Start).Seconds(), 0)}
		// The command cut in its middle: a sweep's jobs differ at its end.
		bar.Title = fmt.Sprintf("job %s, %s, %s: %s", j.ID, dispatch.StateWord(j.State), dispatch.RoundDuration(end.Sub(j.Start)), dispatch.ClipMiddle(dispatch.OneLine(j.Command), 80))
		if running {
			bar.Start = j.Start
			if live {
				bar.W = 0
			}
		} else {
			t.Span = max(t.Span, sec(end))
		}
		var at []place
		for _, pl := range j.Places() {
			if len(pl.GPUs) == 0 {
				at = append(at, place{pl.Host, -1}) // a Slurm cluster's job
			}
			for _, g := range pl.GPUs {
				at = append(at, place{pl.Host, g})
			}
		}
		for _, p := range at {
			add(p)
			// The first row free at its start: a slot.
			i := slices.IndexFunc(laneEnd[p], func(e float64) bool { return e <= bar.X })
			if i < 0 {
				i = len(laneEnd[p])
				laneEnd[p], lanes[p] = append(laneEnd[p], 0), append(lanes[p], nil)
			}
			laneEnd[p][i] = bar.X + bar.W
			if running {
				laneEnd[p][i] = 1e18 // taken until it ends
			}
			lanes[p][i] = append(lanes[p][i], bar)
		}
	}
	if !live {
		t.Span = max(t.Span, sec(now))
	}
	t.Span = max(t.Span, 1)
	for _, p := range order {
		for i, bars := range lanes[p] {
			label := ""
			if i == 0 {
				label = p.host
				if p.gpu >= 0 {
					label += ":" + p.gpu.String()
				}
			}
			t.Rows = append(t.Rows, timelineRow{Label: label, Bars: bars})
		}
	}
	return t
}

// barClass is the colour of a bar of a job in state.
func barClass(state dispatch.JobState) string {
	switch state {
	case dispatch.StateRunning:
		return "run"
	case dispatch.EventFinished.State():
		return "ok"
	case dispatch.EventCancelled.State():
		return "off"
	}
	return "bad"
}
