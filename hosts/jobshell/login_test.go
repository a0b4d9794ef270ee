package jobshell

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"al.essio.dev/pkg/shellescape"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// homeWith makes a home whose ~/.bash_profile sources ~/.bashrc, as
// Debian's ~/.profile does, with bashrc as ~/.bashrc.
func homeWith(t *testing.T, bashrc string) string {
	home := t.TempDir()
	os.WriteFile(filepath.Join(home, ".bash_profile"), []byte(". ~/.bashrc\n"), 0o644)
	os.WriteFile(filepath.Join(home, ".bashrc"), []byte(bashrc), 0o644)
	return home
}

// shellsIn are job shells whose machine's HOME is home and login shell
// loginShell, ended with the test.
func shellsIn(t testing.TB, home, loginShell string, login Login) *Shells {
	start := func(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
		return spawn.Local(ctx, "export HOME="+shellescape.Quote(home)+" SHELL="+shellescape.Quote(loginShell)+"; "+line, stdout, stderr)
	}
	ss := New(start, Supervision{Heartbeat: fast.Heartbeat, Grace: fast.Grace, Login: login})
	t.Cleanup(ss.Close)
	return ss
}

// runJob runs script with env on ss and returns its stdout, failing t
// unless it exits 0 with nothing on stderr.
func runJob(t *testing.T, ss *Shells, script string, env ...string) string {
	t.Helper()
	var out, errs bytes.Buffer
	code, err := ss.Run(context.Background(), executor.Command{Script: script, Env: env}, &out, &errs)
	if err != nil || code != 0 || errs.Len() != 0 {
		t.Fatalf("%q: exit %d, %v, stderr %q", script, code, err, errs.String())
	}
	return out.String()
}

// profileSets is a login profile's lines that set up what a job must see
// as bash -lc shows it: a function, an exported one, an alias, variables
// plain, array and exported, a PATH, options.
const profileSets = `greet() { echo "hello from a function"; }
exported() { echo "exported function"; }
export -f exported
alias ll='ls -l'
MYVAR=plain
declare -a LIST=(a "b c")
export CONDA_PREFIX=$HOME/env
PATH=$HOME/env/bin:$PATH
shopt -s extglob
set -o pipefail
`

// A job of a slot's shell sees what bash -lc would: the functions,
// aliases, variables, options, exported functions and PATH its profile
// sets up (conda activation is that), with $0 and the positional
// parameters of its own; the profile's output reaches no log, and its
// CUDA_VISIBLE_DEVICES does not win over the slot's. Both kinds of job: a
// fork of the slot's shell, and one that names $$ (a bash of its own, so
// that $$ is its own).
func TestLoginOncePerSlot(t *testing.T) {
	t.Parallel()
	home := homeWith(t, `echo profile talks on stdout
echo profile talks on stderr >&2
`+profileSets+`export CUDA_VISIBLE_DEVICES=7
echo profile-read >> ~/reads
`)
	ss := shellsIn(t, home, "/bin/bash", LoginPerSlot)
	common := `greet; bash -c exported; alias ll; echo "$MYVAR $CONDA_PREFIX ${LIST[1]}"; echo "${PATH%%:*}"; echo "$0 $# $CUDA_VISIBLE_DEVICES"; shopt -q extglob && echo extglob; [[ $- == *m* ]] || echo no-monitor; [[ -o pipefail ]] && echo pipefail; echo ${_g_mark-no-internals} ${w-no-bootstrap}; echo "$(declare -F | grep -c _g_) internal functions"`
	for _, tc := range []struct{ name, script, mark string }{
		{"fork", common, "no-bootstrap"},
		{"names $$", common + `; [ "$$" = "$BASHPID" ] && echo own-pid`, "own-pid"},
	} {
		got := runJob(t, ss, tc.script, "CUDA_VISIBLE_DEVICES=0,1")
		// The reference: bash -lc itself, with the job's variable set after.
		ref := exec.Command("bash", "-lc", "export CUDA_VISIBLE_DEVICES=0,1; "+tc.script)
		ref.Env = append(os.Environ(), "HOME="+home)
		want, _ := ref.Output()
		want = bytes.Replace(want, []byte("profile talks on stdout\n"), nil, 1)
		if got != string(want) {
			t.Errorf("%s: a job printed\n%s\nbash -lc prints\n%s", tc.name, got, want)
		}
		for _, line := range []string{"hello from a function", "exported function", "alias ll='ls -l'", "plain " + home + "/env b c", home + "/env/bin", "bash 0 0,1", "extglob", "pipefail", "0 internal functions", tc.mark} {
			if !strings.Contains(got, line+"\n") && !strings.Contains(got, line+" ") {
				t.Errorf("%s: a job printed\n%s\nwithout %q", tc.name, got, line)
			}
		}
	}
	os.Remove(filepath.Join(home, "reads")) // the references read it too
	// More jobs on the slot: the profile is not read again, and each job
	// has its own BASHPID, RANDOM and SECONDS.
	a := runJob(t, ss, `echo $BASHPID $RANDOM $SECONDS`)
	b := runJob(t, ss, `echo $BASHPID $RANDOM $SECONDS`)
	if a == b || !strings.HasSuffix(a, " 0\n") {
		t.Errorf("two jobs printed %q and %q: want BASHPID and RANDOM their own, SECONDS 0", a, b)
	}
	if reads, _ := os.ReadFile(filepath.Join(home, "reads")); len(reads) != 0 {
		t.Errorf("the profile was read again for later jobs on the slot: %q", reads)
	}
}

