package executor

import "testing"

// A figure nvidia-smi did not give reads "?", never a number it is not;
// a GPU it cannot reach is said with its words.
func TestGPUUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		g    GPU
		want string
	}{
		{GPU{MemoryUsedMB: 1024, MemoryTotalMB: 81920, Utilization: 37}, "1024/81920 MiB, 37%"},
		{GPU{MemoryUsedMB: -1, MemoryTotalMB: -1, Utilization: 0}, "?/? MiB, 0%"},
		{GPU{MemoryUsedMB: 3, MemoryTotalMB: 81559, Utilization: -1}, "3/81559 MiB, ?%"},
		{GPU{Error: "Unable to determine the device handle for GPU1: Unknown Error"}, "cannot be reached: Unable to determine the device handle for GPU1: Unknown Error"},
	}
	for _, tt := range tests {
		if got := tt.g.Usage(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.g, got, tt.want)
		}
	}
	if why := (GPU{MemoryUsedMB: -1, Processes: 2}).BusyWhy(500); why != "2 processes, memory used unknown" {
		t.Errorf("busy with unknown memory: %q", why)
	}
	if why := (GPU{MemoryUsedMB: -1}).BusyWhy(500); why != "" {
		t.Errorf("unknown memory and no process: busy %q, want free", why)
	}
}
