package hosts

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
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

var fast = Supervision{Heartbeat: 100 * time.Millisecond, Grace: 300 * time.Millisecond}

// local is a Local whose job shells end with the test.
func local(t *testing.T, sup Supervision) *Local {
	l := &Local{Supervision: sup}
	t.Cleanup(l.Close)
	return l
}

// bashOutput is what bash itself prints for script: the reference for
// "byte for byte".
func bashOutput(t *testing.T, script string) string {
	t.Helper()
	out, err := exec.Command("bash", "-c", script).Output()
	if err != nil {
		t.Fatalf("reference bash: %v", err)
	}
	return string(out)
}

func TestLocalRun(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	work := filepath.Join(home, "proj")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	nasty := `echo "a'b" '$HOME' \\ ; printf '%s\n' "ü"`
	tests := []struct {
		name       string
		cmd        executor.Command
		wantOut    string
		wantErrOut string
		wantCode   int
	}{
		{name: "nasty quoting", cmd: executor.Command{Script: nasty}, wantOut: bashOutput(t, nasty)},
		{name: "multi-line", cmd: executor.Command{Script: "echo one \\\n  two\necho three"}, wantOut: "one two\nthree\n"},
		{name: "exit code", cmd: executor.Command{Script: "echo out; echo err >&2; exit 7"}, wantOut: "out\n", wantErrOut: "err\n", wantCode: 7},
		{name: "killed by signal", cmd: executor.Command{Script: "kill -9 $$"}, wantCode: 137},
		{name: "env", cmd: executor.Command{Script: `printf '%s|%s\n' "$CUDA_VISIBLE_DEVICES" "$X"`, Env: []string{"CUDA_VISIBLE_DEVICES=0,1", "X=a b'\"$c"}}, wantOut: "0,1|a b'\"$c\n"},
		{name: "workdir with tilde", cmd: executor.Command{Script: "pwd", Workdir: "~/proj", Env: []string{"HOME=" + home}}, wantOut: work + "\n"},
		{name: "missing workdir", cmd: executor.Command{Script: "echo never", Workdir: filepath.Join(home, "nope")}, wantCode: 126, wantErrOut: "gpudispatch: cannot enter workdir " + filepath.Join(home, "nope") + "\n"},
		{name: "setup shares the shell", cmd: executor.Command{Setup: "V=from-setup", Script: "echo $V"}, wantOut: "from-setup\n"},
		{name: "failed setup stops the job", cmd: executor.Command{Setup: "false", Script: "echo never"}, wantCode: 1},
		{name: "stdin is empty", cmd: executor.Command{Script: "cat; echo done"}, wantOut: "done\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			code, err := local(t, fast).Run(context.Background(), tt.cmd, &out, &errOut)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d", code, tt.wantCode)
			}
			if out.String() != tt.wantOut {
				t.Errorf("stdout %q, want %q", out.String(), tt.wantOut)
			}
			if !strings.HasSuffix(errOut.String(), tt.wantErrOut) {
				t.Errorf("stderr %q, want it to end with %q", errOut.String(), tt.wantErrOut)
			}
		})
	}
}

func TestLocalRejectsNUL(t *testing.T) {
	t.Parallel()
	_, err := local(t, fast).Run(context.Background(), executor.Command{Script: "echo a\x00b"}, &bytes.Buffer{}, &bytes.Buffer{})
	if !errors.Is(err, ErrNUL) {
		t.Fatalf("err = %v, want ErrNUL", err)
	}
}

// pidsFrom waits until file holds n pids and returns them.
func pidsFrom(t *testing.T, file string, n int) []int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(file)
		if f := strings.Fields(string(b)); len(f) >= n {
			var pids []int
			for _, s := range f[:n] {
				p, err := strconv.Atoi(s)
				if err != nil {
					t.Fatal(err)
				}
				pids = append(pids, p)
			}
			return pids
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never held %d pids", file, n)
	return nil
}

// A cancelled job's whole group goes, including children that ignore TERM and
// children in the background.
func TestLocalCancelKillsGroup(t *testing.T) {
	t.Parallel()
	for _, script := range []string{
		`sleep 300 & echo $! >> $PIDS; echo $$ >> $PIDS; wait`,
		`trap '' TERM; sleep 300 & echo $! >> $PIDS; echo $$ >> $PIDS; wait`,
	} {
		pidFile := filepath.Join(t.TempDir(), "pids")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := local(t, fast).Run(ctx, executor.Command{Script: script, Env: []string{"PIDS=" + pidFile}}, &bytes.Buffer{}, &bytes.Buffer{})
			done <- err
		}()
		pids := pidsFrom(t, pidFile, 2)
		cancel()
		err := <-done
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		// Run returns only when the group is gone.
		sshtest.WaitGone(t, pids, 0)
	}
}

// A job whose coordinator vanished without closing the pipe (stdin silent) is
// killed after three missed heartbeats, and its shell says so on stdout.
func TestShellKillsOnSilence(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pids")
	// A 3 s silence window: a loaded machine may take a while to start the
	// login shell, and the shell rightly kills a job it hears nothing for.
	slow := Supervision{Heartbeat: time.Second, Grace: 300 * time.Millisecond}
	mark := newMark()
	body, err := fields(executor.Command{Script: "echo $$ > $PIDS; sleep 300", Env: []string{"PIDS=" + pidFile}}, mark)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-c", bootstrap(shellScript, "gpudispatch-job", ""))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	if _, err := stdin.Write(append(shellHeader(slow), body...)); err != nil {
		t.Fatal(err)
	}
	pids := pidsFrom(t, pidFile, 1)
	start := time.Now()
	// The end of the job comes once the silence was noticed and the group
	// killed: TERM, so 143.
	end, err := bufio.NewReader(stdout).ReadString('\n')
	if want := "\x00" + mark + " 143\n"; end != want || err != nil {
		t.Errorf("shell wrote %q, %v; want %q", end, err, want)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("shell took %v to notice silence", d)
	}
	sshtest.WaitGone(t, pids, 0)
}

// firstWrite reports when the first write arrives. It must not embed a
// bytes.Buffer: io.Copy would use the promoted ReadFrom and read to EOF.
type firstWrite struct {
	n   int
	got chan struct{}
}

func (w *firstWrite) Write(p []byte) (int, error) {
	if w.n == 0 {
		close(w.got)
	}
	w.n += len(p)
	return len(p), nil
}

func TestLocalStreamsWhileRunning(t *testing.T) {
	t.Parallel()
	out := &firstWrite{got: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = local(t, fast).Run(context.Background(), executor.Command{Script: "echo first; sleep 2; echo second"}, out, &bytes.Buffer{})
	}()
	select {
	case <-out.got:
	case <-done:
		t.Fatal("first line arrived only after the job ended")
	}
	<-done
}
