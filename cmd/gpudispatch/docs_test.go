package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The checked-in command reference (docs/cli) is what the commands say
// now: a flag or help text changed without it fails here.
func TestCLIReferenceIsCurrent(t *testing.T) {
	dir := t.TempDir()
	var out, errs bytes.Buffer
	if err := writeDocs(newRootCommand(streams{in: &bytes.Buffer{}, out: &out, err: &errs}), dir, false); err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.Glob(filepath.Join(dir, "*.md"))
	have, _ := filepath.Glob(filepath.Join("..", "..", "docs", "cli", "*.md"))
	names := func(paths []string) []string {
		var n []string
		for _, p := range paths {
			n = append(n, filepath.Base(p))
		}
		return n
	}
	if !slices.Equal(names(want), names(have)) {
		t.Fatalf("docs/cli has %v; the commands make %v: run go run ./cmd/gpudispatch docs docs/cli", names(have), names(want))
	}
	for _, p := range want {
		a, _ := os.ReadFile(p)
		b, _ := os.ReadFile(filepath.Join("..", "..", "docs", "cli", filepath.Base(p)))
		if !bytes.Equal(a, b) {
			t.Errorf("docs/cli/%s is stale: run go run ./cmd/gpudispatch docs docs/cli", filepath.Base(p))
		}
	}
}
