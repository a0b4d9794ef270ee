package hosts

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
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

// feedStream writes a job's output, then its end, to s in chunks of the
// given sizes (cycled), and returns what the job's writer got and the
// status the stream handed over.
func feedStream(t testing.TB, s *stream, mark string, wantStatus bool, output []byte, after string, sizes []int) (string, string, bool) {
	var got bytes.Buffer
	end := s.start(&got, mark, wantStatus)
	all := append(append([]byte{}, output...), 0)
	all = append(all, mark...)
	all = append(all, after...)
	for i := 0; len(all) > 0; i++ {
		n := min(max(sizes[i%len(sizes)], 1), len(all))
		if _, err := s.Write(all[:n]); err != nil {
			t.Fatal(err)
		}
		all = all[n:]
	}
	select {
	case st := <-end:
		return got.String(), st, true
	default:
		return got.String(), "", false
	}
}

func TestStreamSplitsAtTheMark(t *testing.T) {
	mark := newMark()
	other := newMark()
	tests := []struct {
		name       string
		output     string
		wantStatus bool
		after      string
		wantEnd    string
	}{
		{name: "empty", output: "", wantStatus: true, after: " 0\n", wantEnd: " 0"},
		{name: "text", output: "epoch 1\nepoch 2\n", wantStatus: true, after: " 3\n", wantEnd: " 3"},
		{name: "no newline at the end", output: "loss 0.1", after: "", wantEnd: ""},
		{name: "NUL and a prefix of the mark", output: "a\x00" + mark[:5] + "b\x00\x00" + mark[:31], wantStatus: true, after: " 1\n", wantEnd: " 1"},
		{name: "another job's mark", output: "\x00" + other + " 0\n", wantStatus: true, after: " 0\n", wantEnd: " 0"},
		{name: "binary", output: string([]byte{0, 1, 2, 255, 0, 0}), after: "", wantEnd: ""},
	}
	for _, tt := range tests {
		for _, sizes := range [][]int{{1}, {2, 3}, {7}, {32, 1}, {1 << 20}} {
			s := &stream{}
			got, end, ended := feedStream(t, s, mark, tt.wantStatus, []byte(tt.output), tt.after, sizes)
			if got != tt.output || !ended || end != tt.wantEnd || s.strayed() {
				t.Errorf("%s, chunks %v: got %q, end %q (%v), stray %v; want %q, end %q",
					tt.name, sizes, got, end, ended, s.strayed(), tt.output, tt.wantEnd)
			}
		}
	}
}

// Bytes between jobs are stray; the next job's output is still its own.
func TestStreamStray(t *testing.T) {
	s := &stream{}
	mark := newMark()
	if _, _, ended := feedStream(t, s, mark, false, []byte("one"), "", []int{4}); !ended || s.strayed() {
		t.Fatalf("first job: ended %v, stray %v", ended, s.strayed())
	}
	s.Write([]byte("late"))
	if !s.strayed() {
		t.Error("bytes between jobs were not noticed")
	}
}

