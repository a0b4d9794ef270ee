package gpulock

import (
	"bufio"
	_ "embed"
	"strconv"
	"strings"

	"al.essio.dev/pkg/shellescape"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
)

// probeScript looks at GPU locks without taking them; see probe.sh. It is
// sent after lockfsScript, which names the locks as lock.sh does.
//
//go:embed probe.sh
var probeScript string

// ProbeScript is a command for a machine's login shell that writes, for
// each of gpus whose lock in dir a gpudispatch run holds, a record of its
// index and the run that holds it; then one for each run that waits for
// the machine's GPUs.
// lock_key is bash, and the login shell may not be: the command runs bash.
func ProbeScript(dir string, gpus []executor.GPU) string {
	args := []string{shellescape.Quote(dir), ProcessName}
	for _, g := range gpus {
		args = append(args, strconv.Itoa(g.Index))
	}
	return "exec bash -c " + shellescape.Quote(spawn.Prelude+lockfsScript+probeScript) + " gpudispatch-lockprobe " + strings.Join(args, " ")
}

// ReadProbe fills in LockedBy of gpus from what ProbeScript printed, and
// returns the runs it says wait for the host's GPUs.
func ReadProbe(out string, gpus []executor.GPU) (waiting []string) {
	r := bufio.NewReader(strings.NewReader(out))
	for {
		f, err := spawn.ReadRecord(r)
		if err != nil {
			return waiting
		}
		if len(f) == 2 && f[0] == "waits" {
			waiting = append(waiting, f[1])
			continue
		}
		for i := range gpus {
			if len(f) == 2 && strconv.Itoa(gpus[i].Index) == f[0] {
				gpus[i].LockedBy = f[1]
			}
		}
	}
}
