package results

import (
	"testing"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/spawn/spawntest"
)

// What a results shell is sent after its code, byte for byte: where the
// files are and the paths asked for (in a workdir, in a log dir's tree of
// a snapshot), then where to start each file it lists.
func TestGoldenWhatIsSent(t *testing.T) {
	got := "== from a workdir:\n" + spawntest.Records(asking(executor.Return{Workdir: "~/proj", Paths: []string{"out/*.pt", "metrics.json"}})) +
		"== from a log dir's tree of a snapshot:\n" + spawntest.Records(asking(executor.Return{Snapshot: "5e1f00d", Tree: "0badcafe", Paths: []string{"**/*.csv"}})) +
		"== the answers: skip, whole, from byte 4096:\n" + spawntest.Records(answers([]entry{{at: -1}, {at: 0}, {at: 4096}}))
	spawntest.Golden(t, "a results shell", "sent.golden", got)
}
