package inventory

import (
	"os"
	"path/filepath"
	"testing"
)

// Find looks in ./gpudispatch.yaml first, then in ~/.config. It changes
// the working directory and HOME, so it does not run in parallel.
func TestFind(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("HOME", dir)
	if got, err := Find(); err != nil || got != "" {
		t.Fatalf("nothing there: got %q, %v", got, err)
	}
	cfg := filepath.Join(dir, ".config", "gpudispatch", "inventory.yaml")
	os.MkdirAll(filepath.Dir(cfg), 0o755)
	os.WriteFile(cfg, nil, 0o644)
	if got, _ := Find(); got != cfg {
		t.Errorf("got %q, want %q", got, cfg)
	}
	os.WriteFile("gpudispatch.yaml", nil, 0o644)
	if got, _ := Find(); got != "gpudispatch.yaml" {
		t.Errorf("got %q, want ./gpudispatch.yaml first", got)
	}
}
