package dispatch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A job that exits 127 for want of conda, module or python gets a hint
// naming what to set, for a remote host or this machine; other failures,
// and a command found but failing, get none.
func TestHint(t *testing.T) {
	for _, tc := range []struct {
		name, stderr string
		local        bool
		want         string // in the hint; "" for none
	}{
		{"conda remote", "bash: line 1: conda: command not found\n", false, "set conda: ENV for the host in the inventory, or [conda=ENV] on the job line"},
		{"module remote", "bash: module: command not found\n", false, "set modules: [NAME, ...] for the host"},
		{"python remote", "some output\nbash: line 3: python: command not found\n", false, "python is not on the job's PATH on node1"},
		{"python local", "bash: line 1: python3: command not found\n", true, "start gpudispatch where your env is active"},
		{"another command", "bash: line 1: trian.py: command not found\n", false, ""},
		{"python found, failing", "Traceback (most recent call last):\nModuleNotFoundError: No module named 'torch'\n", false, ""},
		{"named in a longer word", "bash: line 1: myconda: command not found\n", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "1.err")
			os.WriteFile(path, []byte(strings.Repeat("x", 2*hintTail)+"\n"+tc.stderr), 0o600)
			got := hint(path, "node1", tc.local)
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("hint %q, want one with %q", got, tc.want)
			}
		})
	}
}
