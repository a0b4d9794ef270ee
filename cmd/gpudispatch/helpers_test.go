// Helpers of the end-to-end tests: the binary they drive, running it, and
// reading and waiting on what it writes (logs, the journal).

package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// binary is the gpudispatch built for these tests.
var binary string

func TestMain(m *testing.M) {
	if code, ok := hostileRole(); ok {
		os.Exit(code)
	}
	// These tests mostly wait: for sshd, for a job's sleep, for a fault to
	// pass. Six at a time take half the time GOMAXPROCS' two do on a
	// 2-core machine; -parallel on the command line wins.
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		flag.Set("test.parallel", "6")
	}
	dir, err := os.MkdirTemp("", "gpudispatch-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "gpudispatch")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	// Local jobs keep what they print in ~/.gpudispatch: the tests' own.
	code := sshtest.RunWithOwnHome(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
}

// gpd runs the binary in dir with stdin and args, as a user would whose
// home is dir, with ~/bin first on PATH (where sshtest.NvidiaSMI puts the
// fake nvidia-smi: local jobs and looks get gpudispatch's environment).
func gpd(t *testing.T, dir, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), "HOME="+dir, homeBinFirst(dir), lockEnv(dir))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// wholeJournal reads the journal of a run that has ended, and fails t
// unless it is whole lines (nothing torn, even by SIGKILL).
func wholeJournal(t *testing.T, logDir string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(logDir, "journal.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("the journal ends in a torn line: %q", b[bytes.LastIndexByte(b, '\n')+1:])
	}
	return journal(t, logDir)
}

// journal reads the whole lines of a log dir's journal: a run may be
// writing its last one.
func journal(t testing.TB, logDir string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(logDir, "journal.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var events []map[string]any
	for _, line := range lines[:len(lines)-1] {
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("journal line %q: %v", line, err)
		}
		events = append(events, e)
	}
	return events
}

func count(events []map[string]any, kind string) int {
	n := 0
	for _, e := range events {
		if e["event"] == kind {
			n++
		}
	}
	return n
}

// lockEnv keeps a test's GPU locks in a directory of its own, so that
// tests running at once do not wait for each other's (pretend) GPUs.
// homeBinFirst is PATH with the home dir's bin first.
func homeBinFirst(home string) string {
	return "PATH=" + filepath.Join(home, "bin") + ":" + os.Getenv("PATH")
}

func lockEnv(dir string) string {
	return "GPUDISPATCH_LOCK_DIR=" + filepath.Join(dir, ".locks")
}

// startGPD starts the binary in dir with a pipe on stdin.
func startGPD(t *testing.T, dir string, args ...string) (*exec.Cmd, io.WriteCloser, *bytes.Buffer) {
	t.Helper()
	return startGPDEnv(t, dir, os.Environ(), args...)
}

// startGPDEnv is startGPD with env as the binary's environment.
func startGPDEnv(t *testing.T, dir string, env []string, args ...string) (*exec.Cmd, io.WriteCloser, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Env = append(env, lockEnv(dir))
	stdin, errOut := startCmd(t, cmd)
	return cmd, stdin, errOut
}

// startCmd starts cmd with a pipe on stdin and its stderr kept; the test's
// end kills it.
func startCmd(t *testing.T, cmd *exec.Cmd) (io.WriteCloser, *bytes.Buffer) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return stdin, &errOut
}

// waitExit waits for cmd to end; one still running after within is killed
// and fails the test (a hang would stall every test of the binary).
func waitExit(t *testing.T, cmd *exec.Cmd, errOut *bytes.Buffer, within time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(within):
		cmd.Process.Kill()
		<-done
		t.Fatalf("gpudispatch still ran after %s\n%s", within, errOut)
		return nil
	}
}

func waitForFile(t *testing.T, path string, want func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && want(string(b)) {
			return string(b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never got what was expected", path)
	return ""
}

func statusOf(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func hasNvidiaSMI() bool {
	for _, dir := range []string{"/usr/bin", "/bin", "/usr/local/bin", "/usr/sbin"} {
		if _, err := os.Stat(filepath.Join(dir, "nvidia-smi")); err == nil {
			return true
		}
	}
	return false
}

func regexpMatch(pattern, s string) bool {
	return regexp.MustCompile(pattern).MatchString(s)
}

// logJournalOnFailure prints the run's journal at the end of a failed test:
// timing faults are hard to read from counts alone.
func logJournalOnFailure(t *testing.T, logDir string) {
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(logDir, "journal.jsonl"))
			t.Logf("journal:\n%s", b)
		}
	})
}

// waitJournal waits until the journal in logDir satisfies ok.
func waitJournal(t *testing.T, logDir string, ok func([]map[string]any) bool) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(filepath.Join(logDir, "journal.jsonl")); err == nil {
			if events := journal(t, logDir); ok(events) {
				return events
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the journal never showed what was expected")
	return nil
}

// runWithin runs cmd, which must succeed within limit, and returns what it
// printed (stdout and stderr); one still running then is killed, and the
// test fails, saying what it waited for.
func runWithin(t *testing.T, cmd *exec.Cmd, limit time.Duration, waitedFor string) string {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v\n%s", err, out.String())
		}
	case <-time.After(limit):
		cmd.Process.Kill()
		<-done
		t.Fatalf("the run still waited for %s after %s:\n%s", waitedFor, limit, out.String())
	}
	return out.String()
}

// waitPids waits until the file at path holds n pids, one a word, and
// returns them.
func waitPids(t *testing.T, path string, n int) []int {
	t.Helper()
	text := waitForFile(t, path, func(s string) bool { return len(strings.Fields(s)) == n })
	var pids []int
	for _, f := range strings.Fields(text) {
		p, _ := strconv.Atoi(f)
		pids = append(pids, p)
	}
	return pids
}

// ticks is what a job that printed "tick 1" to "tick n", a line each,
// wrote.
func ticks(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "tick %d\n", i)
	}
	return b.String()
}
