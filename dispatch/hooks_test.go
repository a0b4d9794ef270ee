package dispatch

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The job-end hook runs for every job's outcome with what happened in its
// variables, the run-end hook once with the counts, after every job-end
// hook; a slow hook delays no job, a failing or hung one is a warning.
func TestHooks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	jobs, runs := filepath.Join(dir, "jobs.txt"), filepath.Join(dir, "run.txt")
	logDir := filepath.Join(dir, "logs")
	start := time.Now()
	_, s := runJobs(t, lab("a:0,1"), "[name=ok] exit 0\n[name=bad] exit 3\n[name=slow] exit 0\n", func(o *Options) {
		o.LogDir = logDir
		o.Hooks = Hooks{
			JobEnd: `[ "$GPUDISPATCH_JOB_ID" != slow ] || sleep 0.5
echo "$GPUDISPATCH_JOB_ID $GPUDISPATCH_STATE $GPUDISPATCH_EXIT $GPUDISPATCH_HOST $GPUDISPATCH_GPUS ${GPUDISPATCH_STDOUT##*/}" >> ` + jobs + `
[ "$GPUDISPATCH_JOB_ID" != bad ] || { echo "cannot post to the chat" >&2; exit 2; }`,
			RunEnd: `echo "$GPUDISPATCH_SUCCEEDED $GPUDISPATCH_FAILED $(wc -l < ` + jobs + `) ${GPUDISPATCH_LOG_DIR##*/}" > ` + runs,
		}
	})
	if s.Counts[EventFinished] != 2 || s.Counts[EventFailed] != 1 {
		t.Fatalf("summary %+v", s.Counts)
	}
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Errorf("the run ended after %v, before the slow hook (0.5 s) did", took)
	}
	got, _ := os.ReadFile(jobs)
	lines := strings.Split(strings.TrimSpace(string(got)), "\n")
	slices.Sort(lines)
	// Which GPU a job got is the scheduler's choice: one of a's.
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) == 6 && (f[4] == "0" || f[4] == "1") {
			f[4] = "G"
		}
		lines[i] = strings.Join(f, " ")
	}
	want := []string{"bad failed 3 a G bad.out", "ok succeeded 0 a G ok.out", "slow succeeded 0 a G slow.out"}
	if !slices.Equal(lines, want) {
		t.Errorf("job-end hooks wrote:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if got, _ := os.ReadFile(runs); string(got) != "2 1 3 logs\n" {
		t.Errorf("run-end hook wrote %q, want the counts after all 3 job hooks", got)
	}
	var warnings []string
	for _, e := range readJournal(t, logDir) {
		if e.Event == EventWarning {
			warnings = append(warnings, e.Error)
		}
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "the job-end hook for job bad failed (exit status 2): cannot post to the chat") {
		t.Errorf("warnings %q", warnings)
	}
}

// A hook that outlives --hook-timeout is killed, and said so.
func TestHookTimeout(t *testing.T) {
	t.Parallel()
	logDir := t.TempDir()
	start := time.Now()
	runJobs(t, lab("a:0"), "exit 0\n", func(o *Options) {
		o.LogDir = logDir
		o.Hooks = Hooks{JobEnd: "exec sleep 30", Timeout: 200 * time.Millisecond}
	})
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the run waited %v for a hook of 200ms", took)
	}
	for _, e := range readJournal(t, logDir) {
		if e.Event == EventWarning && strings.Contains(e.Error, "was killed after --hook-timeout 200ms") {
			return
		}
	}
	t.Error("no warning for the hook that was killed")
}
