package hosts

import (
	"os"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/hosts/jobshell"
)

// TestMain gives local jobs a HOME of their own: a login shell must not
// run the developer's profile, which may be slow or hold locks that a
// killed job leaves behind (pyenv's rehash does).
func TestMain(m *testing.M) {
	home, err := os.MkdirTemp("", "hosts-test-home")
	if err != nil {
		panic(err)
	}
	os.Setenv("HOME", home)
	code := m.Run()
	os.RemoveAll(home)
	os.Exit(code)
}

var fast = jobshell.Supervision{Heartbeat: 100 * time.Millisecond, Grace: 300 * time.Millisecond}

// local is a Local whose job shells end with the test.
func local(t *testing.T, sup jobshell.Supervision) *Local {
	l := &Local{Supervision: sup}
	t.Cleanup(l.Close)
	return l
}
