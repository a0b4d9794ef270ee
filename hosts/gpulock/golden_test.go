package gpulock

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// What a GPU lock holder is sent after its code, byte for byte (a NUL is
// shown as <NUL> and ends a line): found by the login shell, on the PATH
// a job shell read, and with the GPUs the run just looked at.
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
		b.WriteString("== " + tc.name + ":\n" + strings.ReplaceAll(ls.input("ada@laptop", 4242), "\x00", "<NUL>\n") + "\n")
	}
	path := filepath.Join("testdata", "sent.golden")
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./hosts/gpulock -run Golden -args -update writes it)", err)
	}
	if b.String() != string(want) {
		t.Errorf("what is sent to a lock holder changed (%s); if on purpose, rewrite it with -args -update:\ngot:\n%s\nwant:\n%s", path, b.String(), want)
	}
}
