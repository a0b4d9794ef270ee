package live

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpudispatch/gpudispatch/dispatch"
	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// slot is one line of the view: a host:gpu slot, or one of a Slurm
// cluster's max_jobs places (gpu noGPU), and what it does.
type slot struct {
	host string
	gpu  executor.GPUID
	job  string // "" when idle
	cmd  string
	// mem is the GPU memory the job declared (MiB; 0: none).
	mem int
	// since is when the job started.
	since time.Time
}

// noGPU is the gpu of a Slurm cluster's slots: Slurm gives the GPUs.
const noGPU = -1

// gpuKey names a GPU of a host.
type gpuKey struct {
	host string
	gpu  executor.GPUID
}

// model is the view's state, built from events.
type model struct {
	now   func() time.Time
	slots []slot
	byGPU map[gpuKey][]int // slot lines of each GPU
	// jobs counts the jobs by state.
	jobs dispatch.Tally
	// first is when the first job started: the rate counts from there.
	first time.Time
	// down and busy hold the notes shown on idle lines of a host that is
	// down (or left out) and of a GPU that is set aside; opening holds the
	// hosts not opened yet.
	down    map[string]string
	busy    map[gpuKey]string
	opening map[string]bool
	// after holds the waiting jobs that wait for other jobs to end.
	after         map[string]bool
	width, height int
	// order is each host's place in the inventory: slot lines are in
	// inventory order, then GPU order, whenever a slot comes. perGPU is
	// each host's slots_per_gpu.
	order  map[string]int
	perGPU map[string]int
	// final is set as the run ends: the view is its progress line alone,
	// and no slot line is left in the scrollback.
	final bool
}

func newModel(inv *inventory.Inventory, opening []string, now func() time.Time) *model {
	m := &model{
		now: now, byGPU: map[gpuKey][]int{},
		down: map[string]string{}, busy: map[gpuKey]string{}, opening: map[string]bool{}, after: map[string]bool{},
		width: 100, height: 30, order: map[string]int{}, perGPU: map[string]int{},
	}
	for i, h := range inv.Hosts {
		m.order[h.Name], m.perGPU[h.Name] = i, h.SlotsPerGPU
	}
	for _, h := range opening {
		m.opening[h] = true
	}
	for _, h := range inv.Hosts {
		if h.Slurm != nil {
			for range h.Slurm.MaxJobs {
				m.addSlot(gpuKey{h.Name, noGPU})
			}
		}
		for _, id := range h.GPUs {
			for range h.SlotsPerGPU {
				m.addSlot(gpuKey{h.Name, executor.GPUID(id)})
			}
		}
	}
	return m
}

func (m *model) addSlot(k gpuKey) {
	at := len(m.slots)
	if lines := m.byGPU[k]; len(lines) > 0 {
		at = lines[len(lines)-1] + 1 // beside the GPU's other lines
	} else if i := slices.IndexFunc(m.slots, func(s slot) bool { return m.before(k, gpuKey{s.host, s.gpu}) }); i >= 0 {
		at = i // in inventory order, then GPU order
	}
	m.slots = slices.Insert(m.slots, at, slot{host: k.host, gpu: k.gpu})
	for key, lines := range m.byGPU {
		for i, l := range lines {
			if l >= at {
				m.byGPU[key][i] = l + 1
			}
		}
	}
	m.byGPU[k] = append(m.byGPU[k], at)
}

// before reports whether a's lines go before b's: by the hosts' places in
// the inventory (a host it does not name last, by name), then by GPU, a
// GPU's MIG instances after it.
func (m *model) before(a, b gpuKey) bool {
	oa, ka := m.order[a.host]
	ob, kb := m.order[b.host]
	switch {
	case a.host == b.host:
		return gpuRank(a.gpu) < gpuRank(b.gpu)
	case ka != kb:
		return ka
	case ka:
		return oa < ob
	}
	return a.host < b.host
}

