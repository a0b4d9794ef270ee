package jobshell

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// TestMain gives local jobs and lock holders a HOME of their own.
func TestMain(m *testing.M) { os.Exit(sshtest.RunWithOwnHome(m)) }

var fast = Supervision{Heartbeat: 100 * time.Millisecond, Grace: 300 * time.Millisecond}

// local is this machine's job shells, ended with the test.
func local(t *testing.T, sup Supervision) *Shells {
	ss := New(spawn.Local, sup)
	t.Cleanup(ss.Close)
	return ss
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

func TestRun(t *testing.T) {
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
		{name: "env with a line break", cmd: executor.Command{Script: `printf '%s|\n' "$X"`, Env: []string{"X=a b'\\\n$(c)"}}, wantOut: "a b'\\\n$(c)|\n"},
		{name: "env of a job that names $$", cmd: executor.Command{Script: `printf '%s|%s|%s\n' "$CUDA_VISIBLE_DEVICES" "$X" $(($$ > 0))`, Env: []string{"CUDA_VISIBLE_DEVICES=0,1", "X=a b'\"\n$c"}}, wantOut: "0,1|a b'\"\n$c|1\n"},
		{name: "workdir", cmd: executor.Command{Script: "pwd", Prelude: executor.Prelude{Workdir: work}}, wantOut: work + "\n"},
		{name: "setup shares the shell", cmd: executor.Command{Prelude: executor.Prelude{Setup: "V=from-setup"}, Script: "echo $V"}, wantOut: "from-setup\n"},
		{name: "setup runs per job", cmd: executor.Command{Prelude: executor.Prelude{Setup: "echo set >&2; [ -n \"$X\" ]", Env: []string{"X=1"}}, Script: "echo $X", Env: []string{"X=1"}}, wantOut: "1\n", wantErrOut: "set\n"},
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

func TestRejectsNUL(t *testing.T) {
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
func TestCancelKillsGroup(t *testing.T) {
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

// A job's life is its own: its coordinator closing the pipe, or reading
// nothing more, ends nothing. The job runs to its end, and a later
// coordinator takes up its output from the byte the first had (Follow):
// together they have every byte, once, and the job's own exit status.
func TestJobOutlivesItsCoordinator(t *testing.T) {
	t.Parallel()
	mark := newMark()
	job := "for i in $(seq 1 30); do echo out $i; echo err $i >&2; sleep 0.05; done; exit 3"
	body := fields(executor.Command{Script: job, Tag: "o-1-1"}, mark, placing{})
	cmd := exec.Command("bash", "-c", spawn.Bootstrap(script, ProcessName, "sh-o"))
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
	defer cmd.Wait()
	if _, err := stdin.Write(append(header(fast, executor.Prelude{}, false, nil), body...)); err != nil {
		t.Fatal(err)
	}
	// The shell says it is set up, then the first coordinator reads a few
	// bytes of the job's, and goes away.
	ready := make([]byte, len(hello)+1)
	if _, err := io.ReadFull(stdout, ready); err != nil || string(ready) != hello+"\n" {
		t.Fatalf("the shell's first words: %q, %v; want %q", ready, err, hello+"\n")
	}
	first := make([]byte, 12)
	if _, err := io.ReadFull(stdout, first); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	stdout.Close()
	var out, errs bytes.Buffer
	code, end, err := Follow(context.Background(), spawn.Local, "o-1-1", int64(len(first)), 0, fast.Grace, &out, &errs)
	if err != nil || code != 3 {
		t.Fatalf("Follow: %d, %v; want 3, nil", code, err)
	}
	if d := time.Since(end); d < 0 || d > time.Minute {
		t.Errorf("end time %v is not the job's", end)
	}
	var wantOut, wantErr strings.Builder
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&wantOut, "out %d\n", i)
		fmt.Fprintf(&wantErr, "err %d\n", i)
	}
	if got := string(first) + out.String(); got != wantOut.String() {
		t.Errorf("stdout %q, want %q", got, wantOut.String())
	}
	if errs.String() != wantErr.String() {
		t.Errorf("stderr %q, want %q", errs.String(), wantErr.String())
	}
	// Once its end is home, nothing of the job is kept.
	var left []string
	defer func() {
		if t.Failed() {
			t.Logf("left in the spool: %v", left)
		}
	}()
	waitFor(t, "the spool to be empty", func() bool {
		left, _ = filepath.Glob(filepath.Join(os.Getenv("HOME"), ".gpudispatch", "jobs", "sh-o*"))
		return len(left) == 0
	})
	if _, _, err := Follow(context.Background(), spawn.Local, "o-1-1", 0, 0, fast.Grace, io.Discard, io.Discard); !errors.Is(err, executor.ErrJobLost) {
		t.Errorf("following a job whose end is home: %v, want ErrJobLost", err)
	}
}

// waitFor waits up to 10 s for cond.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
	}
}

