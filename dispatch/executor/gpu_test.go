package executor

import "testing"

func TestBusyWhy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		gpu  GPU
		want string
	}{
		{GPU{MemoryUsedMB: 500}, ""},
		{GPU{MemoryUsedMB: 501}, "501 MiB used (more than 500)"},
		{GPU{Processes: 2, MemoryUsedMB: 30}, "2 processes, 30 MiB used"},
		{GPU{LockedBy: "run X of bob@n1 (pid 7)", Processes: 1}, "locked by run X of bob@n1 (pid 7)"},
	}
	for _, tt := range tests {
		if got := tt.gpu.BusyWhy(500); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.gpu, got, tt.want)
		}
	}
}
