// Package nvidiasmi asks nvidia-smi about a machine's GPUs and reads its
// answer: the command to run (Query) and its parser (Parse). It runs
// nothing itself; hosts runs Query through the same login shell as jobs.
package nvidiasmi

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// Query asks for the fields executor.GPU holds, in its order, then (after a
// line "---") for the compute processes, whose GPU is named by UUID. A
// driver that cannot list processes leaves the second part empty. Exit
// status 127 means there is no nvidia-smi.
const Query = "nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu --format=csv,noheader,nounits && echo " + appsMark +
	" && { nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits 2>/dev/null || true; }"

const appsMark = "---"

// Parse reads what Query printed. Fields nvidia-smi cannot measure
// ("[N/A]", "[Not Supported]") read as 0.
func Parse(out string) ([]executor.GPU, error) {
	gpus, apps, _ := strings.Cut(out, "\n"+appsMark+"\n")
	parsed, err := parseGPUs(gpus)
	if err != nil {
		return nil, err
	}
	countProcesses(parsed, apps)
	return parsed, nil
}

// parseGPUs reads the CSV lines of the first part of Query's answer.
func parseGPUs(csv string) ([]executor.GPU, error) {
	var gpus []executor.GPU
	for n, line := range strings.Split(strings.TrimSpace(csv), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) != 6 {
			return nil, fmt.Errorf("nvidia-smi line %d: want 6 fields, got %q", n+1, line)
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		idx, err := strconv.Atoi(f[0])
		if err != nil || idx < 0 {
			return nil, fmt.Errorf("nvidia-smi line %d: GPU index %q", n+1, f[0])
		}
		gpus = append(gpus, executor.GPU{
			Index: idx, UUID: f[1], Name: f[2],
			MemoryTotalMB: number(f[3]), MemoryUsedMB: number(f[4]), Utilization: number(f[5]),
		})
	}
	return gpus, nil
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
			if gpus[i].UUID == strings.TrimSpace(uuid) {
				gpus[i].Processes++
			}
		}
	}
}

func number(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}
