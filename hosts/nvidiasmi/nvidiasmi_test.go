package nvidiasmi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, stdout, stderr string
		want                 []executor.GPU
		wantErr              string
	}{
		{name: "two GPUs", stdout: "0, GPU-aaa, NVIDIA A100-SXM4-80GB, 81920, 1024, 37\n1, GPU-bbb, NVIDIA A100-SXM4-80GB, 81920, 0, 0\n---\n",
			want: []executor.GPU{{Index: 0, UUID: "GPU-aaa", Name: "NVIDIA A100-SXM4-80GB", MemoryTotalMB: 81920, MemoryUsedMB: 1024, Utilization: 37}, {Index: 1, UUID: "GPU-bbb", Name: "NVIDIA A100-SXM4-80GB", MemoryTotalMB: 81920, MemoryUsedMB: 0, Utilization: 0}}},
		{name: "figures it cannot give are unknown", stdout: "3, GPU-c, Tesla K80, 11441, [N/A], [Not Supported]\n",
			want: []executor.GPU{{Index: 3, UUID: "GPU-c", Name: "Tesla K80", MemoryTotalMB: 11441, MemoryUsedMB: -1, Utilization: -1}}},
		{name: "figures that cannot be true are unknown", stdout: "0, GPU-a, A, -81920, 3, 250\n1, GPU-b, B, 0, 0, -1\n2, GPU-c, C, 9999999999, 5, 5\n3, GPU-d, D, 100, 200, 5\n",
			want: []executor.GPU{{Index: 0, UUID: "GPU-a", Name: "A", MemoryTotalMB: -1, MemoryUsedMB: 3, Utilization: -1}, {Index: 1, UUID: "GPU-b", Name: "B", MemoryTotalMB: -1, MemoryUsedMB: 0, Utilization: -1},
				{Index: 2, UUID: "GPU-c", Name: "C", MemoryTotalMB: -1, MemoryUsedMB: 5, Utilization: 5}, {Index: 3, UUID: "GPU-d", Name: "D", MemoryTotalMB: 100, MemoryUsedMB: -1, Utilization: 5}}},
		{name: "no GPUs", stdout: "\n", want: nil},
		{name: "compute processes", stdout: "0, GPU-a, A, 100, 1, 2\n1, GPU-b, A, 100, 3, 4\n---\nGPU-b, 17, 30\nGPU-b, 18, 30\n",
			want: []executor.GPU{{Index: 0, UUID: "GPU-a", Name: "A", MemoryTotalMB: 100, MemoryUsedMB: 1, Utilization: 2}, {Index: 1, UUID: "GPU-b", Name: "A", MemoryTotalMB: 100, MemoryUsedMB: 3, Utilization: 4, Processes: 2}}},
		{name: "a short line alone is nvidia-smi's words", stdout: "0, GPU-a\n", wantErr: "nvidia-smi: 0, GPU-a"},
		{name: "a bad index alone is nvidia-smi's words", stdout: "x, u, n, 1, 1, 1\n", wantErr: "nvidia-smi: x, u, n, 1, 1, 1"},
	}
	for _, tt := range tests {
		got, err := Parse(tt.stdout, tt.stderr)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("%s: err = %v, want %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: got %+v, %v\nwant %+v", tt.name, got, err, tt.want)
		}
	}
}

// fixture reads testdata/name: real nvidia-smi outputs (SOURCES.md).
func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(b)
}