// The stream keeps the job's output whole when a write to the log fails,
// and says so.
func TestStreamWriteError(t *testing.T) {
	s := &stream{}
	mark := newMark()
	end := s.start(failWriter{}, mark, false)
	s.Write([]byte("x\x00" + mark))
	select {
	case <-end:
	default:
		t.Fatal("the end was not found after a failed write")
	}
	if s.writeErr() == nil {
		t.Error("the write error was lost")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func FuzzStream(f *testing.F) {
	f.Add([]byte("hello\n"), uint8(1), uint8(3))
	f.Add([]byte{0, 0, '0', 'a'}, uint8(2), uint8(1))
	f.Add([]byte(strings.Repeat("\x000123456789abcdef", 5)), uint8(5), uint8(7))
	mark := "0123456789abcdef0123456789abcdef"
	f.Fuzz(func(t *testing.T, output []byte, a, b uint8) {
		if bytes.Contains(output, []byte("\x00"+mark)) {
			return // a job cannot know its mark
		}
		s := &stream{}
		got, end, ended := feedStream(t, s, mark, true, output, " 7\n", []int{int(a), int(b)})
		if got != string(output) || !ended || end != " 7" || s.strayed() {
			t.Fatalf("got %q, end %q (%v), stray %v; want %q", got, end, ended, s.strayed(), output)
		}
	})
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
	steps := []struct {
		cmd      executor.Command
		wantOut  string
		wantCode int
	}{
		{executor.Command{Script: "echo $X; pwd; Y=set; cd /; exit 3", Env: []string{"X=one"}, Workdir: home}, "one\n" + home + "\n", 3},
		{executor.Command{Script: `echo "[$X][$Y]"; pwd`, Env: []string{"HOME=" + home}}, "[][]\n" + here + "\n", 0},
		{executor.Command{Script: "printf 'no newline'; kill -9 $$"}, "no newline", 137},
		{executor.Command{Script: "head -c 100000 /dev/zero; echo"}, strings.Repeat("\x00", 100000) + "\n", 0},
	}
	var shells []string
	for i, st := range steps {
		var out bytes.Buffer
		code, err := l.Run(ctx, st.cmd, &out, io.Discard)
		if err != nil || code != st.wantCode || out.String() != st.wantOut {
			t.Fatalf("job %d: code %d, err %v, out %q; want %d, %q", i, code, err, out.String(), st.wantCode, st.wantOut)
		}
		shells = append(shells, l.pool().idleTags()...)
	}
	for _, tag := range shells {
		if tag != shells[0] {
			t.Errorf("jobs ran in shells %v, want one shell", shells)
			break
		}
	}
}

// TestShellFieldsInAnyLocale sends fields with multibyte characters to job
// shells started in a UTF-8 locale and in none: the shell reads fields by
// byte count, which holds only in its own C locale, and the job gets the
// locale back.
func TestShellFieldsInAnyLocale(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dïr ☃")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := "printf '%s|%s|%s|' \"$Z\" \"${LC_ALL-unset}\" ☃; pwd"
	for _, lc := range []string{"", "C.UTF-8"} {
		t.Run("LC_ALL="+lc, func(t *testing.T) {
			if lc == "" {
				t.Setenv("LC_ALL", "")
				os.Unsetenv("LC_ALL")
			} else {
				t.Setenv("LC_ALL", lc)
			}
			l := local(t, fast)
			want := "héllo wörld ☃|" + cmp.Or(lc, "unset") + "|☃|" + dir + "\n"
			// Twice: the second job's fields follow the first's end on the
			// same shell, so a miscount shows in either.
			for i := range 2 {
				var out, errs bytes.Buffer
				code, err := l.Run(context.Background(), executor.Command{Script: script, Env: []string{"Z=héllo wörld ☃"}, Workdir: dir}, &out, &errs)
				if err != nil || code != 0 || out.String() != want {
					t.Fatalf("job %d: code %d, err %v, out %q, stderr %q; want %q", i, code, err, out.String(), errs.String(), want)
				}
			}
		})
	}
}

// idleTags lists the tags of the idle shells.
func (ss *shells) idleTags() []string {
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
	if tags := l.pool().idleTags(); len(tags) != 1 || tags[0] != "t-2-1" {
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
	if tags := l.pool().idleTags(); len(tags) != 0 {
		t.Errorf("idle shells after a cancelled job: %v", tags)
	}
	var out bytes.Buffer
	if code, err := l.Run(context.Background(), executor.Command{Script: "echo ok", Tag: "c-2-1"}, &out, io.Discard); code != 0 || err != nil || out.String() != "ok\n" {
		t.Errorf("next job: %d, %v, %q", code, err, out.String())
	}
}

// A job whose fields arrive just before stdin ends (the coordinator sent it
// and was cancelled, or vanished) does not run on unwatched: the shell
// stops it and exits.
func TestShellStopsAJobSentAsStdinEnds(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pids")
	// Many variables take the shell a while to read (a read each) after
	// the watcher has handed them on at once and seen the end: the job
	// starts after that.
	env := []string{"PIDS=" + pidFile}
	for i := range 20_000 {
		env = append(env, fmt.Sprintf("V%d=x", i))
	}
	body, err := fields(executor.Command{Script: "echo $$ > $PIDS; sleep 300", Env: env}, newMark())
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-c", bootstrap(shellScript, "gpudispatch-job", ""))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdin = bytes.NewReader(append(shellHeader(fast), body...))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the shell did not exit after stdin ended")
	}
	// The job may have been stopped before it wrote its pid.
	if b, err := os.ReadFile(pidFile); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			sshtest.WaitGone(t, []int{pid}, 0)
		}
	}
}
