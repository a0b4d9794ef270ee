package executor

import "fmt"

// GPU is what nvidia-smi reports about one GPU.
type GPU struct {
	Index         int    `json:"index"`
	UUID          string `json:"uuid"`
	Name          string `json:"name"`
	MemoryTotalMB int    `json:"memory_total_mb"`
	MemoryUsedMB  int    `json:"memory_used_mb"`
	Utilization   int    `json:"utilization"` // percent
	// Processes counts the compute processes nvidia-smi lists on the GPU.
	Processes int `json:"processes"`
	// LockedBy names the gpudispatch run that holds the GPU's lock, when
	// one does and it was asked (gpudispatch hosts).
	LockedBy string `json:"locked_by,omitempty"`
}

// BusyWhy says why g counts as busy with other people's work (locked by a
// gpudispatch run, more than memoryMB used, or compute processes), or "".
func (g GPU) BusyWhy(memoryMB int) string {
	switch {
	case g.LockedBy != "":
		return "locked by " + g.LockedBy
	case g.Processes > 0:
		if g.Processes == 1 {
			return fmt.Sprintf("1 process, %d MiB used", g.MemoryUsedMB)
		}
		return fmt.Sprintf("%d processes, %d MiB used", g.Processes, g.MemoryUsedMB)
	case g.MemoryUsedMB > memoryMB:
		return fmt.Sprintf("%d MiB used (more than %d)", g.MemoryUsedMB, memoryMB)
	}
	return ""
}
