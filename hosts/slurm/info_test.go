package slurm

import (
	"slices"
	"testing"
)

// The gres types come from sinfo's GPU words as Check records them: typed
// counts ("gpu:a100:4", with a socket list or not, several per node
// kind), each once; an untyped count or a node with none names no type.
func TestInfoGPUTypes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		partition string
		want      []string
	}{
		{"up 1 idle gpu:fake:4;", []string{"fake"}},
		{"up 2 mixed gpu:a100:4(S:0-1),gpu:v100:2(S:0);up 1 idle gpu:a100:8;", []string{"a100", "v100"}},
		{"up 3 idle gpu:4;up 1 down* (null);", nil},
		{"up 1 idle gpu:h100_80gb:8(S:0-1),shard:h100_80gb:64;", []string{"h100_80gb"}},
		{"", nil},
	}
	for _, tt := range tests {
		if got := (Info{Partition: tt.partition}).GPUTypes(); !slices.Equal(got, tt.want) {
			t.Errorf("%q: %q, want %q", tt.partition, got, tt.want)
		}
	}
}
