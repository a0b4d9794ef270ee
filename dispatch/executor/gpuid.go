package executor

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// GPUID names what a slot gives its job on a machine: a GPU, by the index
// nvidia-smi gives it, or one MIG instance of a GPU (MIGID). It is written
// "2", or "0:1" for MIG device 1 of GPU 0, as nvidia-smi -L numbers them;
// in JSON, a GPU's id is a number and a MIG instance's that string.
type GPUID int

// MIGDevices bounds the MIG device numbers of a GPU (a GPU has at most 7
// instances today).
const MIGDevices = migStride

// migBase and migStride lay MIG instances' ids out after every GPU index
// (a machine has far fewer than migBase GPUs). The numbers stay inside
// this file and the lock holder's protocol, which carries ids as integers.
const (
	migBase   = 1 << 16
	migStride = 1 << 8
)

// MIGID is the id of MIG device dev of GPU gpu.
func MIGID(gpu, dev int) GPUID { return GPUID(migBase + gpu*migStride + dev) }

// GPU is the index of the GPU that id is, or is an instance of.
func (id GPUID) GPU() int {
	if id < migBase {
		return int(id)
	}
	return (int(id) - migBase) / migStride
}

// MIG reports the MIG device number of an instance's id, and false for a
// whole GPU.
func (id GPUID) MIG() (int, bool) {
	if id < migBase {
		return 0, false
	}
	return (int(id) - migBase) % migStride, true
}

// String is "2", or "0:1" for a MIG instance.
func (id GPUID) String() string {
	if dev, ok := id.MIG(); ok {
		return fmt.Sprintf("%d:%d", id.GPU(), dev)
	}
	return strconv.Itoa(int(id))
}

// ParseGPUID reads what String writes.
func ParseGPUID(s string) (GPUID, error) {
	g, d, mig := strings.Cut(s, ":")
	gpu, err := strconv.Atoi(g)
	if err != nil || gpu < 0 || gpu >= migBase {
		return 0, fmt.Errorf("GPU id %q: want a GPU index, or GPU:MIG-device", s)
	}
	if !mig {
		return GPUID(gpu), nil
	}
	dev, err := strconv.Atoi(d)
	if err != nil || dev < 0 || dev >= migStride {
		return 0, fmt.Errorf("GPU id %q: want a GPU index, or GPU:MIG-device", s)
	}
	return MIGID(gpu, dev), nil
}

// MarshalJSON writes a GPU's id as a number, a MIG instance's as "0:1".
func (id GPUID) MarshalJSON() ([]byte, error) {
	if _, ok := id.MIG(); ok {
		return json.Marshal(id.String())
	}
	return []byte(strconv.Itoa(int(id))), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (id *GPUID) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int
		if err := json.Unmarshal(b, &n); err != nil {
			return err
		}
		s = strconv.Itoa(n)
	}
	v, err := ParseGPUID(s)
	*id = v
	return err
}

// GPUIDs writes ids as a list: "0,1", "0:2".
func GPUIDs(ids []GPUID) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	return strings.Join(s, ",")
}
