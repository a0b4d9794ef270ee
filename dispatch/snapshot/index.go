package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// index remembers, for one directory, the hash of each file by its size
// and modification time, as git's index does: a file that kept both is not
// read again. A time close to when the index was written is not trusted
// (a file written again within the clock's step would keep it).
type index struct {
	path    string
	written int64
	files   map[string]indexed
}

type indexed struct {
	Size  int64  `json:"size"`
	Mtime int64  `json:"mtime"`
	Exec  bool   `json:"exec"`
	Hash  string `json:"hash"`
}

type indexFile struct {
	Written int64              `json:"written"`
	Files   map[string]indexed `json:"files"`
}

// dirKey names the directory dir in a store.
func dirKey(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return hex.EncodeToString(sum[:8])
}

// saveManifest keeps s's files in its store, for Earlier; it is a cache.
func (s *Snapshot) saveManifest() {
	writeAtomic(filepath.Join(s.Store, "manifests", s.ID+".json"), s.Files)
}

// Earlier returns the files of the snapshot id taken earlier with the same
// store, by path, when the store still has its list.
func (s *Snapshot) Earlier(id string) (map[string]File, bool) {
	files, ok := readManifest(s.Store, id)
	if !ok {
		return nil, false
	}
	byPath := make(map[string]File, len(files))
	for _, f := range files {
		byPath[f.Path] = f
	}
	return byPath, true
}

// readManifest reads the list of snapshot id kept in store, in its order.
func readManifest(store, id string) ([]File, bool) {
	if len(id) != 20 || strings.Trim(id, "0123456789abcdef") != "" {
		return nil, false
	}
	b, err := os.ReadFile(filepath.Join(store, "manifests", id+".json"))
	var files []File
	if err != nil || json.Unmarshal(b, &files) != nil {
		return nil, false
	}
	return files, true
}

// openIndex reads the index of dir kept in store (none: an empty one).
func openIndex(store, dir string) *index {
	idx := &index{path: filepath.Join(store, "index", dirKey(dir)+".json")}
	var f indexFile
	if b, err := os.ReadFile(idx.path); err == nil && json.Unmarshal(b, &f) == nil {
		idx.written, idx.files = f.Written, f.Files
	}
	return idx
}

// known returns f's hash when the index has f as it is now.
func (idx *index) known(f File) (string, bool) {
	e, ok := idx.files[f.Path]
	if !ok || e.Size != f.Size || e.Mtime != f.mtime || e.Exec != f.Exec || len(e.Hash) != 64 {
		return "", false
	}
	if idx.written-f.mtime < int64(2*time.Second) {
		return "", false
	}
	return e.Hash, true
}

// save writes the index of files, hashed; it is a cache, so a failure
// only costs the next snapshot a read of every file.
func (idx *index) save(files []File) {
	f := indexFile{Written: time.Now().UnixNano(), Files: map[string]indexed{}}
	for _, file := range files {
		if file.Link == "" {
			f.Files[file.Path] = indexed{Size: file.Size, Mtime: file.mtime, Exec: file.Exec, Hash: file.Hash}
		}
	}
	writeAtomic(idx.path, f)
}

// writeAtomic writes v as JSON to path, whole or not at all; a failure is
// ignored (what it writes are caches).
func writeAtomic(path string, v any) {
	b, err := json.Marshal(v)
	if err != nil || os.MkdirAll(filepath.Dir(path), 0o700) != nil {
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

// Prune removes from store the lists of snapshots taken more than keep ago
// and the content that no remaining list names and that came in more than
// keep ago. Taking a snapshot renews its list.
func Prune(store string, keep time.Duration) {
	cutoff := time.Now().Add(-keep)
	lists, _ := filepath.Glob(filepath.Join(store, "manifests", "*.json"))
	used := map[string]bool{}
	for _, l := range lists {
		fi, err := os.Stat(l)
		if err == nil && fi.ModTime().Before(cutoff) {
			os.Remove(l)
			continue
		}
		var files []File
		if b, err := os.ReadFile(l); err == nil && json.Unmarshal(b, &files) == nil {
			for _, f := range files {
				used[f.Hash] = true
			}
		} else {
			// A list that cannot be read: keep all content.
			return
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(store, "[0-9a-f][0-9a-f]"))
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if used[e.Name()] {
				continue
			}
			if fi, err := e.Info(); err == nil && fi.ModTime().Before(cutoff) {
				os.Remove(filepath.Join(d, e.Name()))
			}
		}
	}
}
