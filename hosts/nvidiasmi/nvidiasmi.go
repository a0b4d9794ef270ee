// Package nvidiasmi asks nvidia-smi about a machine's GPUs and reads its
// answer: the command to run (Query) and its parser (Parse). It runs
// nothing itself; hosts runs Query through the same login shell as jobs.
//
// It reads nvidia-smi as it is on real machines: errors come on stdout as
// often as on stderr, and with any exit status; a GPU fallen off the bus is
// an error line ("Unable to determine the device handle for GPU1: …")
// among the other GPUs' rows, which are still good; warnings ("WARNING:
// infoROM is corrupted …") are not GPUs; figures nvidia-smi cannot give
// ("[N/A]", "[Not Supported]", "[Unknown Error]") or that cannot be true
// (a negative or zero total, more than a terabyte) are unknown, never 0.
// A GPU in MIG mode lists its instances under it in nvidia-smi -L, each with
// the UUID CUDA names it by and a profile that says its memory
// ("3g.40gb"); nvidia-smi's queries give no figures per instance (a
// compute process is listed under its GPU's UUID).
package nvidiasmi

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// Query asks for the fields executor.GPU holds, in its order, then (after a
// line "---") for the compute processes, whose GPU is named by UUID, then,
// when a GPU's utilisation is "[N/A]" as it is in MIG mode, (after a line
// "--- -L") for the list of GPUs and their MIG instances: nvidia-smi can
// take a second to answer, so a lab of whole GPUs is not asked twice. A
// driver that cannot list processes or instances leaves that part empty.
// Its exit status is the GPU query's: 127 means there is no nvidia-smi.
const Query = "q=$(nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu --format=csv,noheader,nounits); s=$?; " +
	"printf '%s\\n' \"$q\"; [ $s = 0 ] || exit $s; echo " + appsMark +
	"; nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits 2>/dev/null; " +
	"case $q in *'[N/A]'*) echo '" + listMark + "'; nvidia-smi -L 2>/dev/null ;; esac; exit 0"

const (
	appsMark = "---"
	listMark = "--- -L"
)

// maxMemoryMB is more memory than any GPU has (a terabyte): a figure above
// it is not one.
const maxMemoryMB = 1 << 20

// lostGPU is how nvidia-smi names a GPU it cannot reach, by index (a bus
// address after "GPU" names none).
var lostGPU = regexp.MustCompile(`device handle for GPU(\d+):`)

// listGPU and listMIG are the lines of nvidia-smi -L: "GPU 0: NVIDIA A100
// 80GB PCIe (UUID: GPU-…)", and under it "  MIG 3g.40gb  Device  0:
// (UUID: MIG-…)" (older drivers: "MIG-GPU-…/1/0", which CUDA takes too).
var (
	listGPU = regexp.MustCompile(`^GPU (\d+): .*\(UUID: [^)\s]+\)$`)
	listMIG = regexp.MustCompile(`^MIG (\S+)\s+Device\s+(\d+): \(UUID: ([^)\s]+)\)$`)
	// migMemory is the memory a MIG profile names: "3g.40gb", "1c.3g.71gb".
	migMemory = regexp.MustCompile(`\.(\d+)gb$`)
)

// Parse reads what Query printed on stdout and on stderr. A GPU nvidia-smi
// names in an error line has that line as its Error, and unknown figures;
// figures it cannot give are -1. It fails, with nvidia-smi's own words,
// only when no GPU row came at all and nvidia-smi said something else
// (an answer with nothing in it is no GPUs).
func Parse(stdout, stderr string) ([]executor.GPU, error) {
	stdout, list, _ := strings.Cut(stdout, "\n"+listMark+"\n")
	stdout = strings.TrimSuffix(stdout, "\n"+listMark)
	part, apps, _ := strings.Cut(stdout, "\n"+appsMark+"\n")
	part = strings.TrimSuffix(part, "\n"+appsMark)
	var gpus []executor.GPU
	var said []string
	for _, line := range strings.Split(part, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if g, ok := parseRow(line); ok {
			gpus = append(gpus, g)
			continue
		}
		said = append(said, line)
	}
	for _, line := range strings.Split(stderr, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			said = append(said, line)
		}
	}
	if len(gpus) == 0 && len(said) > 0 {
		return nil, &SaidError{Words: strings.Join(said, "; ")}
	}
	for _, line := range said {
		m := lostGPU.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		idx, _ := strconv.Atoi(m[1])
		if !listed(gpus, idx) {
			gpus = append(gpus, executor.GPU{Index: idx, MemoryTotalMB: -1, MemoryUsedMB: -1, Utilization: -1, Error: line})
		}
	}
	countProcesses(gpus, apps)
	addMIG(gpus, list)
	return gpus, nil
}

