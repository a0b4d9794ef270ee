package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// index remembers, for one directory, the hash of each file by its size
// and modification time, as git's index does: a file that kept both is not
// read again. A time close to when the index was written is not trusted
// (a file written again within the clock's step would keep it). The index
// is the list of the directory's last snapshot: index/KEY names it, and
// that file's time is when it was written.
type index struct {
	path    string
	written int64
	// id names the last snapshot, whose files are list, sorted by path.
	id   string
	list []File
}

// dirKey names the directory dir in a store.
func dirKey(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return hex.EncodeToString(sum[:8])
}

// saveManifest keeps s's files in its store, for Since and Open, and
// renews it there for Prune.
func (s *Snapshot) saveManifest() {
	writeAtomic(manifest(s.Store, s.ID), encode(s.Files))
}

// listSuffix ends the name of a list this version writes. Versions
// before packs wrote ID.list, whose content was a file per hash, in the
// store's XX directories (see Prune).
const (
	listSuffix    = ".packed"
	oldListSuffix = ".list"
)

// manifest is the path of snapshot id's list in store.
func manifest(store, id string) string {
	return filepath.Join(store, "manifests", id+listSuffix)
}

// encode writes files as a list: per file, its path, "x" or "-" (Exec),
// size, modification time, hash, link, pack and offset in it (empty and 0
// for a link), each ended by a NUL byte (a path holds anything else).
func encode(files []File) []byte {
	n := 0
	for _, f := range files {
		n += len(f.Path) + len(f.Hash) + len(f.Link) + len(f.pack) + 3*20 + 10
	}
	b := make([]byte, 0, n)
	for _, f := range files {
		b = append(b, f.Path...)
		b = append(b, 0)
		if f.Exec {
			b = append(b, 'x', 0)
		} else {
			b = append(b, '-', 0)
		}
		b = strconv.AppendInt(b, f.Size, 10)
		b = append(b, 0)
		b = strconv.AppendInt(b, f.mtime, 10)
		b = append(b, 0)
		b = append(b, f.Hash...)
		b = append(b, 0)
		b = append(b, f.Link...)
		b = append(b, 0)
		b = append(b, f.pack...)
		b = append(b, 0)
		b = strconv.AppendInt(b, f.off, 10)
		b = append(b, 0)
	}
	return b
}

// decode reads a list encode wrote.
func decode(b []byte) ([]File, error) {
	list := string(b)
	var field [8]string
	files := make([]File, 0, strings.Count(list, "\x00")/len(field))
	for list != "" {
		for i := range field {
			end := strings.IndexByte(list, 0)
			if end < 0 {
				return nil, errors.New("not a list of files")
			}
			field[i], list = list[:end], list[end+1:]
		}
		f := File{Path: field[0], Exec: field[1] == "x", Hash: field[4], Link: field[5], pack: field[6]}
		var err1, err2, err3 error
		f.Size, err1 = strconv.ParseInt(field[2], 10, 64)
		f.mtime, err2 = strconv.ParseInt(field[3], 10, 64)
		f.off, err3 = strconv.ParseInt(field[7], 10, 64)
		content := f.Link == ""
		if err1 != nil || err2 != nil || err3 != nil || f.Path == "" || content != (len(f.Hash) == 64) ||
			content != validPack(f.pack) || f.off < 0 || !content && (f.Size != 0 || f.off != 0) {
			return nil, fmt.Errorf("a bad entry in a list of files: %q", field[0])
		}
		files = append(files, f)
	}
	return files, nil
}

// Diff is how a snapshot differs from one taken earlier of its directory.
type Diff struct {
	// Changed are the files that are new or differ: another content, mode
	// or link target.
	Changed []File
	// Gone are the earlier snapshot's paths that this one has not.
	Gone []string
}

// Since returns how s differs from the snapshot id taken earlier with the
// same store, when the store still has that one's list. It is worked out
// once per id: every machine that has id asks.
func (s *Snapshot) Since(id string) (Diff, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := s.since[id]; ok {
		return d.Diff, d.ok
	}
	var d since
	if files, ok := readManifest(s.Store, id); ok {
		d = since{diff(s.Files, files), true}
	}
	s.remember(id, d)
	return d.Diff, d.ok
}

// remember keeps what Since found for id.
func (s *Snapshot) remember(id string, d since) {
	if s.since == nil {
		s.since = map[string]since{}
	}
	s.since[id] = d
}

// since is what Since found for one earlier ID: ok says its list was
// there.
type since struct {
	Diff
	ok bool
}

// diff is how now differs from earlier (see Diff): one pass over both,
// sorted by path (a list written before they were is sorted here).
func diff(now, earlier []File) Diff {
	now, earlier = byPath(now), byPath(earlier)
	var d Diff
	i, j := 0, 0
	for i < len(now) || j < len(earlier) {
		switch {
		case j == len(earlier) || i < len(now) && now[i].Path < earlier[j].Path:
			d.Changed = append(d.Changed, now[i])
			i++
		case i == len(now) || now[i].Path > earlier[j].Path:
			d.Gone = append(d.Gone, earlier[j].Path)
			j++
		default:
			if f, e := now[i], earlier[j]; e.Blob() != f.Blob() || e.Link != f.Link {
				d.Changed = append(d.Changed, f)
			}
			i, j = i+1, j+1
		}
	}
	return d
}

// pathOrder orders files by path, as lists are.
func pathOrder(a, b File) int { return strings.Compare(a.Path, b.Path) }

