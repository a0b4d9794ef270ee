package jobshell

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// runIn runs script with prelude p on ss and returns its stdout and the
// error, failing t on a non-zero exit or output on stderr.
func runIn(t *testing.T, ss *Shells, p executor.Prelude, script string) (string, error) {
	t.Helper()
	var out, errs bytes.Buffer
	code, err := ss.Run(context.Background(), executor.Command{Script: script, Prelude: p}, &out, &errs)
	if err == nil && (code != 0 || errs.Len() != 0) {
		t.Fatalf("%q: exit %d, stderr %q", script, code, errs.String())
	}
	return out.String(), err
}

// A conda env is activated where conda init put its block below Ubuntu's
// "not interactive: return" guard in ~/.bashrc, by the job's key or a
// job's own; a missing env is the host's answer, naming what it has, and
// no job runs; a shell runs only jobs of its own env.
func TestCondaBehindTheGuard(t *testing.T) {
	t.Parallel()
	for _, login := range []Login{LoginPerSlot, LoginPerJob} {
		t.Run(map[Login]string{LoginPerSlot: "per slot", LoginPerJob: "per job"}[login], func(t *testing.T) {
			t.Parallel()
			home := t.TempDir()
			base := sshtest.Conda(t, home, "torch", "jax")
			sshtest.UbuntuBashrc(t, home, base, "")
			ss := shellsIn(t, home, "/bin/bash", login)
			const probe = `python; echo "$CONDA_DEFAULT_ENV $(type -t conda)"`
			if out, err := runIn(t, ss, executor.Prelude{}, "type conda >/dev/null 2>&1 || echo none"); err != nil || out != "none\n" {
				t.Fatalf("without conda: the guard let conda in? %q, %v", out, err)
			}
			for range 2 {
				for _, env := range []string{"torch", "jax"} {
					out, err := runIn(t, ss, executor.Prelude{Conda: env}, probe)
					if want := "python of " + env + "\n" + env + " function\n"; err != nil || out != want {
						t.Errorf("conda: %s: got %q, %v; want %q", env, out, err, want)
					}
				}
			}
			_, err := runIn(t, ss, executor.Prelude{Conda: "tensorflow"}, "echo never")
			var unfit *executor.UnfitError
			if !errors.As(err, &unfit) || !errors.Is(err, executor.ErrUnfit) {
				t.Fatalf("missing env: err = %v, want an UnfitError", err)
			}
			if want := "conda env tensorflow not found (or cannot be activated); this host has: base, jax, torch"; unfit.Why != want {
				t.Errorf("missing env: %q, want %q", unfit.Why, want)
			}
		})
	}
}

// Conda is found where a terminal would find it: $CONDA_EXE, conda on
// PATH, the usual install directories; nowhere, and the host says where it
// looked.
func TestCondaFound(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	sshtest.Conda(t, home, "torch")
	ss := shellsIn(t, home, "/bin/bash", LoginPerSlot)
	if out, err := runIn(t, ss, executor.Prelude{Conda: "torch"}, "python"); err != nil || out != "python of torch\n" {
		t.Errorf("conda in ~/miniconda3: %q, %v", out, err)
	}
	none := shellsIn(t, t.TempDir(), "/bin/bash", LoginPerSlot)
	_, err := runIn(t, none, executor.Prelude{Conda: "torch"}, "echo never")
	var unfit *executor.UnfitError
	if !errors.As(err, &unfit) || !strings.HasPrefix(unfit.Why, "conda: not found on this host") {
		t.Errorf("no conda: %v", err)
	}
}

// A venv (relative to the workdir) is activated once per shell; a missing
// one, a missing workdir and a setup that fails are the host's answer, in
// one line that names them, and no job runs.
func TestVenvWorkdirSetup(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("python3"); err != nil {
		sshtest.Missing(t, "GPUDISPATCH_REQUIRE_PYTHON", "no python3 here")
	}
	home := t.TempDir()
	proj := filepath.Join(home, "proj")
	if out, err := exec.Command("python3", "-m", "venv", "--without-pip", filepath.Join(proj, ".venv")).CombinedOutput(); err != nil {
		t.Fatalf("python3 -m venv: %v\n%s", err, out)
	}
	ss := shellsIn(t, home, "/bin/bash", LoginPerSlot)
	in := executor.Prelude{Workdir: "~/proj", Venv: ".venv"}
	out, err := runIn(t, ss, in, `python -c 'import sys; print(sys.prefix)'; echo "$VIRTUAL_ENV"`)
	if want := filepath.Join(proj, ".venv") + "\n" + filepath.Join(proj, ".venv") + "\n"; err != nil || out != want {
		t.Errorf("venv: %q, %v; want %q", out, err, want)
	}
	for _, tt := range []struct {
		name string
		p    executor.Prelude
		want string
	}{
		{"missing venv", executor.Prelude{Workdir: "~/proj", Venv: "venv"}, "venv venv: no " + filepath.Join(proj, "venv") + "/bin/activate on this host (from " + proj + ")"},
		{"missing workdir", executor.Prelude{Workdir: "~/nope"}, "workdir " + filepath.Join(home, "nope") + " does not exist"},
		{"failing setup", executor.Prelude{Setup: "source ~/venv/bin/activate"},
			"setup failed with exit status 1: " + filepath.Join(home, "venv/bin/activate") + ": No such file or directory"},
		{"setup sees the host's env", executor.Prelude{Setup: `[ "$PROJ" = y ] || { echo "PROJ is '$PROJ'" >&2; exit 3; }`, Env: []string{"PROJ=x"}},
			"setup failed with exit status 3: PROJ is 'x'"},
	} {
		_, err := runIn(t, ss, tt.p, "echo never")
		var unfit *executor.UnfitError
		if !errors.As(err, &unfit) || unfit.Why != tt.want {
			t.Errorf("%s: err = %v, want unfit: %q", tt.name, err, tt.want)
		}
	}
}

