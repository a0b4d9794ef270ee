package hosts

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteTable prints one line per host — its address, whether it is up and
// why not, its SSH server, its GPUs and slots — and under it a line per GPU
// that nvidia-smi reported.
func WriteTable(w io.Writer, states []HostState) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tADDRESS\tSTATE\tSERVER\tGPUS\tSLOTS")
	for _, st := range states {
		state := "up"
		if st.Err != nil {
			state = "down: " + st.Err.Error()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", st.Host.Name, st.Addr, state, first(st.ServerVersion, "-"), gpuList(st), slots(st))
		for _, g := range st.GPUs {
			fmt.Fprintf(tw, "\t  gpu %d\t%s\t%d/%d MiB, %d%%\t%s\t\n", g.Index, g.Name, g.MemoryUsedMB, g.MemoryTotalMB, g.Utilization, g.UUID)
		}
		if st.GPUErr != nil && st.Err == nil {
			fmt.Fprintf(tw, "\t  nvidia-smi\t%v\t\t\t\n", st.GPUErr)
		}
	}
	return tw.Flush()
}

func gpuList(st HostState) string {
	if st.Host.AutoGPUs {
		return "auto"
	}
	ids := make([]string, len(st.Host.GPUs))
	for i, id := range st.Host.GPUs {
		ids[i] = strconv.Itoa(id)
	}
	return strings.Join(ids, ",")
}

func slots(st HostState) string {
	if st.Host.AutoGPUs {
		return "-"
	}
	return strconv.Itoa(len(st.Host.GPUs) * st.Host.SlotsPerGPU)
}

// hostJSON is one host in `gpudispatch hosts --json`.
type hostJSON struct {
	Name          string `json:"name"`
	Address       string `json:"address"`
	Up            bool   `json:"up"`
	Error         string `json:"error,omitempty"`
	ServerVersion string `json:"server_version,omitempty"`
	GPUs          []int  `json:"gpus,omitempty"`
	Slots         int    `json:"slots"`
	NvidiaSMI     []GPU  `json:"nvidia_smi,omitempty"`
	NvidiaSMIErr  string `json:"nvidia_smi_error,omitempty"`
}

// WriteJSON prints the same as WriteTable, one JSON object per host.
func WriteJSON(w io.Writer, states []HostState) error {
	enc := json.NewEncoder(w)
	for _, st := range states {
		h := hostJSON{Name: st.Host.Name, Address: st.Addr, Up: st.Err == nil, ServerVersion: st.ServerVersion,
			GPUs: st.Host.GPUs, NvidiaSMI: st.GPUs}
		if !st.Host.AutoGPUs {
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
