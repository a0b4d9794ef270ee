package executor

import (
	"fmt"
	"strconv"
)

// GPU is what nvidia-smi reports about one GPU. A figure it cannot give
// ("[N/A]", or one that cannot be true) is -1: unknown, never 0.
type GPU struct {
	Index         int    `json:"index"`
	UUID          string `json:"uuid"`
	Name          string `json:"name"`
	MemoryTotalMB int    `json:"memory_total_mb"`
	MemoryUsedMB  int    `json:"memory_used_mb"`
	Utilization   int    `json:"utilization"` // percent
	// Error is what nvidia-smi said of a GPU it cannot reach (fallen off
	// the bus): such a GPU is not to be used.
	Error string `json:"error,omitempty"`
	// Processes counts the compute processes nvidia-smi lists on the GPU.
	Processes int `json:"processes"`
	// LockedBy names the gpudispatch run that holds the GPU's lock, when
	// one does and it was asked (gpudispatch hosts).
	LockedBy string `json:"locked_by,omitempty"`
	// MIG lists the GPU's MIG instances while MIG is on and nvidia-smi -L
	// names some: each is a slot of its own, and the GPU as a whole takes
	// no job (CUDA would show it only its first instance).
	MIG []MIGInstance `json:"mig,omitempty"`
}

// MIGInstance is one MIG instance of a GPU, as nvidia-smi -L gives it.
type MIGInstance struct {
	// Device is its number under its GPU ("MIG 1g.10gb Device 2").
	Device int `json:"device"`
	// Profile is what it is: "3g.40gb", "1c.3g.71gb".
	Profile string `json:"profile"`
	// UUID ("MIG-…") is what CUDA_VISIBLE_DEVICES names it by.
	UUID string `json:"uuid"`
	// MemoryMB is its memory, from its profile; -1 when it does not say.
	MemoryMB int `json:"memory_mb"`
}

// BusyWhy says why g counts as busy with other people's work (locked by a
// gpudispatch run, more than memoryMB used, or compute processes), or "".
func (g GPU) BusyWhy(memoryMB int) string {
	switch {
	case g.LockedBy != "":
		return "locked by " + g.LockedBy
	case g.Processes > 0:
		used := fmt.Sprintf("%d MiB used", g.MemoryUsedMB)
		if g.MemoryUsedMB < 0 {
			used = "memory used unknown"
		}
		if g.Processes == 1 {
			return "1 process, " + used
		}
		return fmt.Sprintf("%d processes, %s", g.Processes, used)
	case g.MemoryUsedMB > memoryMB:
		return fmt.Sprintf("%d MiB used (more than %d)", g.MemoryUsedMB, memoryMB)
	}
	return ""
}

// Usage says what g holds for people: "1024/81920 MiB, 37%", with "?" for
// a figure nvidia-smi did not give, or what it said of a GPU it cannot
// reach.
func (g GPU) Usage() string {
	if g.Error != "" {
		return "cannot be reached: " + g.Error
	}
	known := func(n int) string {
		if n < 0 {
			return "?"
		}
		return strconv.Itoa(n)
	}
	return fmt.Sprintf("%s/%s MiB, %s%%", known(g.MemoryUsedMB), known(g.MemoryTotalMB), known(g.Utilization))
}