// addMIG gives each GPU the MIG instances nvidia-smi -L lists under it.
func addMIG(gpus []executor.GPU, list string) {
	var g *executor.GPU
	for _, line := range strings.Split(list, "\n") {
		line = strings.TrimSpace(line)
		if m := listGPU.FindStringSubmatch(line); m != nil {
			idx, _ := strconv.Atoi(m[1])
			g = nil
			for i := range gpus {
				if gpus[i].Index == idx && gpus[i].Error == "" {
					g = &gpus[i]
				}
			}
			continue
		}
		m := listMIG.FindStringSubmatch(line)
		if m == nil || g == nil {
			continue
		}
		dev, err := strconv.Atoi(m[2])
		if err != nil || dev >= executor.MIGDevices {
			continue
		}
		mem := -1
		if n := migMemory.FindStringSubmatch(m[1]); n != nil {
			if gb, err := strconv.Atoi(n[1]); err == nil && gb > 0 && gb*1024 <= maxMemoryMB {
				mem = gb * 1024
			}
		}
		g.MIG = append(g.MIG, executor.MIGInstance{Device: dev, Profile: m[1], UUID: m[3], MemoryMB: mem})
	}
}

// SaidError is nvidia-smi's answer when it gave no GPU: its own words
// ("Failed to initialize NVML: Driver/library version mismatch"), from
// stdout and stderr.
type SaidError struct{ Words string }

func (e *SaidError) Error() string { return "nvidia-smi: " + e.Words }

// parseRow reads one CSV row of the first part of Query's answer, or
// reports false for a line that is not one (an error or a warning).
func parseRow(line string) (executor.GPU, bool) {
	f := strings.Split(line, ",")
	if len(f) != 6 {
		return executor.GPU{}, false
	}
	for i := range f {
		f[i] = strings.TrimSpace(f[i])
	}
	idx, err := strconv.Atoi(f[0])
	if err != nil || idx < 0 {
		return executor.GPU{}, false
	}
	g := executor.GPU{Index: idx, UUID: f[1], Name: f[2],
		MemoryTotalMB: figure(f[3], 1, maxMemoryMB), MemoryUsedMB: figure(f[4], 0, maxMemoryMB), Utilization: figure(f[5], 0, 100)}
	if g.MemoryTotalMB > 0 && g.MemoryUsedMB > g.MemoryTotalMB {
		g.MemoryUsedMB = -1
	}
	if strings.HasPrefix(g.UUID, "[") {
		g.UUID = "" // [N/A], [Unknown Error]: no name for its lock
	}
	return g, true
}

// figure reads a number nvidia-smi gave, or -1 when it gave none
// ("[N/A]", "[Not Supported]") or one outside lo..hi.
func figure(s string, lo, hi int) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return -1
	}
	return n
}

func listed(gpus []executor.GPU, idx int) bool {
	for _, g := range gpus {
		if g.Index == idx {
			return true
		}
	}
	return false
}

// countProcesses adds up nvidia-smi's compute processes (gpu_uuid, pid,
// used_memory lines) per GPU.
func countProcesses(gpus []executor.GPU, apps string) {
	for _, line := range strings.Split(apps, "\n") {
		uuid, _, ok := strings.Cut(line, ",")
		if !ok {
			continue
		}
		for i := range gpus {
			if gpus[i].UUID != "" && gpus[i].UUID == strings.TrimSpace(uuid) {
				gpus[i].Processes++
			}
		}
	}
}