// A job's time limit is kept by its shell; Stop stops a job by its tag
// whatever follows it.
func TestTimeLimitAndStop(t *testing.T) {
	t.Parallel()
	l := local(t, fast)
	pidFile := filepath.Join(t.TempDir(), "pids")
	start := time.Now()
	_, err := l.Run(context.Background(), executor.Command{Script: "echo $BASHPID > $PIDS; trap '' TERM; sleep 300",
		Env: []string{"PIDS=" + pidFile}, Timeout: 500 * time.Millisecond, Tag: "t-1-1"}, io.Discard, io.Discard)
	if !errors.Is(err, executor.ErrTimeLimit) {
		t.Errorf("a job past its time limit: %v, want ErrTimeLimit", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the time limit of 0.5 s took %v", d)
	}
	sshtest.WaitGone(t, pidsFrom(t, pidFile, 1), 0)

	pidFile = filepath.Join(t.TempDir(), "pids")
	ran := make(chan error, 1)
	go func() {
		_, err := l.Run(context.Background(), executor.Command{Script: "echo $BASHPID > $PIDS; sleep 300",
			Env: []string{"PIDS=" + pidFile}, Tag: "t-2-1"}, io.Discard, io.Discard)
		ran <- err
	}()
	pids := pidsFrom(t, pidFile, 1)
	if err := Stop(context.Background(), spawn.Local, "t-2-1", fast.Grace); err != nil {
		t.Fatal(err)
	}
	sshtest.WaitGone(t, pids, 0)
	if err := <-ran; err == nil || !strings.Contains(err.Error(), "cancelled where it ran") {
		t.Errorf("a job stopped by another coordinator: %v", err)
	}
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

func TestStreamsWhileRunning(t *testing.T) {
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

// One shell runs job after job: nothing of a job's environment, workdir
// or variables reaches the next, and each gets exactly its own output and
// exit status.
func TestShellReuseKeepsJobsApart(t *testing.T) {
	t.Parallel()
	l := local(t, fast)
	home := t.TempDir()
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	in := executor.Prelude{Workdir: home}
	steps := []struct {
		cmd      executor.Command
		wantOut  string
		wantCode int
	}{
		{executor.Command{Script: "echo $X; pwd; Y=set; cd /; exit 3", Env: []string{"X=one"}, Prelude: in}, "one\n" + home + "\n", 3},
		{executor.Command{Script: `echo "[$X][$Y]"; pwd`, Env: []string{"HOME=" + here}, Prelude: in}, "[][]\n" + home + "\n", 0},
		{executor.Command{Script: "printf 'no newline'; kill -9 $$", Prelude: in}, "no newline", 137},
		{executor.Command{Script: "head -c 100000 /dev/zero; echo", Prelude: in}, strings.Repeat("\x00", 100000) + "\n", 0},
	}
	var shells []string
	for i, st := range steps {
		var out bytes.Buffer
		code, err := l.Run(ctx, st.cmd, &out, io.Discard)
		if err != nil || code != st.wantCode || out.String() != st.wantOut {
			t.Fatalf("job %d: code %d, err %v, out %q; want %d, %q", i, code, err, out.String(), st.wantCode, st.wantOut)
		}
		shells = append(shells, l.idleTags()...)
	}
	for _, tag := range shells {
		if tag != shells[0] {
			t.Errorf("jobs ran in shells %v, want one shell", shells)
			break
		}
	}
}

// Jobs of milliseconds take turns in the shells there are: four at a time,
// forty in all, start fewer shells than four (each a session, bashes and
// tees; one or two mostly, three when this machine is loaded); jobs that
// wait longer than a shell's patience get shells of their own and run
// together: four jobs of half a second, four shells, all four running at
// once.
func TestShellsStartedForWorkThatWaits(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, tag string // tag: the jobs' tags start with it (the spool is shared)
		script    string
		rounds    int
		check     func(t *testing.T, shells int, outs []string)
	}{
		{"short jobs", "ps", "true", 10, func(t *testing.T, shells int, _ []string) {
			if shells >= 4 {
				t.Errorf("%d shells started for 40 jobs of a few milliseconds, four at a time; want fewer than four", shells)
			}
		}},
		{"long jobs", "pl", `date +%s%N; sleep 0.5; date +%s%N`, 1, func(t *testing.T, shells int, outs []string) {
			if shells != 4 {
				t.Errorf("%d shells started for four jobs of half a second at once, want four", shells)
			}
			var last int64
			first := int64(math.MaxInt64)
			for _, o := range outs {
				f := strings.Fields(o)
				if len(f) != 2 {
					t.Fatalf("job printed %q", o)
				}
				start, _ := strconv.ParseInt(f[0], 10, 64)
				end, _ := strconv.ParseInt(f[1], 10, 64)
				last, first = max(last, start), min(first, end)
			}
			if last >= first {
				t.Errorf("the four jobs did not all run at once: the last began after the first ended")
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var started atomic.Int32
			counting := func(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
				started.Add(1)
				return spawn.Local(ctx, line, stdout, stderr)
			}
			ss := New(counting, fast)
			t.Cleanup(ss.Close)
			var outs []string
			var mu sync.Mutex
			for r := range c.rounds {
				var wg sync.WaitGroup
				for i := range 4 {
					wg.Go(func() {
						var out bytes.Buffer
						code, err := ss.Run(context.Background(), executor.Command{Script: c.script, Tag: fmt.Sprintf("%s-%d-%d", c.tag, r, i)}, &out, io.Discard)
						if err != nil || code != 0 {
							t.Errorf("job: %d, %v", code, err)
						}
						mu.Lock()
						outs = append(outs, out.String())
						mu.Unlock()
					})
				}
				wg.Wait()
			}
			c.check(t, int(started.Load()), outs)
		})
	}
}

// TestShellFieldsInAnyLocale sends fields with multibyte characters to job
// shells started in a UTF-8 locale (by LC_ALL, or by LANG alone, as most
// servers set it) and in none: the shell reads fields by byte count, which
// holds only in C (its LC_CTYPE, or its LC_ALL when that is set), and the
// job gets the locale back: it counts the characters of its variable as
// its locale does.
func TestShellFieldsInAnyLocale(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dïr ☃")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := "printf '%s|%s|%s|%s|%s|' \"$Z\" ${#Z} \"${LC_ALL-unset}\" \"${LC_CTYPE-unset}\" ☃; pwd"
	for _, tt := range []struct {
		name, lcAll, lang string
		chars             int
	}{
		{"no locale", "", "", 17},
		{"LC_ALL=C.UTF-8", "C.UTF-8", "", 13},
		{"LANG=C.UTF-8", "", "C.UTF-8", 13},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for name, v := range map[string]string{"LC_ALL": tt.lcAll, "LANG": tt.lang, "LC_CTYPE": ""} {
				t.Setenv(name, v)
				if v == "" {
					os.Unsetenv(name)
				}
			}
			l := local(t, fast)
			want := fmt.Sprintf("héllo wörld ☃|%d|%s|unset|☃|%s\n", tt.chars, cmp.Or(tt.lcAll, "unset"), dir)
			// Twice: the second job's fields follow the first's end on the
			// same shell, so a miscount shows in either.
			for i := range 2 {
				var out, errs bytes.Buffer
				code, err := l.Run(context.Background(), executor.Command{Script: script, Env: []string{"Z=héllo wörld ☃"}, Prelude: executor.Prelude{Workdir: dir}}, &out, &errs)
				if err != nil || code != 0 || out.String() != want {
					t.Fatalf("job %d: code %d, err %v, out %q, stderr %q; want %q", i, code, err, out.String(), errs.String(), want)
				}
			}
		})
	}
}

// idleTags lists the tags of the idle shells.
func (ss *Shells) idleTags() []string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	var tags []string
	for _, sh := range ss.idle {
		tags = append(tags, sh.tag)
	}
	return tags
}

