package hosts

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpudispatch/gpudispatch/inventory"
)

// ErrRemoteUnsupported is returned for a host that is not local: this build
// runs jobs on this machine only.
var ErrRemoteUnsupported = errors.New("remote hosts (over SSH) are not supported by this build yet; mark the host `local: true` or use --gpus")

// Open prepares a Runner for every host of inv and returns them with a copy
// of inv whose `gpus: auto` hosts list the GPUs nvidia-smi reported.
func Open(ctx context.Context, inv *inventory.Inventory, sup Supervision) (*inventory.Inventory, Set, error) {
	out := *inv
	out.Hosts = append([]inventory.Host(nil), inv.Hosts...)
	set := Set{}
	for i := range out.Hosts {
		h := &out.Hosts[i]
		if !h.Local {
			return nil, nil, fmt.Errorf("host %s: %w", h.Name, ErrRemoteUnsupported)
		}
		r := Local{Supervision: sup}
		if h.AutoGPUs {
			gpus, err := ProbeGPUs(ctx, r)
			if err != nil {
				return nil, nil, fmt.Errorf("host %s: gpus: auto: %w", h.Name, err)
			}
			if len(gpus) == 0 {
				return nil, nil, fmt.Errorf("host %s: gpus: auto: nvidia-smi lists no GPU", h.Name)
			}
			for _, g := range gpus {
				h.GPUs = append(h.GPUs, g.Index)
			}
			h.AutoGPUs = false
		}
		set[h.Name] = r
	}
	return &out, set, nil
}
