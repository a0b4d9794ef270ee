package inventory

import (
	"context"
	"crypto/sha256"
	"os"
	"time"
)

// Watch calls onChange each time the file at path no longer holds what was
// loaded last (at first, the bytes whose SHA-256 is loaded; an edit made
// before Watch started counts) and its new contents have stayed the same
// for one interval, so that an editor that writes in several steps is seen
// once, whole. onChange gets the inventory the file loads to, or why it does
// not load. Watch checks every interval and returns when ctx ends.
func Watch(ctx context.Context, path string, loaded [sha256.Size]byte, interval time.Duration, onChange func(*Inventory, error)) {
	last := loaded
	var seen [sha256.Size]byte // the file at the check before, when it differed from last
	pending := false
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		data, err := os.ReadFile(path)
		if err != nil {
			data = nil // missing: a change like any other, once it lasts
		}
		now := sha256.Sum256(data)
		switch {
		case now == last:
			pending = false
		case pending && now == seen:
			pending = false
			last = now
			onChange(Load(path))
		default:
			pending, seen = true, now
		}
	}
}
