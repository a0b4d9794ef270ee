package hosts

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// The hosts table fits a terminal: a long reason goes on a line of its own
// and is cut to the width, the banner and UUIDs only with Verbose, and no
// column widens for a reason.
func TestWriteTable(t *testing.T) {
	t.Parallel()
	states := []HostState{
		{Host: inventory.Host{Name: "node1", GPUs: []int{0}, SlotsPerGPU: 1, Tags: []string{"ib", "nvlink"}}, Addr: "alice@10.0.0.11:22", ServerVersion: "SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3",
			GPUs: []executor.GPU{{Index: 0, Name: "NVIDIA A100", UUID: "GPU-5d1c2c4e-1f1e-7a2b-9b1d-3f5e6a7b8c9d", MemoryTotalMB: 81920, MemoryUsedMB: -1, Utilization: 3}}},
		{Host: inventory.Host{Name: "node2", GPUs: []int{0, 1}, SlotsPerGPU: 1}, Addr: "alice@10.0.0.12:22", Retrying: true,
			Err: errors.New("no SSH greeting from 10.0.0.12:22 within 10s (--connect-timeout): the host hangs, a firewall drops the packets, or what listens there is not an SSH server")},
	}
	for _, tc := range []struct {
		name     string
		o        TableOptions
		want     []string
		wantNot  []string
		maxWidth int
	}{
		{"a terminal", TableOptions{Width: 80},
			[]string{"node2  alice@10.0.0.12:22  down", "    no SSH greeting from 10.0.0.12:22 within 10s", "1 slot  free", "    tags: ib, nvlink", "NVIDIA A100  ?/81920 MiB, 3%"},
			[]string{"OpenSSH", "GPU-5d1c"}, 80},
		{"verbose, piped", TableOptions{Verbose: true},
			[]string{"SSH-2.0-OpenSSH_9.2p1", "GPU-5d1c2c4e-1f1e-7a2b-9b1d-3f5e6a7b8c9d", "what listens there is not an SSH server"}, nil, 0},
	} {
		var b bytes.Buffer
		if err := WriteTable(&b, states, 500, tc.o); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: no %q in\n%s", tc.name, w, out)
			}
		}
		for _, w := range tc.wantNot {
			if strings.Contains(out, w) {
				t.Errorf("%s: %q in\n%s", tc.name, w, out)
			}
		}
		for _, line := range strings.Split(out, "\n") {
			if tc.maxWidth > 0 && len([]rune(line)) > tc.maxWidth {
				t.Errorf("%s: a line of %d runes: %q", tc.name, len([]rune(line)), line)
			}
		}
		// The host rows stay narrow: the reason widens no column.
		if first := strings.SplitN(out, "\n", 2)[0]; !tc.o.Verbose && len(first) > 70 {
			t.Errorf("%s: header %q is widened", tc.name, first)
		}
	}
}

// A host whose inventory sets GPU memory budgets shows each GPU's: its
// memory less reserve_mb.
func TestWriteTableBudget(t *testing.T) {
	st := HostState{Host: inventory.Host{Name: "big", GPUs: []int{0}, SlotsPerGPU: 1, ReserveMB: 1024, MaxPerGPU: 4}, Addr: "local",
		GPUs: []executor.GPU{{Index: 0, Name: "H100", MemoryTotalMB: 81920}}}
	var b bytes.Buffer
	if err := WriteTable(&b, []HostState{st}, 500, TableOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "1 slot or 80896 MiB of mem= jobs") {
		t.Errorf("no budget in\n%s", b.String())
	}
}

// A GPU in MIG mode lists its instances under it, each with its id, its
// profile, its memory and its slots (c4: an A100 PCIe split in two).
func TestWriteTableMIG(t *testing.T) {
	t.Parallel()
	states := []HostState{{Host: inventory.Host{Name: "node1", GPUs: []int{0}, SlotsPerGPU: 1}, Addr: "alice@10.0.0.11:22",
		GPUs: []executor.GPU{{Index: 0, Name: "NVIDIA A100 80GB PCIe", UUID: "GPU-932bfb2c-849a-2a22-1e84-9eff6bc02b39", MemoryTotalMB: 81920, MemoryUsedMB: 25, Utilization: -1,
			MIG: []executor.MIGInstance{{Device: 0, Profile: "3g.40gb", UUID: "MIG-0929581a-2be6-5dec-bf34-0954c6c529a6", MemoryMB: 40960},
				{Device: 1, Profile: "3g.40gb", UUID: "MIG-3adbed3a-d03d-549f-a016-ba1fd7359f23", MemoryMB: 40960}}}}}}
	var b bytes.Buffer
	if err := WriteTable(&b, states, 500, TableOptions{Verbose: true}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(out, "\n")
	want := []*regexp.Regexp{
		regexp.MustCompile(`^ +gpu 0 +NVIDIA A100 80GB PCIe +25/81920 MiB, \?% +GPU-932bfb2c\S+ +MIG: 2 instances +free$`),
		regexp.MustCompile(`^ +mig 0:0 +MIG 3g.40gb +40960 MiB +MIG-0929581a-2be6-5dec-bf34-0954c6c529a6 +1 slot$`),
		regexp.MustCompile(`^ +mig 0:1 +MIG 3g.40gb +40960 MiB +MIG-3adbed3a-d03d-549f-a016-ba1fd7359f23 +1 slot$`),
	}
	for i, re := range want {
		if len(lines) < i+3 || !re.MatchString(lines[i+2]) {
			t.Errorf("line %d: want %s in\n%s", i+3, re, out)
		}
	}
}
