package hosts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/gpulock"
	"github.com/gpudispatch/gpudispatch/hosts/nvidiasmi"
)

// ErrNoNvidiaSMI means the host has no nvidia-smi on the login shell's PATH.
var ErrNoNvidiaSMI = errors.New("nvidia-smi not found")

// ProbeGPUs asks nvidia-smi on r's machine for its GPUs, through the same
// login shell as jobs so it sees the same PATH.
func ProbeGPUs(ctx context.Context, r Runner) ([]executor.GPU, error) {
	out, code, err := probe(ctx, r, nvidiasmi.Query)
	switch {
	case err != nil:
		return nil, err
	case code == 127:
		return nil, ErrNoNvidiaSMI
	case code != 0:
		return nil, fmt.Errorf("nvidia-smi: %s", out)
	}
	return nvidiasmi.Parse(out)
}

// ProbeLocks fills in which gpudispatch run holds each GPU's lock in dir on
// r's machine, without taking any.
func ProbeLocks(ctx context.Context, r Runner, dir string, gpus []executor.GPU) error {
	if len(gpus) == 0 {
		return nil
	}
	out, code, err := probe(ctx, r, gpulock.ProbeScript(dir, gpus))
	if err == nil && code != 0 {
		err = fmt.Errorf("looking at GPU locks in %s: %s", dir, out)
	}
	if err != nil {
		return err
	}
	gpulock.ReadProbe(out, gpus)
	return nil
}

// probe runs script on r's machine and returns its stdout, or, when it
// exits non-zero, its exit status and stderr as one message.
func probe(ctx context.Context, r Runner, script string) (string, int, error) {
	var out, errOut bytes.Buffer
	code, err := r.Run(ctx, executor.Command{Script: script}, &out, &errOut)
	if err != nil || code == 0 {
		return out.String(), code, err
	}
	return fmt.Sprintf("exit status %d: %s", code, strings.TrimSpace(errOut.String())), code, nil
}
