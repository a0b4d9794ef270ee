package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Hooks from the inventory and from flags (which win) run on this machine
// as each job ends and as the run ends; a failing one is a warning line.
func TestHooksEndToEnd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "lab.yaml"), []byte(`hooks:
  job_end: echo "$GPUDISPATCH_JOB_ID $GPUDISPATCH_STATE $GPUDISPATCH_EXIT" >> jobs.txt
  run_end: echo inventory >> run.txt
hosts:
  - {name: here, local: true, gpus: [0]}
`), 0o644)
	r := gpd(t, dir, "[name=a] true\n[name=b] exit 4\n", "-i", "lab.yaml", "-o", "logs",
		"--on-run-end", `echo "$GPUDISPATCH_SUCCEEDED $GPUDISPATCH_FAILED" >> run.txt; echo "no webhook here" >&2; exit 1`)
	if r.code != 1 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(dir, "jobs.txt"))), "\n")
	slices.Sort(lines) // hooks run on their own: in any order
	if got := strings.Join(lines, "|"); got != "a succeeded 0|b failed 4" {
		t.Errorf("job-end hooks wrote %q", got)
	}
	if got := readFile(t, filepath.Join(dir, "run.txt")); got != "1 1\n" {
		t.Errorf("run-end hook wrote %q, want the flag's (it wins over the inventory's)", got)
	}
	if !strings.Contains(r.stderr, "gpudispatch: warning: the run-end hook failed (exit status 1): no webhook here") {
		t.Errorf("no warning for the failing hook:\n%s", r.stderr)
	}
}