// Modules are loaded with the host's Lmod, once per shell; one the host
// does not have is named with those it has.
func TestModules(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/etc/profile.d/lmod.sh"); err != nil {
		sshtest.Missing(t, "GPUDISPATCH_REQUIRE_LMOD", "no Lmod here (apt-get install lmod)")
	}
	home := t.TempDir()
	mods := filepath.Join(home, "modules")
	if err := os.MkdirAll(filepath.Join(mods, "cuda"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(mods, "cuda", "12.1.lua"), []byte(`setenv("CUDA_HOME", "/opt/cuda-12.1")`+"\n"), 0o644)
	os.WriteFile(filepath.Join(mods, "cuda", "11.8.lua"), []byte(`setenv("CUDA_HOME", "/opt/cuda-11.8")`+"\n"), 0o644)
	os.WriteFile(filepath.Join(home, ".bash_profile"), []byte("export MODULEPATH="+mods+"\n"), 0o644)
	ss := shellsIn(t, home, "/bin/bash", LoginPerSlot)
	if out, err := runIn(t, ss, executor.Prelude{Modules: []string{"cuda/12.1"}}, `echo "$CUDA_HOME"; module -t list 2>&1`); err != nil || out != "/opt/cuda-12.1\ncuda/12.1\n" {
		t.Errorf("modules: %q, %v", out, err)
	}
	_, err := runIn(t, ss, executor.Prelude{Modules: []string{"cudnn/9"}}, "echo never")
	var unfit *executor.UnfitError
	if want := "module cudnn/9 cannot be loaded; this host has: cuda/11.8, cuda/12.1"; !errors.As(err, &unfit) || unfit.Why != want {
		t.Errorf("missing module: %v, want %q", err, want)
	}
}

// shell: interactive reads ~/.bashrc past its guard, as a terminal's bash
// would; what it prints, and bash's "no job control" noise, reach no log.
func TestInteractive(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	base := sshtest.Conda(t, home, "torch")
	sshtest.UbuntuBashrc(t, home, base, "echo welcome from bashrc\necho to stderr >&2\nexport FROM_BASHRC=yes\nalias hi='echo hi from alias'\nconda activate torch\n")
	ss := shellsIn(t, home, "/bin/bash", LoginPerSlot)
	for i := range 2 {
		var out, errs bytes.Buffer
		code, err := ss.Run(context.Background(), executor.Command{Script: `echo "$FROM_BASHRC"; hi; python; [ -t 0 ] || echo no tty`, Prelude: executor.Prelude{Interactive: true}}, &out, &errs)
		if want := "yes\nhi from alias\npython of torch\nno tty\n"; err != nil || code != 0 || out.String() != want || errs.Len() != 0 {
			t.Errorf("job %d: exit %d, %v, out %q, stderr %q; want %q and no stderr", i, code, err, out.String(), errs.String(), want)
		}
	}
	if out, err := runIn(t, ss, executor.Prelude{}, `echo "[$FROM_BASHRC]"`); err != nil || out != "[]\n" {
		t.Errorf("a login shell without shell: interactive: %q, %v", out, err)
	}
}

// BenchmarkConda runs jobs of `true` one after another on one slot, with
// no env and with a conda env activated (once, as the shell starts): what
// a job pays for the env once its shell is up:
// go test ./hosts/jobshell -run '^$' -bench Conda
func BenchmarkConda(b *testing.B) {
	home := b.TempDir()
	sshtest.UbuntuBashrc(b, home, sshtest.Conda(b, home, "torch"), "")
	for _, p := range []struct {
		name string
		p    executor.Prelude
	}{{"none", executor.Prelude{}}, {"conda", executor.Prelude{Conda: "torch"}}} {
		b.Run(p.name, func(b *testing.B) {
			ss := shellsIn(b, home, "/bin/bash", LoginPerSlot)
			for b.Loop() {
				if code, err := ss.Run(context.Background(), executor.Command{Script: "true", Tag: "bench-1-1", Prelude: p.p}, io.Discard, io.Discard); code != 0 || err != nil {
					b.Fatal(code, err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}
