package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/creack/pty"
)

// TestIsTerminal: only a terminal is one. /dev/null is a character device
// as a terminal is; a run whose stderr is /dev/null (2>/dev/null, or a
// program's unset stream) must not draw a live view into it.
func TestIsTerminal(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	t.Cleanup(func() { ptmx.Close(); tty.Close() })
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { null.Close() })
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	file, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { file.Close() })
	for _, c := range []struct {
		name   string
		stream any
		want   bool
	}{
		{"a terminal", tty, true},
		{"/dev/null", null, false},
		{"a pipe", w, false},
		{"a file", file, false},
		{"not a file", &bytes.Buffer{}, false},
	} {
		if got := isTerminal(c.stream); got != c.want {
			t.Errorf("isTerminal(%s) = %v, want %v", c.name, got, c.want)
		}
	}
}
