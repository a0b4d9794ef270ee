package hosts

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// fakeNvidiaSMI puts an nvidia-smi printing csv (and apps for
// --query-compute-apps) on the login shell's PATH of a home directory, as a
// user's ~/.bash_profile would, and returns the env that selects that home.
func fakeNvidiaSMI(t *testing.T, csv string, apps ...string) []string {
	t.Helper()
	home := t.TempDir()
	bin := filepath.Join(home, "bin")
	os.Mkdir(bin, 0o755)
	script := "#!/bin/sh\ncase $1 in\n--query-compute-apps=*) cat <<'X'\n" + strings.Join(apps, "") + "X\n;;\n*) cat <<'X'\n" + csv + "X\n;;\nesac\n"
	os.WriteFile(filepath.Join(bin, "nvidia-smi"), []byte(script), 0o755)
	os.WriteFile(filepath.Join(home, ".bash_profile"), []byte("PATH="+bin+":$PATH\n"), 0o644)
	return []string{"HOME=" + home}
}

// envRunner runs through Local with extra environment.
type envRunner struct {
	*Local
	env []string
}

func (r envRunner) Run(ctx context.Context, c executor.Command, stdout, stderr io.Writer) (int, error) {
	c.Env = append(append([]string(nil), r.env...), c.Env...)
	return r.Local.Run(ctx, c, stdout, stderr)
}

func TestProbeGPUsThroughLoginShell(t *testing.T) {
	t.Parallel()
	env := fakeNvidiaSMI(t, "0, GPU-a, Fake GPU, 100, 1, 2\n1, GPU-b, Fake GPU, 100, 3, 4\n")
	gpus, err := ProbeGPUs(context.Background(), envRunner{local(t, fast), env})
	if err != nil || len(gpus) != 2 || gpus[1].UUID != "GPU-b" || gpus[1].Utilization != 4 {
		t.Fatalf("got %+v, %v", gpus, err)
	}
}

// Compute processes are counted per GPU, and make it busy whatever its
// memory says; so does memory above the threshold.
func TestProbeGPUsBusy(t *testing.T) {
	t.Parallel()
	env := fakeNvidiaSMI(t, "0, GPU-a, Fake GPU, 100, 1, 2\n1, GPU-b, Fake GPU, 100, 30, 4\n2, GPU-c, Fake GPU, 100, 700, 0\n",
		"GPU-b, 123, 30\n", "GPU-b, 124, [N/A]\n")
	gpus, err := ProbeGPUs(context.Background(), envRunner{local(t, fast), env})
	if err != nil || len(gpus) != 3 {
		t.Fatalf("got %+v, %v", gpus, err)
	}
	for i, want := range []string{"", "2 processes, 30 MiB used", "700 MiB used (more than 500)"} {
		if got := gpus[i].BusyWhy(500); got != want {
			t.Errorf("GPU %d (%+v): busy %q, want %q", i, gpus[i], got, want)
		}
	}
}

func TestProbeGPUsWithoutNvidiaSMI(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/usr/bin/nvidia-smi"); err == nil {
		t.Skip("nvidia-smi is installed here")
	}
	home := t.TempDir()
	_, err := ProbeGPUs(context.Background(), envRunner{local(t, fast), []string{"HOME=" + home, "PATH=/nonexistent"}})
	if !errors.Is(err, ErrNoNvidiaSMI) {
		t.Fatalf("err = %v, want ErrNoNvidiaSMI", err)
	}
}

func TestSetUnknownHost(t *testing.T) {
	t.Parallel()
	_, err := (&Lab{}).Run(context.Background(), "nowhere", executor.Command{Script: "true"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "nowhere: not a host of this run") {
		t.Fatalf("err = %v", err)
	}
}
