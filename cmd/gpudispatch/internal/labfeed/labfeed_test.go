package labfeed

import (
	"errors"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/hosts"
	"github.com/gpudispatch/gpudispatch/inventory"
)

func TestWaitingLine(t *testing.T) {
	t.Parallel()
	ago := time.Now().Add(-3 * time.Second)
	opening := func(names ...string) []hosts.Opening {
		var o []hosts.Opening
		for _, n := range names {
			o = append(o, hosts.Opening{Name: n, Doing: "connecting", Since: ago})
		}
		return o
	}
	for _, tc := range []struct {
		answered, total int
		pending         []hosts.Opening
		want            string
	}{
		{3, 4, opening("node4"), "gpudispatch: 3/4 hosts answered; waiting for node4 (connecting, 3s)"},
		{0, 3, opening("a", "b", "c"), "gpudispatch: 0/3 hosts answered; waiting for a (connecting, 3s), b (connecting, 3s), c (connecting, 3s)"},
		{95, 100, opening("a", "b", "c", "d", "e"), "gpudispatch: 95/100 hosts answered; waiting for a (connecting, 3s), b (connecting, 3s), c (connecting, 3s), 2 more"},
	} {
		if got := waitingLine(tc.answered, tc.total, tc.pending); got != tc.want {
			t.Errorf("waitingLine(%d, %d, %d pending) = %q, want %q", tc.answered, tc.total, len(tc.pending), got, tc.want)
		}
	}
}

// A host that is not up is named with its address: down when it is in
// the run and may come back, left out otherwise; one that is up is
// neither.
func TestAbsent(t *testing.T) {
	t.Parallel()
	refused := errors.New("connection refused")
	states := []hosts.HostState{
		{Host: inventory.Host{Name: "up"}, Addr: "me@up:22"},
		{Host: inventory.Host{Name: "rebooting"}, Addr: "me@rebooting:22", Err: refused, Retrying: true},
		{Host: inventory.Host{Name: "typo"}, Addr: "me@typo:22", Err: refused},
	}
	down, leftOut := Absent(states)
	if len(down) != 1 || down["rebooting"] == nil || down["rebooting"].Error() != "me@rebooting:22: connection refused" || !errors.Is(down["rebooting"], refused) {
		t.Errorf("down %v, want rebooting, by its address", down)
	}
	if len(leftOut) != 1 || leftOut["typo"] == nil || leftOut["typo"].Error() != "me@typo:22: connection refused" {
		t.Errorf("left out %v, want typo, by its address", leftOut)
	}
}