// runAtOnce runs script on ss n times at once, each on a shell of its
// own (each job waits until all have started), and returns what each
// printed.
func runAtOnce(t *testing.T, ss *Shells, n int, script string) []string {
	t.Helper()
	gate := filepath.Join(t.TempDir(), "gate")
	outs := make([]string, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			var out, stderr bytes.Buffer
			// Each job says it started, then waits for all n.
			job := fmt.Sprintf("echo >> %s; while [ $(wc -l < %s) -lt %d ]; do sleep 0.01; done; %s", gate, gate, n, script)
			code, err := ss.Run(context.Background(), executor.Command{Script: job}, &out, &stderr)
			if err == nil && (code != 0 || stderr.Len() != 0) {
				err = fmt.Errorf("exit %d, stderr %q", code, stderr.String())
			}
			outs[i] = out.String()
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("%q: %v", script, err)
		}
	}
	return outs
}

// A machine's slots read its login profile once: the first job shell
// hands what it read on (its variables, functions, aliases, options,
// traps, umask, the directory the profile left it in) and the others copy
// it, so that their jobs see what bash -lc shows, as the reader's do. A
// profile that changes a limit (ulimit) is read by every shell: no copy
// could take the limit. An edit is seen by copies as by the reader.
func TestLoginReadOnceAcrossSlots(t *testing.T) {
	t.Parallel()
	profile := `echo read >> ~/reads
` + profileSets + `declare -A MAP=([k]="v w")
declare -i NUM=41+1
readonly FIXED=fixed
umask 0027
trap 'echo bye' USR1
mkdir -p ~/proj && cd ~/proj
`
	script := `greet; bash -c exported; alias ll; echo "$MYVAR ${LIST[1]} ${MAP[k]} $NUM $FIXED $CONDA_PREFIX ${PATH%%:*}"; shopt -q extglob && echo extglob; [[ -o pipefail ]] && echo pipefail; umask; trap -p USR1; pwd; echo "$(declare -F | grep -c _g_) internal functions"`
	home := homeWith(t, profile)
	ref := exec.Command("bash", "-lc", script)
	ref.Env = append(os.Environ(), "HOME="+home)
	want, err := ref.Output()
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(home, "reads"))
	for _, line := range []string{"plain b c v w 42 fixed " + home + "/env " + home + "/env/bin", "0027", "trap -- 'echo bye' SIGUSR1", home + "/proj", "0 internal functions"} {
		if !bytes.Contains(want, []byte(line+"\n")) {
			t.Fatalf("bash -lc printed\n%s\nwithout %q: the test's own reference is wrong", want, line)
		}
	}
	reads := func() int {
		b, _ := os.ReadFile(filepath.Join(home, "reads"))
		return strings.Count(string(b), "\n")
	}

	ss := shellsIn(t, home, "/bin/bash", LoginPerSlot)
	for i, got := range runAtOnce(t, ss, 4, script) {
		if got != string(want) {
			t.Errorf("job %d printed\n%s\nbash -lc prints\n%s", i, got, want)
		}
	}
	if n := reads(); n != 1 {
		t.Errorf("4 slots read the profile %d times, want once", n)
	}
	if n := len(ss.idleTags()); n != 4 {
		t.Fatalf("%d idle shells, want 4: the jobs did not run at once", n)
	}
	// The copies take the reader's reference file (when it began to read
	// the profile): they make none of their own.
	refs, _ := filepath.Glob(filepath.Join(home, ".gpudispatch", "jobs", "*.d", "ref"))
	if len(refs) != 1 {
		t.Errorf("4 shells of one reader made %d reference files, want the reader's only: %v", len(refs), refs)
	}
	// What looks for nvidia-smi as a job would (a GPU lock holder) is
	// given the PATH the profile set.
	if path, ok := ss.LoginPath(); !ok || !strings.HasPrefix(path, home+"/env/bin:") {
		t.Errorf("the login PATH handed on: %q, %v; want the profile's, %s first", path, ok, home+"/env/bin")
	}

	// An edit: every shell finds it stale, and the profile is read once
	// more for all of them.
	time.Sleep(20 * time.Millisecond) // a later time, however fine the clock
	os.WriteFile(filepath.Join(home, ".bashrc"), []byte(strings.Replace(profile, "MYVAR=plain", "MYVAR=edited", 1)), 0o644)
	for i, got := range runAtOnce(t, ss, 4, `echo "$MYVAR"`) {
		if got != "edited\n" {
			t.Errorf("after the edit, job %d printed %q", i, got)
		}
	}
	if n := reads(); n != 2 {
		t.Errorf("after the edit the profile was read %d times in all, want twice", n)
	}

	// A limit the profile sets: each shell reads it.
	limited := homeWith(t, "echo read >> ~/reads\nulimit -S -n 512\n")
	ss = shellsIn(t, limited, "/bin/bash", LoginPerSlot)
	for i, got := range runAtOnce(t, ss, 3, `ulimit -S -n`) {
		if got != "512\n" {
			t.Errorf("job %d: open files limit %q, want the profile's 512", i, got)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(limited, "reads")); strings.Count(string(b), "\n") != 3 {
		t.Errorf("a profile that sets a limit was read %q by 3 slots, want by each", b)
	}
}

