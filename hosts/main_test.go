package hosts

import (
	"os"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/hosts/jobshell"
	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// TestMain gives local jobs and lock holders a HOME of their own.
func TestMain(m *testing.M) { os.Exit(sshtest.RunWithOwnHome(m)) }

var fast = jobshell.Supervision{Heartbeat: 100 * time.Millisecond, Grace: 300 * time.Millisecond}

// local is a Local whose job shells end with the test.
func local(t *testing.T, sup jobshell.Supervision) *Local {
	l := &Local{Supervision: sup, LockDir: t.TempDir()}
	t.Cleanup(l.Close)
	return l
}