// Real outputs, as real machines print them: normal servers, [N/A]
// figures, and errors on stdout or stderr, with one GPU lost among good
// ones.
func TestParseRealOutputs(t *testing.T) {
	t.Parallel()
	lost := "Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown Error"
	tests := []struct {
		name string
		// gpus, by index, with their memory total and used (-1: unknown)
		// and utilisation; lost names a GPU's error instead.
		want    map[int][3]int
		procs   map[int]int
		lost    map[int]string
		wantErr string
	}{
		{name: "a1_titanx8_gpustat5", want: map[int][3]int{0: {12206, 802, 0}, 1: {12206, 10032, 86}, 2: {12206, 6442, 85}, 3: {12206, 6442, 60},
			4: {12206, 6459, 84}, 5: {12206, 6440, 83}, 6: {12206, 6451, 83}, 7: {12206, 6442, 82}}},
		{name: "a2_h100_hbm3_load", want: map[int][3]int{0: {81559, 19818, 100}}, procs: map[int]int{0: 3}},
		{name: "a3_h200_load", want: map[int][3]int{0: {143771, 32362, 100}}, procs: map[int]int{0: 3}},
		{name: "a4_l40s_idle", want: map[int][3]int{0: {46068, 0, 100}}},
		{name: "a5_rtx2080super_load", want: map[int][3]int{0: {8192, 815, 8}}, procs: map[int]int{0: 2}},
		{name: "b1_gb10", want: map[int][3]int{0: {-1, -1, 0}}},
		{name: "c1_h100_mig_load", want: map[int][3]int{0: {81559, 11125, -1}}, procs: map[int]int{0: 3}},
		{name: "e2_windows_wddm_na_used", want: map[int][3]int{0: {8192, 797, 0}}, procs: map[int]int{0: 19}},
		{name: "e3_rtx4080super_idle_kwin", want: map[int][3]int{0: {16376, 596, 0}}, procs: map[int]int{0: 1}},
		{name: "d1_driver_comm_gputil26", wantErr: "nvidia-smi: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."},
		{name: "d2_version_mismatch_gputil55", wantErr: "nvidia-smi: Failed to initialize NVML: Driver/library version mismatch; NVML library version: 535.161"},
		{name: "d3_nvml_unknown_gpustack2078", wantErr: "nvidia-smi: Failed to initialize NVML: Unknown Error"},
		{name: "d4_no_supported_gpus_dra1008", wantErr: "nvidia-smi: Failed to initialize NVML: No supported GPUs were found; Unable to determine the number of GPUs"},
		{name: "d5_no_devices_singuconda6", wantErr: "nvidia-smi: No devices were found"},
		{name: "d6_gpu_lost_rc15", wantErr: "nvidia-smi: Unable to determine the device handle for GPU0000:C3:00.0: GPU is lost.  Reboot the system to recover this GPU"},
		{name: "d7_lost_gpu1_of4_rc0", want: map[int][3]int{0: {97887, 88450, 100}, 2: {97887, 88450, 100}, 3: {97887, 10, 0}}, lost: map[int]string{1: lost}},
		{name: "d7_lost_gpu1_of4_rc15", want: map[int][3]int{0: {97887, 88450, 100}, 2: {97887, 88450, 100}, 3: {97887, 10, 0}}, lost: map[int]string{1: lost}},
		{name: "d7_lost_gpu1_of4_stderr_rc0", want: map[int][3]int{0: {97887, 88450, 100}, 2: {97887, 88450, 100}, 3: {97887, 10, 0}}, lost: map[int]string{1: lost}},
		{name: "d7b_unknown_error_row_fixture", wantErr: "nvidia-smi: 0, GPU-1a2b3c4d-0000-0000-0000-000000000000, NVIDIA GeForce RTX 5060 Ti, 18.42; Unable to determine the device handle for GPU0000:02:00.0: Unknown Error; [Unknown Error], [Unknown Error], [Unknown Error], [Unknown Error]"},
		{name: "d8_inforom_rc14", want: map[int][3]int{0: {16280, 0, 0}}},
		{name: "d8_inforom_stdout_rc0", want: map[int][3]int{0: {16280, 0, 0}}},
	}
	for _, tt := range tests {
		stdout := fixture(t, tt.name+".stdout") + fixture(t, tt.name+".orig.txt")
		if gpu := fixture(t, tt.name+".gpu.txt"); gpu != "" {
			stdout = gpu + appsMark + "\n" + fixture(t, tt.name+".apps.txt")
		}
		gpus, err := Parse(stdout, fixture(t, tt.name+".stderr"))
		if tt.wantErr != "" {
			var said *SaidError
			if !errors.As(err, &said) || err.Error() != tt.wantErr {
				t.Errorf("%s: err = %v, want %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		got, gotLost, gotProcs := map[int][3]int{}, map[int]string{}, map[int]int{}
		for _, g := range gpus {
			if g.Error != "" {
				gotLost[g.Index] = g.Error
				continue
			}
			got[g.Index] = [3]int{g.MemoryTotalMB, g.MemoryUsedMB, g.Utilization}
			if g.Processes > 0 {
				gotProcs[g.Index] = g.Processes
			}
		}
		if !reflect.DeepEqual(got, tt.want) || len(gotLost)+len(tt.lost) > 0 && !reflect.DeepEqual(gotLost, tt.lost) || len(gotProcs)+len(tt.procs) > 0 && !reflect.DeepEqual(gotProcs, tt.procs) {
			t.Errorf("%s: GPUs %v, lost %v, processes %v; want %v, %v, %v", tt.name, got, gotLost, gotProcs, tt.want, tt.lost, tt.procs)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("0, GPU-aaa, NVIDIA A100-SXM4-80GB, 81920, 1024, 37\n", "")
	f.Add("3, GPU-c, Tesla K80, 11441, [N/A], [Not Supported]\n1,a,b,c,d,e", "")
	f.Add("Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown Error\n0, GPU-a, A, 100, 1, 2\n---\nGPU-a, 1, 2\n", "WARNING: infoROM is corrupted")
	f.Add("0, GPU-a, A, 100, 1, [N/A]\n---\n--- -L\nGPU 0: A (UUID: GPU-a)\n  MIG 1g.10gb Device  0: (UUID: MIG-b)\n", "")
	f.Fuzz(func(t *testing.T, stdout, stderr string) {
		gpus, err := Parse(stdout, stderr)
		if err != nil {
			if len(gpus) != 0 || !strings.HasPrefix(err.Error(), "nvidia-smi: ") {
				t.Fatalf("error %v with GPUs %+v", err, gpus)
			}
			return
		}
		for _, g := range gpus {
			if g.Index < 0 || g.MemoryTotalMB < -1 || g.MemoryTotalMB == 0 || g.MemoryUsedMB < -1 || g.Utilization < -1 || g.Utilization > 100 {
				t.Fatalf("impossible figures %+v from %q", g, stdout)
			}
			for _, m := range g.MIG {
				if m.Device < 0 || m.Device >= executor.MIGDevices || m.MemoryMB < -1 || m.MemoryMB == 0 || g.Error != "" {
					t.Fatalf("impossible MIG instance %+v of %+v from %q", m, g, stdout)
				}
			}
		}
	})
}

// MIG instances come from nvidia-smi -L, as real machines print it: each
// under its GPU, with the UUID CUDA names it by and its profile's memory.
// A GPU not in MIG mode has none (c3: GPU 0 is, GPUs 1-3 are not).
func TestParseMIG(t *testing.T) {
	t.Parallel()
	// rows for the -L-only fixtures: what the GPU query gives such a GPU.
	rows := map[string]string{
		"c3_telegraf5812_mixed": "0, GPU-513536b6-7d19-9063-b049-1e69664bb298, NVIDIA A100-SXM4-80GB, 81920, 45, [N/A]\n" +
			"1, GPU-d8594bd4-0fc3-8595-e355-7c98138f3b95, NVIDIA A100-SXM4-80GB, 81920, 0, 0\n" +
			"2, GPU-5e375e7e-b41f-155b-dcdc-534524c356fc, NVIDIA A100-SXM4-80GB, 81920, 0, 0\n" +
			"3, GPU-69ec2344-ebac-b028-f88f-452abb3d7f11, NVIDIA A100-SXM4-80GB, 81920, 0, 0\n",
		"c4_nct203_a100pcie": "0, GPU-932bfb2c-849a-2a22-1e84-9eff6bc02b39, NVIDIA A100 80GB PCIe, 81920, 25, [N/A]\n",
	}
	tests := []struct {
		name, gpu string
		// want is each GPU's instances: "device profile uuid memory".
		want map[int][]string
	}{
		{name: "c1_h100_mig", gpu: "c1_h100_mig_idle", want: map[int][]string{0: {
			"0 3g.40gb MIG-00000000-0000-0000-0000-000000000000 40960", "1 2g.20gb MIG-00000001-0000-0000-0000-000000000001 20480",
			"2 1g.10gb MIG-00000002-0000-0000-0000-000000000002 10240", "3 1g.10gb MIG-00000003-0000-0000-0000-000000000003 10240"}}},
		{name: "c2_h200_mig", gpu: "c2_h200_mig_load", want: map[int][]string{0: {
			"0 1c.3g.71gb MIG-00000000-0000-0000-0000-000000000000 72704", "1 2c.3g.71gb MIG-00000001-0000-0000-0000-000000000001 72704",
			"2 2g.35gb MIG-00000002-0000-0000-0000-000000000002 35840", "3 1g.18gb MIG-00000003-0000-0000-0000-000000000003 18432",
			"4 1g.18gb MIG-00000004-0000-0000-0000-000000000004 18432"}}},
		{name: "c3_telegraf5812_mixed", want: map[int][]string{0: {
			"0 1g.20gb MIG-ce861fb0-a248-58ce-a9a8-f9adbc22a66a 20480", "1 1g.20gb MIG-a45882f0-9215-5733-a0c1-49286ab31cb5 20480",
			"2 1g.20gb MIG-f00d722c-f4e1-52c9-aa31-750441ae1bfe 20480", "3 1g.20gb MIG-930574a9-d43a-5d2b-95da-3e68384c8d6b 20480"}, 1: nil, 2: nil, 3: nil}},
		{name: "c4_nct203_a100pcie", want: map[int][]string{0: {
			"0 3g.40gb MIG-0929581a-2be6-5dec-bf34-0954c6c529a6 40960", "1 3g.40gb MIG-3adbed3a-d03d-549f-a016-ba1fd7359f23 40960"}}},
		{name: "an old driver's MIG UUID and a profile of no memory", want: map[int][]string{0: {"0 7g.weird MIG-GPU-aa/1/0 -1"}}},
	}
	for _, tt := range tests {
		row, list := rows[tt.name], fixture(t, tt.name+".L.txt")
		if tt.gpu != "" {
			row = fixture(t, tt.gpu+".gpu.txt") + appsMark + "\n" + fixture(t, tt.gpu+".apps.txt")
		}
		if list == "" {
			row, list = "0, GPU-aa, A100, 40960, 0, [N/A]\n", "GPU 0: A100 (UUID: GPU-aa)\n  MIG 7g.weird  Device  0: (UUID: MIG-GPU-aa/1/0)\n"
		}
		gpus, err := Parse(row+listMark+"\n"+list, "")
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		got := map[int][]string{}
		for _, g := range gpus {
			var mig []string
			for _, m := range g.MIG {
				mig = append(mig, fmt.Sprintf("%d %s %s %d", m.Device, m.Profile, m.UUID, m.MemoryMB))
			}
			got[g.Index] = mig
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: instances %v\nwant %v", tt.name, got, tt.want)
		}
	}
}

// What real drivers print where they give no figure, in other queries'
// fields (b1: a GB10's memory; b2: [N/A] on a new driver, [Not Supported] on an old one; b3: a
// vGPU's [N/A]; b4: [Unknown Error]), reads as unknown, never as a number;
// the figures beside them read as they are.
func TestFiguresNvidiaSMIDoesNotGive(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"b1_gb10_nvitop208", "b2_i3pystatus776", "b3_prmon318_h100l_vgpu", "b4_mindminer627_unknown_error"} {
		text := fixture(t, name+".orig.txt")
		unknown, known := 0, 0
		for _, line := range strings.Split(text, "\n") {
			for _, f := range strings.Split(line, ",") {
				f = strings.TrimSpace(f)
				switch n := figure(f, 0, maxMemoryMB); {
				case strings.HasPrefix(f, "["):
					unknown++
					if n != -1 {
						t.Errorf("%s: %q read as %d", name, f, n)
					}
				case strings.Trim(f, "0123456789") == "" && f != "":
					known++
					if n < 0 {
						t.Errorf("%s: %q read as unknown", name, f)
					}
				}
			}
		}
		if unknown == 0 || known == 0 {
			t.Errorf("%s: %d unknown and %d known figures: the fixture is not what it was", name, unknown, known)
		}
	}
}
