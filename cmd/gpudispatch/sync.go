package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch"
	"github.com/gpudispatch/gpudispatch/dispatch/snapshot"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// syncTo makes dir (--sync) every host's sync, in place of its workdir.
func syncTo(inv *inventory.Inventory, dir string) {
	if dir == "" {
		return
	}
	for i := range inv.Hosts {
		inv.Hosts[i].Sync, inv.Hosts[i].Workdir = dir, ""
	}
}

// takeSnapshots takes a snapshot of each directory the hosts sync, keeping
// its content in the user's cache, and says what it took unless quiet.
// What no run used for keep goes.
func takeSnapshots(ctx context.Context, w io.Writer, inv *inventory.Inventory, limit int64, keep time.Duration, quiet bool) (map[string]*snapshot.Snapshot, error) {
	snaps := map[string]*snapshot.Snapshot{}
	var store string
	for _, h := range inv.Hosts {
		if h.Sync == "" || snaps[h.Sync] != nil {
			continue
		}
		if store == "" {
			cache, err := os.UserCacheDir()
			if err != nil {
				return nil, fmt.Errorf("sync: where to keep the snapshot's content: %w", err)
			}
			store = filepath.Join(cache, "gpudispatch", "code")
		}
		s, err := snapshot.Take(ctx, h.Sync, store, limit)
		if err != nil {
			return nil, err
		}
		snaps[h.Sync] = s
		if !quiet {
			fmt.Fprintf(w, "gpudispatch: snapshot %s of %s: %s, %s\n", s.ID, s.Dir, dispatch.Count(len(s.Files), "file"), snapshot.Size(s.Bytes))
		}
	}
	if store != "" {
		snapshot.Prune(store, keep)
	}
	return snaps, nil
}
