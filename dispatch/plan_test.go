package dispatch

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A dry run admits jobs as a run does: a job pinned to a left-out host is
// rejected, one that only a down host can run waits for it, an impossible
// one is rejected, one that succeeded before is skipped (Resume), and the
// others are placed as the scheduler would.
func TestPlan(t *testing.T) {
	t.Parallel()
	logs := t.TempDir()
	journal := `{"event":"queued","run":"r0","job":"1","text":"done before","occurrence":1}
{"event":"finished","run":"r0","job":"1","text":"done before","occurrence":1}
`
	if err := os.WriteFile(filepath.Join(logs, JournalName), []byte(journal), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := Options{
		// "gone" was left out: the run's inventory no longer has it.
		Inventory: lab("a:0,1 b:0 c:0"),
		LogDir:    logs,
		Resume:    true,
		LeftOut:   map[string]error{"gone": errors.New("host key changed")},
		Down:      map[string]error{"c": errors.New("connection refused")},
	}
	input := strings.Join([]string{
		"done before",
		"@gone echo pinned to a left-out host",
		"@c echo pinned to a down host",
		"[gpus=3] echo more GPUs than any host has",
		"[gpus=2] echo two GPUs",
		"echo one", "echo two", "echo three",
	}, "\n") + "\n"
	var out bytes.Buffer
	s, err := Plan(opts, []Input{{Name: "jobs.txt", R: strings.NewReader(input)}}, &out)
	if err != nil {
		t.Fatal(err)
	}
	s.Write(&out)
	golden(t, "plan.golden", out.String())
	if entries, _ := os.ReadDir(logs); len(entries) != 1 {
		t.Errorf("the dry run wrote into the log dir: %v", entries)
	}
}