// A warmed shell reads the profile before any command comes, and the
// first command with its prelude runs in it; one whose profile ends it
// makes that command's machine unfit, as a shell started for the command
// would, whether it ended before the command came or after.
func TestWarm(t *testing.T) {
	t.Parallel()
	home := homeWith(t, "echo read >> ~/reads\nMYVAR=warm\n")
	ss := shellsIn(t, home, "/bin/bash", LoginPerSlot)
	ss.Warm(context.Background(), executor.Prelude{})
	deadline := time.Now().Add(10 * time.Second)
	for len(ss.idleTags()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	warmed := ss.idleTags()
	if got := runJob(t, ss, `echo "$MYVAR"`); got != "warm\n" {
		t.Errorf("a job printed %q, want the profile's variable", got)
	}
	if after := ss.idleTags(); len(warmed) != 1 || len(after) != 1 || after[0] != warmed[0] {
		t.Errorf("idle shells %v after the warming, %v after the job: want the job in the warmed one", warmed, after)
	}
	if b, _ := os.ReadFile(filepath.Join(home, "reads")); string(b) != "read\n" {
		t.Errorf("the profile was read %q, want once", b)
	}

	for _, wait := range []time.Duration{0, 300 * time.Millisecond} {
		ss := shellsIn(t, homeWith(t, "sleep 0.1; exit 4\n"), "/bin/bash", LoginPerSlot)
		ss.Warm(context.Background(), executor.Prelude{})
		time.Sleep(wait)
		_, err := ss.Run(context.Background(), executor.Command{Script: "true"}, io.Discard, io.Discard)
		var unfit *executor.UnfitError
		if !errors.As(err, &unfit) || !strings.Contains(unfit.Why, "the login profile ended gpudispatch's job shell as it was read (exit status 4)") {
			t.Errorf("a command %v after warming a shell whose profile exits: %v, want the machine unfit for it", wait, err)
		}
	}
}

// A profile that never finishes is read once for all the slots that wait
// for it: once the first shell's set-up outlasts its limit, the others'
// jobs find the machine unfit for the same reason, rather than each
// reading the profile and waiting as long again.
func TestLoginHungProfileReadOnce(t *testing.T) {
	t.Parallel()
	home := homeWith(t, "echo read >> ~/reads\nsleep 30\n")
	start := func(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
		return spawn.Local(ctx, "export HOME="+shellescape.Quote(home)+" SHELL=/bin/bash; "+line, stdout, stderr)
	}
	sup := fast
	sup.Login, sup.SetupLimit = LoginPerSlot, time.Second
	ss := New(start, sup)
	t.Cleanup(ss.Close)
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := ss.Run(context.Background(), executor.Command{Script: "true"}, io.Discard, io.Discard)
			errs <- err
		}()
	}
	for range 3 {
		var unfit *executor.UnfitError
		if err := <-errs; !errors.As(err, &unfit) || !strings.Contains(unfit.Why, "did not finish within 1s (--setup-timeout)") {
			t.Errorf("a job on a machine whose profile hangs: %v, want it unfit for its set-up's limit", err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(home, "reads")); strings.Count(string(b), "\n") != 1 {
		t.Errorf("the hung profile was read %q, want once", b)
	}
}

// A job that sends TERM to its slot's shell ends itself, as it would under
// bash -lc, and the slot's shell lives on for the next job: to the process
// it was forked from (what "kill $$" does in a fork of it), or to its
// $PPID, the job shell, which hands it on at once.
func TestLoginForkKillsItself(t *testing.T) {
	t.Parallel()
	ss := shellsIn(t, homeWith(t, ""), "/bin/bash", LoginPerSlot)
	runJob(t, ss, "true")
	for _, script := range []string{
		`me=$BASHPID; kill -TERM "$(ps -o ppid= -p "$me" | tr -d ' ')"; sleep 5; echo survived`,
		`kill -TERM "$PPID"; sleep 5; echo survived`,
	} {
		before := ss.idleTags()
		start := time.Now()
		var out, errs bytes.Buffer
		code, err := ss.Run(context.Background(), executor.Command{Script: script}, &out, &errs)
		if took := time.Since(start); err != nil || code != 143 || out.Len() != 0 || took > 4*time.Second {
			t.Fatalf("%s: exit %d, %v, stdout %q, stderr %q, after %s; want 143 at once and nothing printed", script, code, err, out.String(), errs.String(), took.Round(time.Millisecond))
		}
		if after := ss.idleTags(); len(after) != 1 || after[0] != before[0] {
			t.Errorf("%s: idle shells %v then %v, want the same one", script, before, after)
		}
	}
	runJob(t, ss, "true")
}

// What a slot's shell starts to keep a job's time limit, or to time the
// grace of a reaping, ends with the job: none of it is left to run on once
// Run returns (a timer left behind holds the shell's pipes, and keeps a
// process per job for as long as its limit).
func TestLoginReapingLeavesNoTimer(t *testing.T) {
	t.Parallel()
	home := homeWith(t, "")
	start := func(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
		return spawn.Local(ctx, "export HOME="+shellescape.Quote(home)+" SHELL=/bin/bash; "+line, stdout, stderr)
	}
	ss := New(start, Supervision{Heartbeat: fast.Heartbeat, Grace: 5437 * time.Millisecond, Login: LoginPerSlot})
	t.Cleanup(ss.Close)
	runJob(t, ss, "true")
	var out, errs bytes.Buffer
	if code, err := ss.Run(context.Background(), executor.Command{Script: "(sleep 9.871 &)", Timeout: 61500 * time.Millisecond}, &out, &errs); err != nil || code != 0 {
		t.Fatalf("exit %d, %v, stderr %q", code, err, errs.String())
	}
	for _, args := range []string{"sleep 9.871", "sleep 5.437", "sleep 61.500"} {
		for i := 0; ; i++ {
			if exec.Command("pgrep", "-fx", args).Run() != nil {
				break
			}
			if i == 20 {
				t.Errorf("%q still runs a second after the job ended", args)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// An edit of ~/.bashrc takes effect from the next job: its shell is
// replaced, and the job runs once.
func TestLoginProfileEdited(t *testing.T) {
	t.Parallel()
	home := homeWith(t, "MYVAR=one\n")
	ss := shellsIn(t, home, "/bin/bash", LoginPerSlot)
	counter := filepath.Join(t.TempDir(), "runs")
	job := `echo "$MYVAR"; echo x >> ` + counter
	if got := runJob(t, ss, job); got != "one\n" {
		t.Fatalf("first job: %q", got)
	}
	before := ss.idleTags()
	time.Sleep(20 * time.Millisecond) // a later time, however fine the clock
	os.WriteFile(filepath.Join(home, ".bashrc"), []byte("MYVAR=two\n"), 0o644)
	if got := runJob(t, ss, job); got != "two\n" {
		t.Errorf("after the edit: %q, want two", got)
	}
	if after := ss.idleTags(); len(after) != 1 || after[0] == before[0] {
		t.Errorf("idle shells %v then %v, want the old one replaced", before, after)
	}
	if runs, _ := os.ReadFile(counter); string(runs) != "x\nx\n" {
		t.Errorf("the jobs ran %d times, want 2", strings.Count(string(runs), "\n"))
	}
}

// A profile that sets a read-only TMOUT (the idle logout of hardened
// servers), which bash's read builtin takes for its timeout, ends no job
// shell: one idle for longer than it runs the next job, and a job that runs
// longer than it can still be cancelled. Its jobs see it, as under bash -lc.
func TestLoginProfileTimeout(t *testing.T) {
	t.Parallel()
	ss := shellsIn(t, homeWith(t, "TMOUT=1\nreadonly TMOUT\nexport TMOUT\n"), "/bin/bash", LoginPerSlot)
	runJob(t, ss, "true")
	before := ss.idleTags()
	time.Sleep(2500 * time.Millisecond)
	if got := runJob(t, ss, `echo "$TMOUT"`); got != "1\n" {
		t.Errorf("after an idle wait, the job printed %q, want the profile's TMOUT, 1", got)
	}
	if after := ss.idleTags(); len(after) != 1 || after[0] != before[0] {
		t.Errorf("idle shells %v then %v, want the same one", before, after)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	start := time.Now()
	var out, errs bytes.Buffer
	code, err := ss.Run(ctx, executor.Command{Script: "sleep 30; echo done"}, &out, &errs)
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > 10*time.Second || out.Len() != 0 {
		t.Errorf("a job cancelled after 2.5 s: exit %d, %v, stdout %q, after %s; want it ended at once", code, err, out.String(), took.Round(time.Millisecond))
	}
}

// login per_job reads the profile for every job, with the job's variables
// exported before it, as gpudispatch always did.
func TestLoginPerJob(t *testing.T) {
	t.Parallel()
	home := homeWith(t, "echo read >> ~/reads\n")
	ss := shellsIn(t, home, "/bin/bash", LoginPerJob)
	for range 3 {
		runJob(t, ss, "true")
	}
	if reads, _ := os.ReadFile(filepath.Join(home, "reads")); strings.Count(string(reads), "\n") != 3 {
		t.Errorf("the profile was read %q for 3 jobs, want 3 times", reads)
	}
}

// Login none reads no profile: a job gets the job shell's environment as
// it is (a local machine's: the coordinator's, with its activated env
// first on PATH), the job's own variables on top, and a job that names $$
// gets its own bash with that environment too.
func TestLoginNone(t *testing.T) {
	t.Parallel()
	home := homeWith(t, "echo read >> ~/reads\nPATH=/usr/bin:/bin\n")
	env := t.TempDir()
	start := func(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
		return spawn.Local(ctx, "export HOME="+shellescape.Quote(home)+" PATH="+shellescape.Quote(env+":"+os.Getenv("PATH"))+" VIRTUAL_ENV="+shellescape.Quote(env)+"; "+line, stdout, stderr)
	}
	ss := New(start, Supervision{Heartbeat: fast.Heartbeat, Grace: fast.Grace, Login: LoginNone})
	t.Cleanup(ss.Close)
	for _, job := range []string{`echo "${PATH%%:*} $VIRTUAL_ENV $MINE"`, `echo "${PATH%%:*} $VIRTUAL_ENV $MINE" $(($$ > 0))`} {
		got := runJob(t, ss, job, "MINE=job")
		if want := env + " " + env + " job"; !strings.HasPrefix(got, want) {
			t.Errorf("%s printed %q, want %q: the caller's environment and the job's", job, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(home, "reads")); err == nil {
		t.Error("a profile was read")
	}
}

// A login shell that is not bash runs "$SHELL -lc" per job.
func TestLoginZsh(t *testing.T) {
	t.Parallel()
	zsh, err := exec.LookPath("zsh")
	if err != nil {
		sshtest.Missing(t, "GPUDISPATCH_REQUIRE_ZSH", "no zsh here (apt-get install zsh)")
	}
	home := t.TempDir()
	os.WriteFile(filepath.Join(home, ".zprofile"), []byte("ZP=zprofile\n"), 0o644)
	ss := shellsIn(t, home, zsh, LoginPerSlot)
	for i := range 2 {
		if got := runJob(t, ss, `echo "$ZP ${ZSH_VERSION:+zsh} $CUDA_VISIBLE_DEVICES"`, "CUDA_VISIBLE_DEVICES=3"); got != "zprofile zsh 3\n" {
			t.Errorf("job %d under zsh printed %q", i, got)
		}
	}
}

// BenchmarkLoginOnce runs jobs of `true` one after another on one slot,
// with a plain home and with a ~/.bashrc that costs 50 ms, a login shell
// per slot against one per job: go test ./hosts/jobshell -run '^$' -bench Login
func BenchmarkLogin(b *testing.B) {
	for _, home := range []struct{ name, bashrc string }{{"plain", ""}, {"slow-bashrc", "sleep 0.05\n"}} {
		for _, login := range []struct {
			name  string
			login Login
		}{{"per-slot", LoginPerSlot}, {"per-job", LoginPerJob}} {
			b.Run(fmt.Sprintf("%s/%s", home.name, login.name), func(b *testing.B) {
				dir := b.TempDir()
				os.WriteFile(filepath.Join(dir, ".bash_profile"), []byte(". ~/.bashrc\n"), 0o644)
				os.WriteFile(filepath.Join(dir, ".bashrc"), []byte(home.bashrc), 0o644)
				start := func(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
					return spawn.Local(ctx, "export HOME="+shellescape.Quote(dir)+" SHELL=/bin/bash; "+line, stdout, stderr)
				}
				ss := New(start, Supervision{Heartbeat: time.Second, Grace: time.Second, Login: login.login})
				defer ss.Close()
				for b.Loop() {
					if code, err := ss.Run(context.Background(), executor.Command{Script: "true", Tag: "bench-1-1"}, io.Discard, io.Discard); code != 0 || err != nil {
						b.Fatal(code, err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			})
		}
	}
}

// Past rotateAt bytes of output a shell starts new stream files for its
// next job, and a new starter that has them: the jobs after run as before,
// forks and jobs of their own bash alike, with the profile's functions, and
// the earlier files are gone.
func TestStreamFilesRotate(t *testing.T) {
	t.Parallel()
	home := homeWith(t, "greet() { echo hello; }\n")
	ss := shellsIn(t, home, "/bin/bash", LoginPerSlot)
	runJob(t, ss, fmt.Sprintf("head -c %d /dev/zero", rotateAt+1))
	spool := filepath.Join(home, ".gpudispatch", "jobs")
	for i, job := range []string{"greet; echo two", "greet; echo three $(($$ > 0))", "greet; echo four"} {
		want := []string{"hello\ntwo\n", "hello\nthree 1\n", "hello\nfour\n"}[i]
		if got := runJob(t, ss, job); got != want {
			t.Errorf("job %q after the rotation printed %q, want %q", job, got, want)
		}
	}
	if n := len(ss.idleTags()); n != 1 {
		t.Errorf("%d idle shells, want the one", n)
	}
	outs, _ := filepath.Glob(filepath.Join(spool, "*.out"))
	if len(outs) != 1 || !strings.HasSuffix(outs[0], "-1.out") {
		t.Fatalf("stream files %v, want only the second generation's", outs)
	}
	// The jobs after the rotation wrote into the new files (the tee may
	// pass a job's bytes on before it has written them there).
	var b []byte
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if b, _ = os.ReadFile(outs[0]); strings.Contains(string(b), "hello\nfour\n") {
			break
		}
	}
	if !strings.HasPrefix(string(b), "hello\ntwo\n") || !strings.Contains(string(b), "hello\nfour\n") {
		t.Errorf("the new stream file holds %q, want the later jobs' output", b)
	}
}

// Nothing of a job shell stays in TMPDIR, even while it runs (so not after
// a kill either): the profile's state goes through a file in the shell's
// own directory in the spool, and its time, which tells a profile edited
// since, through the open file.
func TestLoginLeavesNothingInTmp(t *testing.T) {
	t.Parallel()
	home := homeWith(t, "hello() { echo hello from the profile; }\n")
	tmp := t.TempDir()
	start := func(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
		return spawn.Local(ctx, "export HOME="+shellescape.Quote(home)+" SHELL=/bin/bash TMPDIR="+shellescape.Quote(tmp)+"; "+line, stdout, stderr)
	}
	ss := New(start, Supervision{Heartbeat: fast.Heartbeat, Grace: fast.Grace, Login: LoginPerSlot})
	t.Cleanup(ss.Close)
	var shells []string // the parent of each job: its shell
	const shell = "read -r _ _ _ p _ </proc/$BASHPID/stat; echo $p"
	for range 2 {
		if got := runJob(t, ss, "hello; echo $$ > /dev/null"); got != "hello from the profile\n" {
			t.Fatalf("job printed %q", got)
		}
		shells = append(shells, runJob(t, ss, "hello >/dev/null; "+shell), runJob(t, ss, shell))
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			t.Errorf("the job shell left %d entries in TMPDIR (%s)", len(left), left[0].Name())
		}
		// A profile edited since the shell read it: the next job gets a
		// new shell.
		time.Sleep(20 * time.Millisecond)
		os.WriteFile(filepath.Join(home, ".bashrc"), []byte("hello() { echo hello from the profile; }\n"), 0o644)
	}
	if shells[0] != shells[1] || shells[2] != shells[3] || shells[1] == shells[2] {
		t.Errorf("the jobs' shells were %q: want one shell until the profile was edited, then another", shells)
	}
}

// A job has no job control, whatever the login: what it starts in the
// background stays in its process group, which a cancel stops.
func TestNoJobControlInJobs(t *testing.T) {
	t.Parallel()
	for _, login := range []Login{LoginPerSlot, LoginPerJob, LoginNone} {
		ss := shellsIn(t, t.TempDir(), "/bin/bash", login)
		for _, job := range []string{`echo "$-"`, `echo "$-" $(($$ > 0))`} {
			if out := runJob(t, ss, job); strings.Contains(strings.Fields(out)[0], "m") {
				t.Errorf("login %d: %s: job control is on: %q", login, job, out)
			}
		}
	}
}

// Bash's own messages about a job name the job's lines, as bash -c would
// ("bash: line 2:"), not lines of the job shell; the job runs where its
// workdir and setup left it, with the profile's sourcepath, and the
// shell's directory for it goes with the shell.
func TestJobMessagesNameItsLines(t *testing.T) {
	t.Parallel()
	home := homeWith(t, "shopt -u sourcepath\n")
	sub := filepath.Join(home, "proj", "sub")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	script := "echo \"$LINENO $PWD\"; shopt -p sourcepath\nnonexistent_q"
	want := "1 " + sub + "\nshopt -u sourcepath\n"
	for _, tc := range []struct {
		name   string
		login  Login
		script string
		want   string
	}{
		{"fork", LoginPerSlot, script, want},
		{"names $$", LoginPerSlot, script + " $$", want},
		{"no login", LoginNone, script, strings.Replace(want, "-u", "-s", 1)},
	} {
		ss := shellsIn(t, home, "/bin/bash", tc.login)
		// Longer jobs before it, one past the blanks' limit: nothing of
		// theirs reaches it.
		prelude := executor.Prelude{Workdir: filepath.Dir(sub), Setup: "cd sub"}
		for _, n := range []int{6000, 3000} {
			var out bytes.Buffer
			long := "echo long \\\n" + strings.Repeat("x", n)
			if code, err := ss.Run(context.Background(), executor.Command{Script: long, Prelude: prelude}, &out, io.Discard); code != 0 || err != nil || out.Len() != n+6 {
				t.Fatalf("%s: a job of %d bytes: exit %d, %v, %d bytes out", tc.name, len(long), code, err, out.Len())
			}
		}
		var out, errs bytes.Buffer
		c := executor.Command{Script: tc.script, Prelude: prelude}
		code, err := ss.Run(context.Background(), c, &out, &errs)
		if err != nil || code != 127 || out.String() != tc.want || errs.String() != "bash: line 2: nonexistent_q: command not found\n" {
			t.Errorf("%s: exit %d, %v, stdout %q, stderr %q; want 127, %q and bash's message on line 2", tc.name, code, err, out.String(), errs.String(), tc.want)
		}
		tags := ss.idleTags()
		ss.Close()
		for _, tag := range tags {
			dir := filepath.Join(home, ".gpudispatch", "jobs", tag+".d")
			waitFor(t, dir+" removed", func() bool { _, err := os.Stat(dir); return os.IsNotExist(err) })
		}
	}
}