// gpuRank orders GPU ids: GPU 0, its MIG instances, GPU 1, …; a cluster's
// places first.
func gpuRank(id executor.GPUID) int {
	if id == noGPU {
		return -1
	}
	dev, mig := id.MIG()
	if !mig {
		dev = -1
	}
	return id.GPU()*(executor.MIGDevices+1) + dev + 1
}

// keys are the slot keys of e's job: its GPUs (on every host of a job over
// several), or a cluster's place.
func keys(e dispatch.Event) []gpuKey {
	var ks []gpuKey
	for _, p := range e.Places() {
		if len(p.GPUs) == 0 {
			ks = append(ks, gpuKey{p.Host, noGPU})
		}
		for _, id := range p.GPUs {
			ks = append(ks, gpuKey{p.Host, id})
		}
	}
	return ks
}

// apply updates the model with e.
func (m *model) apply(e dispatch.Event) {
	m.jobs.Apply(e)
	if e.JobState() != "" {
		if len(e.After) > 0 {
			m.after[e.Job] = true
		} else {
			delete(m.after, e.Job)
		}
	}
	switch {
	case e.JobState() == dispatch.StateRunning:
		// Started, or its shell is being set up: it holds its slot.
		if m.first.IsZero() {
			m.first = m.now()
		}
		start := m.now()
		if e.Start != nil {
			start = *e.Start
		}
		for _, k := range keys(e) {
			delete(m.busy, k)
			if i := m.slotOf(k, e.Job); i >= 0 {
				m.slots[i].since = start // set up, it began
				continue
			}
			if m.byGPU[k] == nil || m.full(k) {
				// A host or slot added to the inventory during the run.
				m.addSlot(k)
			}
			for _, i := range m.byGPU[k] {
				if m.slots[i].job == "" {
					m.slots[i].job, m.slots[i].cmd, m.slots[i].since, m.slots[i].mem = e.Job, e.Command, start, e.MemMB
					break
				}
			}
		}
	case dispatch.Ended(e.JobState()):
		for _, k := range keys(e) {
			for _, i := range m.byGPU[k] {
				if m.slots[i].job == e.Job {
					m.slots[i].job = ""
				}
			}
		}
	case e.Event == dispatch.EventHostDown:
		delete(m.opening, e.Host)
		m.down[e.Host] = "host down: " + e.Error
	case e.Event == dispatch.EventHostUp:
		delete(m.opening, e.Host)
		delete(m.down, e.Host)
		// Opened at last: its GPUs' slots show, idle, before any job.
		want := map[gpuKey]int{}
		for _, id := range e.GPUs {
			want[gpuKey{e.Host, id}] += max(m.perGPU[e.Host], 1)
		}
		for k, n := range want {
			for len(m.byGPU[k]) < n {
				m.addSlot(k)
			}
		}
	case e.Event == dispatch.EventWarning && m.opening[e.Host]:
		// Opened, and left out.
		delete(m.opening, e.Host)
		m.down[e.Host] = e.Error
	case e.Event == dispatch.EventBusy:
		for _, id := range e.GPUs {
			m.busy[gpuKey{e.Host, id}] = e.Error
		}
	}
}

// slotOf is the slot line of GPU k where job is, or -1.
func (m *model) slotOf(k gpuKey, job string) int {
	for _, i := range m.byGPU[k] {
		if m.slots[i].job == job {
			return i
		}
	}
	return -1
}

// full reports whether every slot line of GPU k has a job.
func (m *model) full(k gpuKey) bool {
	for _, i := range m.byGPU[k] {
		if m.slots[i].job == "" {
			return false
		}
	}
	return true
}

