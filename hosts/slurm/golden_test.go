package slurm

import (
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/hosts/spawn"
	"github.com/gpudispatch/gpudispatch/hosts/spawn/spawntest"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// What a cluster's agent is sent after its code, byte for byte: its
// arguments (a run's, a check's), then a command of each kind.
func TestGoldenWhatIsSent(t *testing.T) {
	c := New(Options{Name: "hpc", Slurm: inventory.Slurm{Partition: "gpu", Account: "lab", Workdir: "~/gpd", Poll: 5 * time.Second,
		SbatchArgs: []string{"--mem=32G", "--constraint=a100|h100"}}, Heartbeat: 10 * time.Second, Grace: 10 * time.Second})
	var b strings.Builder
	b.WriteString("== a run's agent:\n" + spawntest.Records(c.arguments("20261129T120000.000000Z")))
	b.WriteString("== a check:\n" + spawntest.Records(c.arguments("check")))
	b.WriteString("== submit, track, cancel, heartbeat, quit:\n")
	for _, cmd := range [][]string{
		submitting("20261129T120000.000000Z-7-1", "a100:2", "2", "90", "#!/bin/bash\n#SBATCH --job-name=gpd-7\npython train.py\n"),
		(&job{tag: "20261129T120000.000000Z-6-1", outN: 1024}).tracking("4242"),
		(&job{tag: "20261129T120000.000000Z-5-1", outN: 10, errN: 2, parts: []*output{{outN: 5}}}).tracking("4241"),
		cancelling("4242"),
		{"h"},
		{"q"},
	} {
		b.WriteString(spawntest.Records(spawn.Record(cmd...)))
	}
	spawntest.Golden(t, "a cluster's agent", "sent.golden", b.String())
}
