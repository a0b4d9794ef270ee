package hosts

import (
	"cmp"
	"encoding/json"
	"fmt"
	"github.com/gpudispatch/gpudispatch/hosts/jobshell"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/slurm"

	"github.com/gpudispatch/gpudispatch/inventory"
)

// TableOptions say how WriteTable lays the table out.
type TableOptions struct {
	// Width is the terminal's width, to which reasons are cut so that no
	// line wraps; 0 (a pipe, a file) prints everything whole.
	Width int
	// Verbose adds each host's SSH server and each GPU's UUID.
	Verbose bool
}

// WriteTable prints one line per host — its address, whether it is up, its
// GPUs and slots (and with Verbose its SSH server) — with why it is down on
// a line of its own under it, and under it a line per GPU that nvidia-smi
// reported: name, memory, utilisation (with Verbose its UUID), this
// inventory's slots on it, and whether other people's work makes it busy (a
// run's lock, compute processes, more than busyMB used). Reasons never
// widen the columns.
func WriteTable(w io.Writer, states []HostState, busyMB int, o TableOptions) error {
	var t table
	head := []string{"HOST", "ADDRESS", "STATE", "GPUS", "SLOTS"}
	if o.Verbose {
		head = []string{"HOST", "ADDRESS", "STATE", "SERVER", "GPUS", "SLOTS"}
	}
	t.row(head...)
	for _, st := range states {
		state := "up"
		if st.Err != nil {
			state = "down"
			if !st.Retrying {
				state = "left out"
			}
		}
		cells := []string{st.Host.Name, st.Addr, state, gpuList(st), slots(st)}
		if o.Verbose {
			cells = []string{st.Host.Name, st.Addr, state, cmp.Or(st.ServerVersion, "-"), gpuList(st), slots(st)}
		}
		t.row(cells...)
		if st.Err != nil {
			t.note(st.Err.Error())
		}
		if len(st.Host.Tags) > 0 {
			t.note("tags: " + strings.Join(st.Host.Tags, ", "))
		}
		for _, w := range st.Warnings {
			t.note("warning: " + w)
		}
		for _, g := range st.GPUs {
			busy := cmp.Or(g.BusyWhy(busyMB), "free")
			n := gpuSlots(st.Host, g.Index)
			slotsWord := slotWords(n)
			if total := cmp.Or(st.Host.MemoryMB, g.MemoryTotalMB); total > 0 && (st.Host.MemMB > 0 || st.Host.MemoryMB > 0 || st.Host.MaxPerGPU > 0) {
				// What jobs that declare their memory (mem=) may share,
				// where the inventory sets budgets.
				slotsWord += fmt.Sprintf(" or %d MiB of mem= jobs", max(total-st.Host.ReserveMB, 0))
			}
			if len(g.MIG) > 0 {
				slotsWord = fmt.Sprintf("MIG: %d instances", len(g.MIG))
			}
			t.gpuRow(o, "  gpu "+strconv.Itoa(g.Index), g.Name, g.Usage(), g.UUID, slotsWord, busy)
			for _, m := range g.MIG {
				// Each instance has the slots of its GPU; what it holds,
				// nvidia-smi does not say.
				mem := "? MiB"
				if m.MemoryMB > 0 {
					mem = strconv.Itoa(m.MemoryMB) + " MiB"
				}
				t.gpuRow(o, "    mig "+executor.MIGID(g.Index, m.Device).String(), "MIG "+m.Profile, mem, m.UUID, slotWords(n), "")
			}
		}
		if st.Slurm != nil && st.Err == nil {
			t.note(fmt.Sprintf("partition %s: %s", st.Host.Slurm.Partition, cmp.Or(st.Slurm.Partition, "-")))
			t.note("your queue: " + cmp.Or(st.Slurm.Queue, "empty"))
		}
		if st.GPUErr != nil && st.Err == nil {
			t.note(fmt.Sprintf("nvidia-smi: %v", st.GPUErr))
		}
		if st.LockErr != nil {
			t.note(fmt.Sprintf("locks: %v", st.LockErr))
		}
		for _, w := range st.Waiting {
			t.note(w)
		}
		for _, k := range st.Kept {
			what := "runs on with no gpudispatch since " + k.Since.Local().Format("2006-01-02 15:04")
			if !k.Running {
				what = "ended with no gpudispatch, its output kept here"
			}
			t.note(fmt.Sprintf("%s, GPUs %s: %s (--resume on the log dir takes it up)", k.About, k.GPUs, what))
		}
		if st.KeptErr != nil {
			t.note(fmt.Sprintf("kept jobs: %v", st.KeptErr))
		}
	}
	return t.write(w, o.Width)
}

// slotWords says n slots: "1 slot", "2 slots".
func slotWords(n int) string {
	if n == 1 {
		return "1 slot"
	}
	return strconv.Itoa(n) + " slots"
}

// gpuRow adds the row of a GPU or MIG instance: its id, what it is, what
// it holds, its UUID (with Verbose), its slots, and whether it is busy.
func (t *table) gpuRow(o TableOptions, id, name, usage, uuid, slots, busy string) {
	if o.Verbose {
		t.row("", id, name, usage, uuid, slots, busy)
	} else {
		t.row("", id, name, usage, slots, busy)
	}
}

// table is WriteTable's layout: rows whose cells line up, two spaces apart,
// and notes, each on a line of its own under the row before it, indented,
// which no column makes room for. The last cell of a row does not either.
type table struct{ lines []tableLine }