// A process that left its job's group and writes after the job ended
// makes the shell unfit: the next job runs in a new shell and gets none of
// it.
func TestShellRetiredAfterStrayOutput(t *testing.T) {
	t.Parallel()
	l := local(t, fast)
	ctx := context.Background()
	wrote := filepath.Join(t.TempDir(), "wrote")
	escape := "setsid bash -c 'sleep 0.3; echo late; echo late >&2; touch " + wrote + "' & sleep 0.1"
	if _, err := l.Run(ctx, executor.Command{Script: escape, Tag: "t-1-1"}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(wrote); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the escaped process never wrote")
		}
	}
	time.Sleep(100 * time.Millisecond) // for its bytes to reach the stream
	var out, errOut bytes.Buffer
	if _, err := l.Run(ctx, executor.Command{Script: "echo next; sleep 0.5", Tag: "t-2-1"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if out.String() != "next\n" || errOut.Len() != 0 {
		t.Errorf("next job got %q and %q", out.String(), errOut.String())
	}
	if tags := l.idleTags(); len(tags) != 1 || tags[0] != "t-2-1" {
		t.Errorf("idle shells %v, want the one started for the next job", tags)
	}
}

// A cancelled job's shell is not used again, and the next job gets a new
// one.
func TestShellNotReusedAfterCancel(t *testing.T) {
	t.Parallel()
	l := local(t, fast)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := l.Run(ctx, executor.Command{Script: "sleep 30", Tag: "c-1-1"}, io.Discard, io.Discard); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	if tags := l.idleTags(); len(tags) != 0 {
		t.Errorf("idle shells after a cancelled job: %v", tags)
	}
	var out bytes.Buffer
	if code, err := l.Run(context.Background(), executor.Command{Script: "echo ok", Tag: "c-2-1"}, &out, io.Discard); code != 0 || err != nil || out.String() != "ok\n" {
		t.Errorf("next job: %d, %v, %q", code, err, out.String())
	}
}

// A job whose fields arrive just before stdin ends (the coordinator sent it
// and went away) runs to its end all the same, and the shell exits after
// it; a command without a tag (the coordinator's own look at the machine)
// is stopped.
func TestShellAsStdinEnds(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		tag     string
		wantRan bool
	}{{"e-1-1", true}, {"", false}} {
		done := filepath.Join(t.TempDir(), "done")
		body := fields(executor.Command{Script: "sleep 1; echo > $DONE", Env: []string{"DONE=" + done}, Tag: tt.tag}, newMark(), placing{})
		cmd := exec.Command("bash", "-c", spawn.Bootstrap(script, ProcessName, "sh-e"+tt.tag))
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Stdin = bytes.NewReader(append(header(fast, executor.Prelude{}, false, nil), body...))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("tag %q: the shell did not exit", tt.tag)
		}
		time.Sleep(1500 * time.Millisecond) // past the job's own end
		if _, err := os.Stat(done); (err == nil) != tt.wantRan {
			t.Errorf("tag %q: the job ran to its end: %v, want %v", tt.tag, err == nil, tt.wantRan)
		}
	}
}

