package nvidiasmi

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, csv string
		want      []executor.GPU
		wantErr   string
	}{
		{name: "two GPUs", csv: "0, GPU-aaa, NVIDIA A100-SXM4-80GB, 81920, 1024, 37\n1, GPU-bbb, NVIDIA A100-SXM4-80GB, 81920, 0, 0\n",
			want: []executor.GPU{{Index: 0, UUID: "GPU-aaa", Name: "NVIDIA A100-SXM4-80GB", MemoryTotalMB: 81920, MemoryUsedMB: 1024, Utilization: 37}, {Index: 1, UUID: "GPU-bbb", Name: "NVIDIA A100-SXM4-80GB", MemoryTotalMB: 81920, MemoryUsedMB: 0, Utilization: 0}}},
		{name: "not supported fields", csv: "3, GPU-c, Tesla K80, 11441, [N/A], [Not Supported]\n",
			want: []executor.GPU{{Index: 3, UUID: "GPU-c", Name: "Tesla K80", MemoryTotalMB: 11441, MemoryUsedMB: 0, Utilization: 0}}},
		{name: "no GPUs", csv: "\n", want: nil},
		{name: "short line", csv: "0, GPU-a\n", wantErr: "nvidia-smi line 1: want 6 fields"},
		{name: "bad index", csv: "x, u, n, 1, 1, 1\n", wantErr: `nvidia-smi line 1: GPU index "x"`},
		{name: "compute processes", csv: "0, GPU-a, A, 100, 1, 2\n1, GPU-b, A, 100, 3, 4\n---\nGPU-b, 17, 30\nGPU-b, 18, 30\n",
			want: []executor.GPU{{Index: 0, UUID: "GPU-a", Name: "A", MemoryTotalMB: 100, MemoryUsedMB: 1, Utilization: 2}, {Index: 1, UUID: "GPU-b", Name: "A", MemoryTotalMB: 100, MemoryUsedMB: 3, Utilization: 4, Processes: 2}}},
		{name: "no process list", csv: "0, GPU-a, A, 100, 1, 2\n---\n",
			want: []executor.GPU{{Index: 0, UUID: "GPU-a", Name: "A", MemoryTotalMB: 100, MemoryUsedMB: 1, Utilization: 2}}},
	}
	for _, tt := range tests {
		got, err := Parse(tt.csv)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: err = %v, want %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: got %+v, %v", tt.name, got, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("0, GPU-aaa, NVIDIA A100-SXM4-80GB, 81920, 1024, 37\n")
	f.Add("3, GPU-c, Tesla K80, 11441, [N/A], [Not Supported]\n1,a,b,c,d,e")
	f.Fuzz(func(t *testing.T, csv string) {
		gpus, err := Parse(csv)
		if err != nil {
			return
		}
		for _, g := range gpus {
			if g.Index < 0 {
				t.Fatalf("negative index from %q", csv)
			}
		}
	})
}