// byPath returns files sorted by path: files itself when they are.
func byPath(files []File) []File {
	if slices.IsSortedFunc(files, pathOrder) {
		return files
	}
	return slices.SortedFunc(slices.Values(files), pathOrder)
}

// readManifest reads the list of snapshot id kept in store, in its order.
func readManifest(store, id string) ([]File, bool) {
	if len(id) != 20 || strings.Trim(id, "0123456789abcdef") != "" {
		return nil, false
	}
	b, err := os.ReadFile(manifest(store, id))
	if err != nil {
		return nil, false
	}
	files, err := decode(b)
	return files, err == nil
}

// openIndex reads the index of dir kept in store (none: an empty one).
func openIndex(store, dir string) *index {
	idx := &index{path: filepath.Join(store, "index", dirKey(dir))}
	b, err := os.ReadFile(idx.path)
	fi, serr := os.Stat(idx.path)
	if err != nil || serr != nil {
		return idx
	}
	id := strings.TrimSpace(string(b))
	files, ok := readManifest(store, id)
	if !ok || !packsThere(store, files) {
		return idx
	}
	idx.written, idx.id, idx.list = fi.ModTime().UnixNano(), id, byPath(files)
	return idx
}

// packsThere says whether store has every pack files name: an index
// whose content was removed by hand is not used (its files are read again,
// and packed anew).
func packsThere(store string, files []File) bool {
	seen := map[string]bool{"": true}
	for _, f := range files {
		if seen[f.pack] {
			continue
		}
		seen[f.pack] = true
		if _, err := os.Stat(packPath(store, f.pack)); err != nil {
			return false
		}
	}
	return true
}

// pair returns, for each of files (sorted by path), the index's entry of
// the same path, or nil.
func (idx *index) pair(files []File) []*File {
	entries := make([]*File, len(files))
	j := 0
	for i, f := range files {
		for j < len(idx.list) && idx.list[j].Path < f.Path {
			j++
		}
		if j < len(idx.list) && idx.list[j].Path == f.Path {
			entries[i] = &idx.list[j]
		}
	}
	return entries
}

// known returns f's hash when e, the index's entry of its path (or nil),
// has f as it is now.
func (idx *index) known(f File, e *File) (string, bool) {
	if e == nil || e.Size != f.Size || e.mtime != f.mtime || e.Exec != f.Exec || e.Link != "" {
		return "", false
	}
	if idx.written-f.mtime < int64(2*time.Second) {
		return "", false
	}
	return e.Hash, true
}

// save makes the snapshot id, whose list is saved, the index; it is a
// cache, so a failure only costs the next snapshot a read of every file.
func (idx *index) save(id string) {
	writeAtomic(idx.path, []byte(id+"\n"))
}

// writeAtomic writes b to path, whole or not at all; a failure is ignored
// (what it writes are caches).
func writeAtomic(path string, b []byte) {
	if os.MkdirAll(filepath.Dir(path), 0o700) != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "tmp-")
	if err != nil {
		return
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil && cerr == nil {
		os.Rename(tmp.Name(), path)
	}
	os.Remove(tmp.Name())
}

// PruneOften prunes store (see Prune) unless it was pruned within a tenth
// of keep: a prune reads every list and looks at all the content, and each
// run takes snapshots.
func PruneOften(store string, keep time.Duration) {
	mark := filepath.Join(store, ".pruned")
	if fi, err := os.Stat(mark); err == nil && time.Since(fi.ModTime()) < keep/10 {
		return
	}
	if f, err := os.Create(mark); err == nil {
		f.Close()
	}
	Prune(store, keep)
}

// Prune removes from store the lists of snapshots taken more than keep ago
// and the packs that no remaining list names and that were written more
// than keep ago. Taking a snapshot renews its list. An index names a list,
// so the content it knows is never removed while it stands. A pack is kept
// whole while a list names any of it.
func Prune(store string, keep time.Duration) {
	cutoff := time.Now().Add(-keep)
	lists, _ := filepath.Glob(filepath.Join(store, "manifests", "*"))
	used := map[string]bool{}
	loose := false
	for _, l := range lists {
		fi, err := os.Stat(l)
		if err == nil && fi.ModTime().Before(cutoff) {
			os.Remove(l)
			continue
		}
		if strings.HasSuffix(l, oldListSuffix) {
			loose = true
		}
		if !strings.HasSuffix(l, listSuffix) {
			continue // another version's, or a write under way
		}
		b, err := os.ReadFile(l)
		files, derr := decode(b)
		if err != nil || derr != nil {
			// A list that cannot be read: keep all content.
			return
		}
		for _, f := range files {
			used[f.pack] = true
		}
	}
	old := func(path string) bool {
		fi, err := os.Lstat(path)
		return err == nil && fi.ModTime().Before(cutoff)
	}
	packs, _ := filepath.Glob(filepath.Join(store, packDir, "*"))
	for _, p := range packs {
		if !used[filepath.Base(p)] && old(p) {
			os.Remove(p)
		}
	}
	if loose {
		// An earlier version's list stands: it may name any of the
		// content that version kept a file per hash.
		return
	}
	blobs, _ := filepath.Glob(filepath.Join(store, "[0-9a-f][0-9a-f]", "*"))
	for _, b := range blobs {
		if old(b) {
			os.Remove(b)
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(store, "[0-9a-f][0-9a-f]"))
	for _, d := range dirs {
		os.Remove(d) // when empty
	}
}
