package slurm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// A batch job activates its env before its setup and line, as a job shell
// does, conda found behind Ubuntu's ~/.bashrc guard; an env the cluster
// lacks ends the job with 126 and says why. The script runs here under
// bash as Slurm would run it, in the submit directory.
func TestBatchScriptActivates(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	sshtest.UbuntuBashrc(t, home, sshtest.Conda(t, home, "torch"), "")
	for _, tc := range []struct {
		conda, wantOut, wantErr string
		code                    int
	}{
		{"torch", "python of torch\nset0\n", "", 0},
		{"tf", "", "gpudispatch: conda env tf not found (or cannot be activated); this host has: base, torch\n", 126},
	} {
		submit := t.TempDir()
		c := executor.Command{Script: "python; echo $FROM_SETUP$#", Prelude: executor.Prelude{Conda: tc.conda, Setup: "export FROM_SETUP=set"}}
		cmd := exec.Command("bash", "-c", batchScript(c, "T-1-1"))
		cmd.Env = append(os.Environ(), "HOME="+home, "SHELL=/bin/bash", "SLURM_SUBMIT_DIR="+submit)
		var out, errs strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errs
		cmd.Run()
		exit, _ := os.ReadFile(filepath.Join(submit, "T-1-1.exit"))
		if out.String() != tc.wantOut || errs.String() != tc.wantErr || strings.TrimSpace(string(exit)) != strconv.Itoa(tc.code) {
			t.Errorf("conda %s: out %q, err %q, exit file %q; want %q, %q, %d", tc.conda, out.String(), errs.String(), exit, tc.wantOut, tc.wantErr, tc.code)
		}
	}
}

// Bash's own messages about a batch job's line give the line's own line
// numbers, not those of the activation put before it.
func TestBatchScriptLineNumbers(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	sshtest.UbuntuBashrc(t, home, sshtest.Conda(t, home, "torch"), "")
	submit := t.TempDir()
	c := executor.Command{Script: "true\necho $LINENO\ndone", Prelude: executor.Prelude{Conda: "torch", Setup: "true\ntrue"}}
	cmd := exec.Command("bash", "-c", batchScript(c, "T-1-1"))
	cmd.Env = append(os.Environ(), "HOME="+home, "SHELL=/bin/bash", "SLURM_SUBMIT_DIR="+submit)
	out, _ := cmd.CombinedOutput()
	if got := string(out); !strings.HasPrefix(got, "2\n") || !strings.Contains(got, "line 3: syntax error") {
		t.Errorf("the job's output is %q; want its $LINENO 2 and its syntax error on line 3", got)
	}
}
