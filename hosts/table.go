package hosts

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/slurm"

	"github.com/gpudispatch/gpudispatch/inventory"
)

// WriteTable prints one line per host — its address, whether it is up and
// why not, its SSH server, its GPUs and slots — and under it a line per GPU
// that nvidia-smi reported: name, memory, utilisation, this inventory's
// slots on it, and whether other people's work makes it busy (a run's lock,
// compute processes, more than busyMB used).
func WriteTable(w io.Writer, states []HostState, busyMB int) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tADDRESS\tSTATE\tSERVER\tGPUS\tSLOTS\t")
	for _, st := range states {
		state := "up"
		if st.Err != nil {
			state = "down: " + st.Err.Error()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", st.Host.Name, st.Addr, state, cmp.Or(st.ServerVersion, "-"), gpuList(st), slots(st))
		for _, g := range st.GPUs {
			busy := cmp.Or(g.BusyWhy(busyMB), "free")
			n := gpuSlots(st.Host, g.Index)
			slotsWord := strconv.Itoa(n) + " slots"
			if n == 1 {
				slotsWord = "1 slot"
			}
			fmt.Fprintf(tw, "\t  gpu %d\t%s\t%d/%d MiB, %d%%\t%s\t%s\t%s\n", g.Index, g.Name, g.MemoryUsedMB, g.MemoryTotalMB, g.Utilization, g.UUID, slotsWord, busy)
		}
		if st.Slurm != nil && st.Err == nil {
			fmt.Fprintf(tw, "\t  partition %s\t%s\t\t\t\t\n", st.Host.Slurm.Partition, cmp.Or(st.Slurm.Partition, "-"))
			fmt.Fprintf(tw, "\t  your queue\t%s\t\t\t\t\n", cmp.Or(st.Slurm.Queue, "empty"))
		}
		if st.GPUErr != nil && st.Err == nil {
			fmt.Fprintf(tw, "\t  nvidia-smi\t%v\t\t\t\t\n", st.GPUErr)
		}
		if st.LockErr != nil {
			fmt.Fprintf(tw, "\t  locks\t%v\t\t\t\t\n", st.LockErr)
		}
	}
	return tw.Flush()
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
	return strconv.Itoa(len(st.Host.GPUs) * st.Host.SlotsPerGPU)
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
		switch {
		case st.Host.Slurm != nil:
			h.Slots, h.Slurm = st.Host.Slurm.MaxJobs, st.Slurm
		case !st.Host.AutoGPUs:
			h.Slots = len(st.Host.GPUs) * st.Host.SlotsPerGPU
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
