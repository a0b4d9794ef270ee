package dispatch

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A submitter's environment is kept in a file of the user's alone, once
// per content, and read back as it was: values with newlines, '=' and
// nothing included.
func TestKeepEnv(t *testing.T) {
	dir := t.TempDir()
	env := []string{"HF_TOKEN=hf_secret", "MULTI=a\nb", "EQ=x=y", "EMPTY="}
	name, err := keepEnv(dir, env)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := keepEnv(dir, env); again != name {
		t.Errorf("the same environment kept twice: %s, %s", name, again)
	}
	fi, err := os.Stat(filepath.Join(dir, envDir, name))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the kept file: %v, %v; want mode 0600", fi, err)
	}
	got, err := readEnv(dir, name)
	if err != nil || !slices.Equal(got, env) {
		t.Errorf("read back %q, %v; want %q", got, err, env)
	}
	if _, err := readEnv(dir, "../journal.jsonl"); err == nil {
		t.Errorf("a name out of the directory was read")
	}
}