// Run tells Progress that the job runs once its shell is set up, for a
// new shell and for one that ran a job before; an attempt whose shell
// could not be set up (a missing workdir, a set-up past its limit) never
// ran, and is never said to.
func TestRunSaysWhenTheJobBegins(t *testing.T) {
	t.Parallel()
	sup := fast
	sup.SetupLimit = time.Second
	ss := local(t, sup)
	tests := []struct {
		name        string
		prelude     executor.Prelude
		wantRunning int
		wantUnfit   bool
	}{
		{name: "new shell", wantRunning: 1},
		{name: "shell used before", wantRunning: 1},
		{name: "workdir missing", prelude: executor.Prelude{Workdir: "/nonexistent/proj"}, wantUnfit: true},
		{name: "set-up past its limit", prelude: executor.Prelude{Setup: "sleep 30"}, wantUnfit: true},
	}
	for _, tt := range tests {
		running := 0
		c := executor.Command{Script: "echo hi", Prelude: tt.prelude, Progress: func(p executor.Progress) {
			if p.Running {
				running++
			}
		}}
		var out bytes.Buffer
		_, err := ss.Run(context.Background(), c, &out, io.Discard)
		var unfit *executor.UnfitError
		if errors.As(err, &unfit) != tt.wantUnfit || !tt.wantUnfit && (err != nil || out.String() != "hi\n") {
			t.Errorf("%s: output %q, error %v; want unfit %v", tt.name, out.String(), err, tt.wantUnfit)
		}
		if running != tt.wantRunning {
			t.Errorf("%s: told Running %d times, want %d", tt.name, running, tt.wantRunning)
		}
	}
}
