//go:build unix

package dispatch

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A hook killed at its timeout takes what it started with it: no process
// of its group is left (reparented to init) once the run ended.
func TestHookTimeoutKillsItsGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	runJobs(t, lab("a:0"), "exit 0\n", func(o *Options) {
		o.LogDir = filepath.Join(dir, "logs")
		o.Hooks = Hooks{JobEnd: "sleep 1000 & echo $! > " + pidFile + "; wait", Timeout: 300 * time.Millisecond}
	})
	b, err := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		t.Fatalf("the hook's child: %q, %v", b, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the hook's child %d still runs after the hook was killed", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// At most Hooks.Jobs job-end hooks run at once, each in its turn, and all
// of them run: 12 fast jobs with a hook of 0.2 s.
func TestHookJobs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	running := filepath.Join(dir, "running")
	os.Mkdir(running, 0o700)
	seen := filepath.Join(dir, "seen")
	var jobs strings.Builder
	for i := range 12 {
		fmt.Fprintf(&jobs, "[name=j%d] exit 0\n", i)
	}
	hook := `touch ` + running + `/$GPUDISPATCH_JOB_ID; ls ` + running + ` | wc -l >> ` + seen + `; sleep 0.2; rm ` + running + `/$GPUDISPATCH_JOB_ID`
	runJobs(t, lab("a:0,1,2,3"), jobs.String(), func(o *Options) {
		o.LogDir = filepath.Join(dir, "logs")
		o.Hooks = Hooks{JobEnd: hook, Jobs: 3}
	})
	b, _ := os.ReadFile(seen)
	counts := strings.Fields(string(b))
	if len(counts) != 12 {
		t.Fatalf("%d hooks ran; want 12", len(counts))
	}
	for _, c := range counts {
		if n, _ := strconv.Atoi(c); n > 3 {
			t.Errorf("%d hooks ran at once; want at most 3 (%v)", n, counts)
			break
		}
	}
}
