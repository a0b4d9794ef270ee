package gpulock

import (
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
	"github.com/gpudispatch/gpudispatch/hosts/spawn/spawntest"
)

// What a GPU lock holder is sent after its code, byte for byte: the lock
// dir, then how nvidia-smi is found: by the login shell, on the PATH a job shell read, and with the GPUs the run
// just looked at; then its requests. And what a check of the lock dir is
// sent.
func TestGoldenWhatIsSent(t *testing.T) {
	gpus := []executor.GPU{{Index: 0, UUID: "GPU-c0ffee", Name: "NVIDIA H100", MemoryTotalMB: 81920, MemoryUsedMB: 7}, {Index: 1, UUID: "GPU-beef", Name: "NVIDIA H100", MemoryTotalMB: 81920}}
	var b strings.Builder
	for _, tc := range []struct {
		name string
		find Finding
	}{
		{"through the login shell", Finding{Login: true}},
		{"on a job shell's PATH, with the GPUs just seen", Finding{Login: true,
			Path: func() (string, bool) { return "/opt/cuda/bin:/usr/bin", true },
			Seen: func() ([]executor.GPU, bool) { return gpus, true }}},
	} {
		ls := New(nil, "node1", "/var/lib/gpudispatch-locks", 10*time.Second, 25*time.Second, 20*time.Second, tc.find)
		b.WriteString("== holder, " + tc.name + ", the lock dir, then the rest:\n" + spawntest.Records(spawn.Record(ls.dir)) + spawntest.Records(ls.input("ada@laptop", 4242)))
	}
	b.WriteString("== requests: lock 2, release 2, want, unwant, a heartbeat, exit:\n")
	for _, r := range [][]string{{"lock", "2"}, {"release", "2"}, {"want"}, {"unwant"}, {}, {"exit"}} {
		b.WriteString(spawntest.Records(spawn.Record(r...)))
	}
	b.WriteString("== the check of a lock dir:\n" + spawntest.Records(checkInput("/var/lib/gpudispatch-locks")))
	_, args, _ := strings.Cut(ProbeScript("/var/lib/gpudispatch-locks", gpus), "' gpudispatch-lockprobe ")
	b.WriteString("== a look at the locks (gpudispatch hosts), its arguments after its code:\n" + args + "\n")
	spawntest.Golden(t, "a lock holder", "sent.golden", b.String())
}