// tableLine is a row's cells, or a note's text (one cell).
type tableLine struct {
	cells []string
	note  bool
}

func (t *table) row(cells ...string) { t.lines = append(t.lines, tableLine{cells: cells}) }

func (t *table) note(text string) {
	t.lines = append(t.lines, tableLine{cells: []string{text}, note: true})
}

// write prints the table, cutting notes (and the last cells of rows) to
// width when it is not 0.
func (t *table) write(w io.Writer, width int) error {
	var widths []int
	for _, l := range t.lines {
		if l.note {
			continue
		}
		for j, c := range l.cells[:len(l.cells)-1] {
			if j >= len(widths) {
				widths = append(widths, 0)
			}
			widths[j] = max(widths[j], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, l := range t.lines {
		line := "    " + l.cells[0]
		if !l.note {
			var row strings.Builder
			for j, c := range l.cells[:len(l.cells)-1] {
				row.WriteString(c + strings.Repeat(" ", widths[j]-utf8.RuneCountInString(c)+2))
			}
			row.WriteString(l.cells[len(l.cells)-1])
			line = strings.TrimRight(row.String(), " ")
		}
		if width > 0 && utf8.RuneCountInString(line) > width {
			r := []rune(line)
			line = string(r[:width-1]) + "…"
		}
		b.WriteString(line + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// gpuSlots counts h's slots on GPU id.
func gpuSlots(h inventory.Host, id int) int {
	n := 0
	for _, g := range h.GPUs {
		if g == id {
			n += h.SlotsPerGPU
		}
	}
	return n
}

func gpuList(st HostState) string {
	switch {
	case st.Host.AutoGPUs:
		return "auto"
	case st.Host.Slurm != nil:
		return "slurm"
	}
	ids := make([]string, len(st.Host.GPUs))
	for i, id := range st.Host.GPUs {
		ids[i] = strconv.Itoa(id)
	}
	return strings.Join(ids, ",")
}

func slots(st HostState) string {
	switch {
	case st.Host.AutoGPUs:
		return "-"
	case st.Host.Slurm != nil:
		return strconv.Itoa(st.Host.Slurm.MaxJobs) + " (max_jobs)"
	}
	return strconv.Itoa(slotCount(st))
}

// slotCount counts a host's slots: its inventory's, with a GPU in MIG mode
// giving its slots to each of its instances.
func slotCount(st HostState) int {
	n := 0
	for _, id := range st.Host.GPUs {
		k := 1
		for _, g := range st.GPUs {
			if g.Index == id && len(g.MIG) > 0 {
				k = len(g.MIG)
			}
		}
		n += k * st.Host.SlotsPerGPU
	}
	return n
}

// hostJSON is one host in `gpudispatch hosts --json`.
type hostJSON struct {
	Name          string    `json:"name"`
	Address       string    `json:"address"`
	Up            bool      `json:"up"`
	Error         string    `json:"error,omitempty"`
	ServerVersion string    `json:"server_version,omitempty"`
	GPUs          []int     `json:"gpus,omitempty"`
	Slots         int       `json:"slots"`
	NvidiaSMI     []gpuJSON `json:"nvidia_smi,omitempty"`
	NvidiaSMIErr  string    `json:"nvidia_smi_error,omitempty"`
	LocksErr      string    `json:"locks_error,omitempty"`
	// Waiting are the runs that wait for the host's GPUs (fair share).
	Waiting []string `json:"waiting,omitempty"`
	// Kept is the user's jobs kept there with no coordinator.
	Kept    []jobshell.Kept `json:"kept,omitempty"`
	KeptErr string          `json:"kept_error,omitempty"`
	// Slurm is what a cluster's sinfo and squeue said.
	Slurm *slurm.Info `json:"slurm,omitempty"`
}

// gpuJSON is one GPU of a host in `gpudispatch hosts --json`.
type gpuJSON struct {
	executor.GPU
	Slots int `json:"slots"`
	// Busy says why the GPU counts as busy with other people's work; "" when
	// it is free.
	Busy string `json:"busy,omitempty"`
}

// WriteJSON prints the same as WriteTable, one JSON object per host.
func WriteJSON(w io.Writer, states []HostState, busyMB int) error {
	enc := json.NewEncoder(w)
	for _, st := range states {
		h := hostJSON{Name: st.Host.Name, Address: st.Addr, Up: st.Err == nil, ServerVersion: st.ServerVersion,
			GPUs: st.Host.GPUs}
		for _, g := range st.GPUs {
			h.NvidiaSMI = append(h.NvidiaSMI, gpuJSON{GPU: g, Slots: gpuSlots(st.Host, g.Index), Busy: g.BusyWhy(busyMB)})
		}
		if st.LockErr != nil {
			h.LocksErr = st.LockErr.Error()
		}
		h.Waiting = st.Waiting
		h.Kept = st.Kept
		if st.KeptErr != nil {
			h.KeptErr = st.KeptErr.Error()
		}
		switch {
		case st.Host.Slurm != nil:
			h.Slots, h.Slurm = st.Host.Slurm.MaxJobs, st.Slurm
		case !st.Host.AutoGPUs:
			h.Slots = slotCount(st)
		}
		if st.Err != nil {
			h.Error = st.Err.Error()
		}
		if st.GPUErr != nil {
			h.NvidiaSMIErr = st.GPUErr.Error()
		}
		if err := enc.Encode(h); err != nil {
			return err
		}
	}
	return nil
}
