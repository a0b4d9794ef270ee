package codestore

import (
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
	"github.com/gpudispatch/gpudispatch/hosts/spawn/spawntest"
)

// What a store's shell is sent after its code, byte for byte: the store's
// directory, the snapshot it is asked for, then the lists it needs to
// build the tree from its base (the tar stream of the files it lacks
// follows, in tar's own framing).
func TestGoldenWhatIsSent(t *testing.T) {
	s := &executor.Code{ID: "5e1f00d", Key: "a1b2c3"}
	got := "== the store's directory, then the snapshot:\n" + spawntest.Records(spawn.Record("~/.gpudispatch/code")) +
		spawntest.Records(asking(s, 14*24*time.Hour, "0badcafe")) +
		"== the base to use, the paths gone, the paths changed, the blobs they need:\n" +
		spawntest.Records(lists("4d4e", "old.py\ndata/x.csv", "train.py\nlib/util.py", "9f86d0\n3c2a17"))
	spawntest.Golden(t, "a store's shell", "sent.golden", got)
}