// view draws the progress line and the slot lines, within width × height.
func (m *model) view() string {
	var b strings.Builder
	b.WriteString(m.progress())
	b.WriteByte('\n')
	if m.final {
		return b.String()
	}
	// The columns line up: as wide as the longest place and job id.
	whereW, jobW := 12, 6
	for _, s := range m.slots {
		whereW = max(whereW, utf8.RuneCountInString(s.where()))
		jobW = max(jobW, utf8.RuneCountInString(s.job))
	}
	rows := max(m.height-2, 1)
	for i, s := range m.slots {
		if i == rows-1 && len(m.slots) > rows {
			idle := 0
			for _, r := range m.slots[i:] {
				if r.job == "" {
					idle++
				}
			}
			fmt.Fprintf(&b, "… %d more slots (%d idle)\n", len(m.slots)-i, idle)
			break
		}
		b.WriteString(m.clip(dispatch.Printable(m.slotLine(s, whereW, jobW)))) // a terminal shows job text, never obeys it
		b.WriteByte('\n')
	}
	return b.String()
}

// progress is the bar and counts: "[####----] 12/40 done · 1 failed · ...".
func (m *model) progress() string {
	// Done out of what runs: cancelled and rejected jobs are in neither.
	done := m.jobs.Done()
	total := done + m.jobs.Left()
	const width = 20
	filled := 0
	if total > 0 {
		filled = done * width / total
	}
	var parts []string
	parts = append(parts, fmt.Sprintf("%d/%d done", done, total))
	var states []dispatch.JobState
	for _, k := range dispatch.Outcomes[1:] {
		states = append(states, k.State())
	}
	for _, s := range append(states, dispatch.StateRunning, dispatch.StateWaiting) {
		if n := m.jobs.Count(s); n > 0 {
			part := fmt.Sprintf("%d %s", n, dispatch.StateWord(s))
			if h := len(m.after); s == dispatch.StateWaiting && h > 0 {
				part += fmt.Sprintf(" (%d after other jobs)", h)
			}
			parts = append(parts, part)
		}
	}
	if rate, eta := m.jobs.Pace(m.first, m.now()); rate > 0 {
		parts = append(parts, dispatch.RateString(rate))
		if eta > 0 {
			parts = append(parts, "ETA "+dispatch.RoundDuration(eta).String())
		}
	}
	bar := "[" + strings.Repeat("#", filled) + strings.Repeat("-", width-filled) + "] "
	return m.clip(bar + strings.Join(parts, " · "))
}

// where is "node1:2", "node1:0:1" or "hpc".
func (s slot) where() string {
	if s.gpu == noGPU {
		return s.host
	}
	return s.host + ":" + s.gpu.String()
}

// slotLine is a slot's line, its place whereW wide and its job jobW, job
// text as it came: the view makes it Printable.
func (m *model) slotLine(s slot, whereW, jobW int) string {
	where := fmt.Sprintf("%-*s", whereW, s.where())
	switch {
	case s.job != "":
		// The command is cut in its middle to fit: a sweep's jobs differ
		// at its end.
		head := fmt.Sprintf("%s job %-*s %7s  ", where, jobW, s.job, dispatch.RoundDuration(m.now().Sub(s.since)))
		if s.mem > 0 {
			head += "[" + dispatch.MemWords(s.mem) + "] "
		}
		cmd := dispatch.OneLine(s.cmd)
		if m.width > 1 {
			cmd = dispatch.ClipMiddle(cmd, max(10, m.width-utf8.RuneCountInString(head)))
		}
		return head + cmd
	case m.down[s.host] != "":
		return where + " " + m.down[s.host]
	case m.opening[s.host]:
		return where + " connecting: not answered yet"
	case m.busy[gpuKey{s.host, s.gpu}] != "":
		return where + " set aside: " + m.busy[gpuKey{s.host, s.gpu}]
	}
	return where + " idle"
}

// clip cuts s to the terminal's width, so that no line wraps and the
// redraw stays in place.
func (m *model) clip(s string) string {
	if m.width <= 1 {
		return s
	}
	return dispatch.Clip(s, m.width)
}
