package hosts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// ErrNoNvidiaSMI means the host has no nvidia-smi on the login shell's PATH.
var ErrNoNvidiaSMI = errors.New("nvidia-smi not found")

// gpuQuery asks for the fields GPU holds, in its order, then (after a line
// "---") for the compute processes, whose GPU is named by UUID. A driver
// that cannot list processes leaves the second part empty.
const gpuQuery = "nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu --format=csv,noheader,nounits && echo " + appsMark +
	" && { nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits 2>/dev/null || true; }"

const appsMark = "---"

// ProbeGPUs asks nvidia-smi on r's machine for its GPUs, through the same
// login shell as jobs so it sees the same PATH.
func ProbeGPUs(ctx context.Context, r Runner) ([]executor.GPU, error) {
	var out, errOut bytes.Buffer
	code, err := r.Run(ctx, executor.Command{Script: gpuQuery}, &out, &errOut)
	switch {
	case err != nil:
		return nil, err
	case code == 127:
		return nil, ErrNoNvidiaSMI
	case code != 0:
		return nil, fmt.Errorf("nvidia-smi: exit status %d: %s", code, strings.TrimSpace(errOut.String()))
	}
	gpus, apps, _ := strings.Cut(out.String(), "\n"+appsMark+"\n")
	parsed, err := parseGPUs(gpus)
	if err != nil {
		return nil, err
	}
	countProcesses(parsed, apps)
	return parsed, nil
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

// parseGPUs reads nvidia-smi's CSV answer to gpuQuery. Fields it cannot
// measure ("[N/A]", "[Not Supported]") read as 0.
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

func number(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}
