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
// returns the runs it says wait for the host's GPUs, first in the line
// first, each in words ("run R of W waits for its GPUs (fair share),
// first in line, for a job of 4 GPUs together").
func ReadProbe(out string, gpus []executor.GPU) (waiting []string) {
	r := bufio.NewReader(strings.NewReader(out))
	for {
		f, err := spawn.ReadRecord(r)
		if err != nil {
			return waiting
		}
		if len(f) == 4 && f[0] == "waits" {
			waiting = append(waiting, waits(f[1], f[2], f[3]))
			continue
		}
		for i := range gpus {
			if len(f) == 2 && strconv.Itoa(gpus[i].Index) == f[0] {
				gpus[i].LockedBy = f[1]
			}
		}
	}
}

// waits says that who waits for the host's GPUs, at place in the line
// ("-": a parked part), for a first job that needs need ("4", "4p" for a
// part of a job over several hosts).
func waits(who, place, need string) string {
	n, part := strings.CutSuffix(need, "p")
	if place == "-" {
		return who + " keeps " + n + " GPUs here for a job over several hosts, parked until its other hosts have theirs (fair share)"
	}
	s := who + " waits for its GPUs (fair share), "
	if place == "1" {
		s += "first in line"
	} else {
		s += "number " + place + " in line"
	}
	if n != "" && n != "1" {
		s += ", for a job of " + n + " GPUs together"
	}
	if part {
		s += " here, a part of a job over several hosts"
	}
	return s
}
