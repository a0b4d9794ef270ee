package main

import (
	"context"
	"fmt"
	"io"
	"math"
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

// codeStore is where this machine keeps the content of the snapshots it
// takes: the user's cache, refused when another user could write there.
func codeStore() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("sync: where to keep the snapshot's content: %w", err)
	}
	store := filepath.Join(cache, "gpudispatch", "code")
	if err := dispatch.CheckCacheDir(store); err != nil {
		return "", fmt.Errorf("sync: %w", err)
	}
	return store, nil
}

// snapshots takes a run's snapshots of code, each directory once.
type snapshots struct {
	limit int64
	keep  time.Duration
	// w is told what was taken (nil: nothing is said).
	w     io.Writer
	taken map[string]*snapshot.Snapshot
}

// forHosts takes a snapshot of each directory inv's hosts sync that has
// none yet, keeping its content in the user's cache, and returns the new
// ones. What no run used for keep goes from the cache then.
func (ss *snapshots) forHosts(ctx context.Context, inv *inventory.Inventory) (map[string]*snapshot.Snapshot, error) {
	added := map[string]*snapshot.Snapshot{}
	for _, h := range inv.Hosts {
		if h.Sync == "" || ss.taken[h.Sync] != nil || added[h.Sync] != nil {
			continue
		}
		s, err := ss.take(ctx, h.Sync)
		if err != nil {
			return nil, err
		}
		added[h.Sync] = s
	}
	if ss.taken == nil {
		ss.taken = map[string]*snapshot.Snapshot{}
	}
	for dir, s := range added {
		ss.taken[dir] = s
	}
	return added, nil
}

// take takes a snapshot of dir, says so, and prunes the cache now and
// then.
func (ss *snapshots) take(ctx context.Context, dir string) (*snapshot.Snapshot, error) {
	store, err := codeStore()
	if err != nil {
		return nil, err
	}
	s, err := snapshot.Take(ctx, dir, store, ss.limit)
	if err != nil {
		return nil, err
	}
	if ss.w != nil {
		fmt.Fprintf(ss.w, "gpudispatch: snapshot %s of %s: %s, %s\n", s.ID, s.Dir, dispatch.Count(len(s.Files), "file"), snapshot.Size(s.Bytes))
	}
	snapshot.PruneOften(store, ss.keep)
	return s, nil
}

// takeDeps takes a snapshot of every file under dir, the files the jobs a
// job waited for brought back (dispatch.Options.TakeDeps), each job's
// already capped by --return-limit.
func takeDeps(ctx context.Context, dir string) (*snapshot.Snapshot, error) {
	store, err := codeStore()
	if err != nil {
		return nil, err
	}
	return snapshot.TakeAll(ctx, dir, store, math.MaxInt64)
}

// openSnapshot opens a snapshot a submit took (dispatch.Options.OpenSnapshot).
func openSnapshot(id, dir string) (*snapshot.Snapshot, error) {
	store, err := codeStore()
	if err != nil {
		return nil, err
	}
	return snapshot.Open(store, id, dir)
}
