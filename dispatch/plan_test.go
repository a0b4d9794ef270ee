package dispatch

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
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

// A dry run takes every option as a run would: after= waits for the jobs
// named (and says so), mem=, model= and MIG instances from one look at each
// host's GPUs; a job it cannot place says why.
func TestPlanAsARunWould(t *testing.T) {
	t.Parallel()
	inv := lab("a:0 b:0,1 c:0")
	f := newFakeExec(inv)
	f.usage["a"] = []executor.GPU{{Index: 0, Name: "NVIDIA A100-SXM4-80GB", MemoryTotalMB: 81920}}
	f.usage["b"] = h100MIG()
	f.probeErr = map[string]error{"c": errors.New("nvidia-smi: exit status 255: Failed to initialize NVML: Unknown Error")}
	input := strings.Join([]string{
		"[name=prep_1] echo p1",
		"[name=prep_2] echo p2",
		"[name=train after=prep_*] echo t",
		"[after=9] echo too early",
		"[model=1g.10gb] echo small",
		"[mem=30G host=a] echo fits a's 80 GB",
		"[mem=30G host=c] echo on a host that cannot say",
		"[model=H200] echo no such GPU",
	}, "\n") + "\n"
	var out bytes.Buffer
	if _, err := Plan(Options{Inventory: inv, Executor: f, LogDir: t.TempDir()}, []Input{{Name: "jobs.txt", R: strings.NewReader(input)}}, &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"job train would run on ",
		" after prep_*: echo t\n",
		"jobs.txt:4: job 4 rejected: after=9: no job 9 before this one",
		"job 5 would run on b:0:2: echo small\n",
		"job 6 would run on a:0: echo fits a's 80 GB\n",
		"job 7 would wait: waits: host c cannot tell its GPUs' memory (nvidia-smi: exit status 255: Failed to initialize NVML: Unknown Error)\n",
		"jobs.txt:8: job 8 rejected: model=H200: no GPU of the lab is one",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in\n%s", want, got)
		}
	}
	if strings.Index(got, "job train would run") < strings.Index(got, "job prep_2 would run") || strings.Contains(got, "would wait: \n") {
		t.Errorf("train before the jobs it waits for, or a wait with no reason:\n%s", got)
	}
}
