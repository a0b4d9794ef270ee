package snapshot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkTakeAgain takes a snapshot of 10,000 files its store knows
// already (the second snapshot of a sweep, one file edited).
func BenchmarkTakeAgain(b *testing.B) {
	dir, store := b.TempDir(), b.TempDir()
	for i := range 10_000 {
		p := filepath.Join(dir, fmt.Sprintf("d%02d/f%05d.bin", i%50, i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(p), 0o644); err != nil {
			b.Fatal(err)
		}
		old := time.Now().Add(-time.Hour)
		os.Chtimes(p, old, old)
	}
	if _, err := Take(context.Background(), dir, store, DefaultLimit); err != nil {
		b.Fatal(err)
	}
	for i := 0; b.Loop(); i++ {
		os.WriteFile(filepath.Join(dir, "d00/f00000.bin"), fmt.Appendf(nil, "%d", i), 0o644)
		if _, err := Take(context.Background(), dir, store, DefaultLimit); err != nil {
			b.Fatal(err)
		}
	}
}
