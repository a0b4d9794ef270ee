package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// write makes files (path: content; "->" makes a link) under dir.
func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if target, ok := strings.CutPrefix(content, "->"); ok {
			err = os.Symlink(target, full)
		} else {
			err = os.WriteFile(full, []byte(content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func gitInit(t *testing.T, dir string, track ...string) {
	t.Helper()
	for _, args := range [][]string{{"init", "-q"}, append([]string{"add", "--"}, track...)} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
}

// What a snapshot holds: git's files where there is a work tree (ignored
// ones left out, .git never shipped, untracked ones in), every file
// elsewhere, minus .gpdignore in both; in-tree links kept.
func TestTakeLists(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is not installed: the ignore rules are git's")
	}
	// Many directories, read at once: every file, sorted by path.
	wide, wideWant := map[string]string{}, []string{}
	for i := range 600 {
		p := fmt.Sprintf("d%d/e%d/f%03d.py", i%7, i%5, i)
		wide[p] = "x"
		wideWant = append(wideWant, p)
	}
	slices.Sort(wideWant)
	// Names that start with a directory's name, before and after it in
	// path order ('-' and '.' sort before '/', '0' after it): a walk puts
	// each directory's lists together in that order, not by name.
	near := map[string]string{}
	for _, p := range []string{"a/x", "a.b/x", "a.txt", "a0", "a-/x", "ab", "a/b/c", "a/b.c", "a/b0", "a/b-/d", "a/b/c.d/e", "a/b/c-"} {
		near[p] = "x"
	}
	nearWant := slices.Sorted(maps.Keys(near))
	for _, tc := range []struct {
		name  string
		files map[string]string
		git   []string // tracked: the directory is a git work tree
		sub   string   // the snapshot's directory in it ("": its top)
		want  []string
	}{
		{
			name:  "plain directory",
			files: map[string]string{"a.py": "a", "sub/b.py": "b", "link": "->sub/b.py", ".hidden": "h"},
			want:  []string{".hidden", "a.py", "link", "sub/b.py"},
		},
		{
			name:  "plain directory, sorted by path",
			files: map[string]string{"a/b.py": "b", "a-c.py": "c", "a.py": "a", "a/z/y.py": "y"},
			want:  []string{"a-c.py", "a.py", "a/b.py", "a/z/y.py"},
		},
		{
			name:  "plain directory, names that start with a directory's",
			files: near,
			want:  nearWant,
		},
		{
			name:  "plain directory, many directories",
			files: wide,
			want:  wideWant,
		},
		{
			name:  "directory in a git work tree",
			files: map[string]string{".gitignore": "*.log\n", "sub/a.py": "a", "sub/x.log": "l", "top.py": "t"},
			git:   []string{".gitignore", "sub/a.py"},
			sub:   "sub",
			want:  []string{"a.py"},
		},
		{
			name:  "plain directory with a .git that git cannot read",
			files: map[string]string{"a.py": "a", ".git/HEAD": "not a ref", ".git/config": "x"},
			want:  []string{"a.py"},
		},
		{
			name:  "plain directory with .gpdignore",
			files: map[string]string{"a.py": "a", "data/big.bin": "x", "ckpt/1.pt": "x", ".gpdignore": "data/\n*.pt\n"},
			want:  []string{".gpdignore", "a.py"},
		},
		{
			name:  "git work tree",
			files: map[string]string{"a.py": "a", "new.py": "n", "out.log": "l", ".gitignore": "*.log\n", "src/m.py": "m"},
			git:   []string{"a.py", ".gitignore", "src/m.py"},
			want:  []string{".gitignore", "a.py", "new.py", "src/m.py"},
		},
		{
			name:  "git work tree with .gpdignore over tracked files",
			files: map[string]string{"a.py": "a", "data/d.csv": "d", ".gpdignore": "data/\n"},
			git:   []string{"a.py", "data/d.csv", ".gpdignore"},
			want:  []string{".gpdignore", "a.py"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, tc.files)
			if tc.git != nil {
				gitInit(t, dir, tc.git...)
			}
			s, err := Take(context.Background(), filepath.Join(dir, tc.sub), t.TempDir(), DefaultLimit)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range s.Files {
				got = append(got, f.Path)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("shipped %q, want %q", got, tc.want)
			}
		})
	}
}

// The ID is the content's: the same tree taken twice, or elsewhere, has
// the same; one byte, a mode or a name changed gives another. The store
// keeps the content as it was.
func TestTakeID(t *testing.T) {
	files := map[string]string{"a.py": "a", "b/c.py": "c"}
	id := func(edit func(dir string)) string {
		dir := t.TempDir()
		write(t, dir, files)
		if edit != nil {
			edit(dir)
		}
		s, err := Take(context.Background(), dir, t.TempDir(), DefaultLimit)
		if err != nil {
			t.Fatal(err)
		}
		return s.ID
	}
	base := id(nil)
	if again := id(nil); again != base {
		t.Errorf("the same tree has IDs %s and %s", base, again)
	}
	for name, edit := range map[string]func(string){
		"content": func(d string) { os.WriteFile(filepath.Join(d, "a.py"), []byte("A"), 0o644) },
		"mode":    func(d string) { os.Chmod(filepath.Join(d, "a.py"), 0o755) },
		"name":    func(d string) { os.Rename(filepath.Join(d, "a.py"), filepath.Join(d, "z.py")) },
	} {
		if got := id(edit); got == base {
			t.Errorf("a tree with its %s changed has the same ID", name)
		}
	}
	dir, store := t.TempDir(), t.TempDir()
	write(t, dir, files)
	s, err := Take(context.Background(), dir, store, DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "a.py"), []byte("edited"), 0o644)
	if got := content(t, s, s.Files[0]); got != "a" {
		t.Errorf("the store's copy of a.py reads %q after the edit; want what it was, %q", got, "a")
	}
}

// content reads f's content from s's store ("" when it cannot).
func content(t *testing.T, s *Snapshot, f File) string {
	t.Helper()
	c := s.Contents()
	defer c.Close()
	r, err := c.Open(f)
	if err != nil {
		return ""
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// age sets the time of every list and pack in store to long ago.
func age(t *testing.T, store string, long time.Time) {
	t.Helper()
	for _, pattern := range []string{"manifests/*", "packs/*"} {
		paths, _ := filepath.Glob(filepath.Join(store, pattern))
		for _, p := range paths {
			if err := os.Chtimes(p, long, long); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Another process opens a snapshot by its ID from the same store: the same
// files, in the same order (by path), and the same content.
// A list that is gone or not the snapshot's is refused.
func TestOpen(t *testing.T) {
	dir, store := t.TempDir(), t.TempDir()
	write(t, dir, map[string]string{"a.txt": "1", "a/b": "2", "a-c": "3", "z": "->a.txt"})
	s, err := Take(context.Background(), dir, store, DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Open(store, s.ID, s.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != s.ID || got.Key != s.Key || got.Bytes != s.Bytes || len(got.Files) != len(s.Files) {
		t.Errorf("opened %+v; took %+v", got, s)
	}
	for i := range s.Files {
		if got.Files[i].Path != s.Files[i].Path || got.Files[i].Hash != s.Files[i].Hash || content(t, got, got.Files[i]) != content(t, s, s.Files[i]) {
			t.Errorf("file %d: %+v, took %+v", i, got.Files[i], s.Files[i])
		}
	}
	if _, err := Open(store, "0123456789abcdef0123", dir); err == nil || !strings.Contains(err.Error(), "no longer in") {
		t.Errorf("a snapshot never taken: %v", err)
	}
	os.WriteFile(manifest(store, s.ID), encode([]File{{Path: "x", Size: 1, Hash: strings.Repeat("0", 64), pack: "0123456789abcdef"}}), 0o600)
	if _, err := Open(store, s.ID, dir); err == nil || !strings.Contains(err.Error(), "not that snapshot's") {
		t.Errorf("a list that is not the snapshot's: %v", err)
	}
}

// What is refused, with what a user acts on.
func TestTakeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		limit int64
		want  []string
	}{
		{"link out of the tree", map[string]string{"a.py": "a", "data": "->../../shared/data"}, DefaultLimit,
			[]string{"data is a symbolic link to ../../shared/data, out of", ".gpdignore"}},
		{"absolute link", map[string]string{"a.py": "a", "env": "->/opt/env"}, DefaultLimit,
			[]string{"env is a symbolic link to /opt/env"}},
		// Judged where it leads, not by its text: self is the tree itself.
		{"out through a link", map[string]string{"a.py": "a", "self": "->.", "esc": "->self/../secret"}, DefaultLimit,
			[]string{"esc is a symbolic link to self/../secret, out of"}},
		{"out through a link in a directory", map[string]string{"a.py": "a", "d/up": "->..", "d/x": "->up/../secret"}, DefaultLimit,
			[]string{"x is a symbolic link to up/../secret, out of"}},
		{"over the limit", map[string]string{"small": "x", "big.bin": strings.Repeat("x", 3000), "mid.bin": strings.Repeat("x", 2000)}, 4000,
			[]string{"holds 4.9 KiB to ship, over the limit of 3.9 KiB (--sync-limit)", "the largest: big.bin (2.9 KiB), mid.bin (2.0 KiB), small (1 B)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, tc.files)
			_, err := Take(context.Background(), dir, t.TempDir(), tc.limit)
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v; want it to say %q", err, w)
				}
			}
		})
	}
	if _, err := Take(context.Background(), filepath.Join(t.TempDir(), "nope"), t.TempDir(), DefaultLimit); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("a directory that does not exist: %v", err)
	}
}

// The parsers of this package's input are git's; what Take itself reads
// is link targets: fuzz that a target it accepts stays in the tree.
func FuzzInside(f *testing.F) {
	for _, seed := range [][2]string{{"a", "b"}, {"x/y", "../z"}, {"x/y", "../../z"}, {"a", "/etc"}, {"a/b/c", "./../.."}, {"a", ".."}} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, p, link string) {
		if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "..") {
			return
		}
		if !inside(p, link) {
			return
		}
		to := filepath.Join("/root-of-tree", filepath.Dir(p), link)
		if !strings.HasPrefix(to, "/root-of-tree/") && to != "/root-of-tree" {
			t.Errorf("inside(%q, %q) but it leads to %s", p, link, to)
		}
	})
}

// A second snapshot takes unchanged files from the index without reading
// them, and still sees each edit: a changed file (same size, new time) gets
// its new hash, the others keep theirs. An index whose list Prune removed
// is not used: every file is read again, into the store.
func TestTakeIndex(t *testing.T) {
	dir, store := t.TempDir(), t.TempDir()
	write(t, dir, map[string]string{"a.py": "aaaa", "b.py": "bbbb", "c.py": "cccc"})
	old := time.Now().Add(-time.Hour)
	for _, name := range []string{"a.py", "b.py", "c.py"} {
		os.Chtimes(filepath.Join(dir, name), old, old)
	}
	first, err := Take(context.Background(), dir, store, DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	// b.py rewritten behind the index's back (same size, its old time
	// put back): a second snapshot that read it would see "BBBB".
	os.WriteFile(filepath.Join(dir, "b.py"), []byte("BBBB"), 0o644)
	os.Chtimes(filepath.Join(dir, "b.py"), old, old)
	os.WriteFile(filepath.Join(dir, "a.py"), []byte("AAAA"), 0o644)
	second, err := Take(context.Background(), dir, store, DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	if second.Files[0].Hash == first.Files[0].Hash || second.Files[1].Hash != first.Files[1].Hash || second.Files[2].Hash != first.Files[2].Hash {
		t.Errorf("hashes %v then %v: want a.py's alone to change (b.py not read)", first.Files, second.Files)
	}
	// Both lists and their content pruned: the index names a list that is
	// gone, and the next snapshot puts the content back.
	age(t, store, time.Now().Add(-48*time.Hour))
	Prune(store, 24*time.Hour)
	third, err := Take(context.Background(), dir, store, DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	if third.Files[1].Hash == first.Files[1].Hash {
		t.Errorf("b.py was not read again after the index's list went")
	}
	for _, f := range third.Files {
		if got, want := content(t, third, f), map[string]string{"a.py": "AAAA", "b.py": "BBBB", "c.py": "cccc"}[f.Path]; got != want {
			t.Errorf("the store has %q for %s, want %q", got, f.Path, want)
		}
	}
}

// How a snapshot differs from the directory's last one is worked out as
// it is taken, from the index at hand (the last one's list is not read
// again): a changed file is changed, not gone; a file that became a
// directory is gone, and its files are new.
func TestSinceLast(t *testing.T) {
	dir, store := t.TempDir(), t.TempDir()
	write(t, dir, map[string]string{"same.py": "s", "edit.py": "e1", "gone.py": "g", "x": "file"})
	first, err := Take(context.Background(), dir, store, DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "gone.py"))
	os.Remove(filepath.Join(dir, "x"))
	write(t, dir, map[string]string{"edit.py": "e2", "new.py": "n", "x/y.py": "y"})
	second, err := Take(context.Background(), dir, store, DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(manifest(store, first.ID)); err != nil {
		t.Fatal(err)
	}
	d, ok := second.Since(first.ID)
	if !ok {
		t.Fatal("no differences from the last snapshot once its list went")
	}
	var changed []string
	for _, f := range d.Changed {
		changed = append(changed, f.Path)
	}
	if want := []string{"edit.py", "new.py", "x/y.py"}; !slices.Equal(changed, want) {
		t.Errorf("changed %q, want %q", changed, want)
	}
	if want := []string{"gone.py", "x"}; !slices.Equal(d.Gone, want) {
		t.Errorf("gone %q, want %q", d.Gone, want)
	}
}

// diff pairs the files of two lists by path, in whatever order a list was
// written (the versions before this one did not sort a plain directory's).
func TestDiff(t *testing.T) {
	h := func(c byte) string { return strings.Repeat(string(c), 64) }
	for _, tc := range []struct {
		name          string
		now, earlier  []File
		changed, gone []string
	}{
		{"same", []File{{Path: "a", Hash: h('1')}}, []File{{Path: "a", Hash: h('1')}}, nil, nil},
		{"content, mode, link", []File{{Path: "a", Hash: h('2')}, {Path: "b", Hash: h('1'), Exec: true}, {Path: "c", Link: "b"}},
			[]File{{Path: "a", Hash: h('1')}, {Path: "b", Hash: h('1')}, {Path: "c", Link: "a"}}, []string{"a", "b", "c"}, nil},
		{"new and gone", []File{{Path: "b", Hash: h('1')}, {Path: "d", Hash: h('1')}},
			[]File{{Path: "a", Hash: h('1')}, {Path: "b", Hash: h('1')}, {Path: "c", Hash: h('1')}}, []string{"d"}, []string{"a", "c"}},
		{"an earlier list in walk order", []File{{Path: "a-c", Hash: h('1')}, {Path: "a/b", Hash: h('2')}},
			[]File{{Path: "a/b", Hash: h('1')}, {Path: "a-c", Hash: h('1')}, {Path: "a.py", Hash: h('1')}}, []string{"a/b"}, []string{"a.py"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := diff(tc.now, tc.earlier)
			var changed []string
			for _, f := range d.Changed {
				changed = append(changed, f.Path)
			}
			if !slices.Equal(changed, tc.changed) || !slices.Equal(d.Gone, tc.gone) {
				t.Errorf("changed %q, gone %q; want %q, %q", changed, d.Gone, tc.changed, tc.gone)
			}
		})
	}
}

// Prune removes the lists of snapshots older than keep and the packs no
// other list names; a snapshot taken again is renewed, and so is the
// content it shares with an older one.
func TestPrune(t *testing.T) {
	store := t.TempDir()
	old, kept := t.TempDir(), t.TempDir()
	write(t, old, map[string]string{"only-old.py": "old", "shared.py": "s"})
	write(t, kept, map[string]string{"new.py": "new", "shared.py": "s"})
	a, err := Take(context.Background(), old, store, DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Take(context.Background(), kept, store, DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	age(t, store, time.Now().Add(-48*time.Hour))
	// b taken again: its list is renewed, its pack is not rewritten.
	if b, err = Take(context.Background(), kept, store, DefaultLimit); err != nil {
		t.Fatal(err)
	}
	// A pack being written, which no list names yet.
	fresh := filepath.Join(store, packDir, "0123456789abcdef")
	os.WriteFile(fresh, []byte("x"), 0o600)
	Prune(store, 24*time.Hour)
	for _, f := range a.Files {
		if got := content(t, a, f); got != "" {
			t.Errorf("%s of the old snapshot is still there: %q", f.Path, got)
		}
	}
	for _, f := range b.Files {
		if got := content(t, b, f); got == "" {
			t.Errorf("%s of the recent snapshot was removed", f.Path)
		}
	}
	if _, ok := b.Since(a.ID); ok {
		t.Errorf("the old snapshot's list is still there")
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a new pack no list names yet was removed: %v", err)
	}
}

// Content an earlier version kept a file per hash goes once it is old,
// unless a list of that version still stands (it may name any of it).
func TestPruneLoose(t *testing.T) {
	long := time.Now().Add(-48 * time.Hour)
	for _, oldList := range []bool{false, true} {
		store := t.TempDir()
		blob := filepath.Join(store, "ab", strings.Repeat("ab", 32))
		os.MkdirAll(filepath.Dir(blob), 0o700)
		os.WriteFile(blob, []byte("x"), 0o400)
		os.Chtimes(blob, long, long)
		if oldList {
			os.MkdirAll(filepath.Join(store, "manifests"), 0o700)
			os.WriteFile(filepath.Join(store, "manifests", "0123456789abcdef0123"+oldListSuffix), nil, 0o600)
		}
		Prune(store, 24*time.Hour)
		if _, err := os.Stat(blob); (err == nil) != oldList {
			t.Errorf("with a list of the earlier version %t: the old content kept: %t", oldList, err == nil)
		}
		if _, err := os.Stat(filepath.Dir(blob)); !oldList && err == nil {
			t.Errorf("the empty directory of the old content stays")
		}
	}
}

// PruneOften prunes a store at most once in a tenth of the keep time.
func TestPruneOften(t *testing.T) {
	store := t.TempDir()
	long := time.Now().Add(-48 * time.Hour)
	stale := func(name string) string {
		dir := t.TempDir()
		write(t, dir, map[string]string{name: name})
		s, err := Take(context.Background(), dir, store, DefaultLimit)
		if err != nil {
			t.Fatal(err)
		}
		os.Chtimes(manifest(store, s.ID), long, long)
		return manifest(store, s.ID)
	}
	gone := func(list string) bool {
		_, err := os.Stat(list)
		return errors.Is(err, fs.ErrNotExist)
	}
	first := stale("a.py")
	PruneOften(store, 24*time.Hour)
	second := stale("b.py")
	PruneOften(store, 24*time.Hour)
	if !gone(first) || gone(second) {
		t.Errorf("pruned: the first list %t, the second %t; want the first alone (pruned again at once)", gone(first), gone(second))
	}
	hours := time.Now().Add(-3 * time.Hour)
	os.Chtimes(filepath.Join(store, ".pruned"), hours, hours)
	PruneOften(store, 24*time.Hour)
	if !gone(second) {
		t.Errorf("not pruned again 3 hours after the last prune (keep: a day)")
	}
}

// A list of files reads back as it was written, whatever the paths hold
// but NUL; and no bytes make decode panic.
func FuzzDecode(f *testing.F) {
	hash := strings.Repeat("ab", 32)
	f.Add([]byte(nil))
	pack := "0123456789abcdef"
	f.Add(encode([]File{{Path: "a.py", Size: 3, mtime: 1, Hash: hash, pack: pack}, {Path: "l", Link: "a.py"}}))
	f.Add(encode([]File{{Path: "x\ny z", Exec: true, Size: 1 << 40, mtime: -5, Hash: hash, pack: pack, off: 1 << 33}}))
	f.Add([]byte("a\x00-\x001\x002\x00\x00\x00\x00\x000\x00"))
	f.Add([]byte("a\x00-\x00x\x002\x00" + hash + "\x00\x00" + pack + "\x000\x00"))
	f.Add([]byte("a\x00-\x001\x002\x00" + hash + "\x00\x00../../x\x000\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		files, err := decode(b)
		if err != nil {
			return
		}
		if again, err := decode(encode(files)); err != nil || !slices.Equal(again, files) {
			t.Errorf("%q decoded to %+v, which reads back as %+v, %v", b, files, again, err)
		}
	})
}

// The content a snapshot's store lacks goes into one pack per snapshot:
// a second snapshot packs only what changed, and content the store has
// (a file renamed, two files alike) is not packed again.
func TestTakePacks(t *testing.T) {
	dir, store := t.TempDir(), t.TempDir()
	files := map[string]string{}
	for i := range 50 {
		files[fmt.Sprintf("d%d/f%02d.py", i%3, i)] = fmt.Sprintf("content %02d\n", i)
	}
	files["twin.py"] = "content 07\n"
	write(t, dir, files)
	packs := func() (sizes []int64) {
		paths, _ := filepath.Glob(filepath.Join(store, packDir, "*"))
		for _, p := range paths {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			sizes = append(sizes, fi.Size())
		}
		slices.Sort(sizes)
		return sizes
	}
	first, err := Take(context.Background(), dir, store, DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := packs(), []int64{50 * int64(len("content 00\n"))}; !slices.Equal(got, want) {
		t.Errorf("after the first snapshot, packs of %v bytes; want %v (twin.py's content once)", got, want)
	}
	loose, _ := filepath.Glob(filepath.Join(store, "[0-9a-f][0-9a-f]"))
	if len(loose) != 0 {
		t.Errorf("content kept a file per hash: %v", loose)
	}
	os.Rename(filepath.Join(dir, "d0/f00.py"), filepath.Join(dir, "renamed.py"))
	write(t, dir, map[string]string{"d1/f01.py": "edited"})
	second, err := Take(context.Background(), dir, store, DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := packs(), []int64{int64(len("edited")), 50 * int64(len("content 00\n"))}; !slices.Equal(got, want) {
		t.Errorf("after the second snapshot, packs of %v bytes; want %v (the edited file alone)", got, want)
	}
	for _, s := range []*Snapshot{first, second} {
		for _, f := range s.Files {
			want := files[f.Path]
			switch f.Path {
			case "renamed.py":
				want = files["d0/f00.py"]
			case "d1/f01.py":
				if s == second {
					want = "edited"
				}
			}
			if got := content(t, s, f); got != want {
				t.Errorf("snapshot %s: %s reads %q, want %q", s.ID, f.Path, got, want)
			}
		}
	}
}

// A file whose length is not the one listed when its content is read
// (written to meanwhile) stops the snapshot, named; whether it is read
// whole or copied as it is read, it never takes more than its range of
// the pack.
func TestKeepChanged(t *testing.T) {
	dir, store := t.TempDir(), t.TempDir()
	small, large := "small.py", "large.bin"
	write(t, dir, map[string]string{small: "small", large: strings.Repeat("x", smallFile+10)})
	for _, tc := range []struct {
		name  string
		path  string
		delta int64 // listed size minus real size
	}{
		{"small, grew", small, -1},
		{"small, shrank", small, 1},
		{"large, grew", large, -5},
		{"large, shrank", large, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fi, err := os.Lstat(filepath.Join(dir, tc.path))
			if err != nil {
				t.Fatal(err)
			}
			s := &Snapshot{Dir: dir, Store: store}
			f := File{Path: tc.path, Size: fi.Size() + tc.delta, mtime: fi.ModTime().UnixNano()}
			p := newPacker(store, nil)
			err = s.keep(&f, &index{}, nil, p)
			p.close()
			if err == nil || !strings.Contains(err.Error(), tc.path+" changed while the snapshot was taken") {
				t.Errorf("got %v, want the file named as changed", err)
			}
			if p.name == "" {
				return
			}
			packed, err := os.Stat(packPath(store, p.name))
			if err != nil {
				t.Fatal(err)
			}
			if packed.Size() > f.Size {
				t.Errorf("the pack holds %d bytes for a file listed as %d", packed.Size(), f.Size)
			}
		})
	}
}

// appendQuote quotes as strconv.AppendQuote does, whatever the bytes (an
// ID must not change with how it is worked out).
func FuzzAppendQuote(f *testing.F) {
	for _, s := range []string{"", "a/b.py", `say "hi"`, `back\slash`, "tab\there", "é.py", "\xff\xfe", "~", "\x7f", " lead"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := appendQuote([]byte("x"), s), strconv.AppendQuote([]byte("x"), s); string(got) != string(want) {
			t.Errorf("appendQuote(%q) = %s, want %s", s, got, want)
		}
	})
}

// A snapshot that fails as its content is copied leaves no pack behind:
// no list would name it for the keep time.
func TestHashFailsLeavesNoPack(t *testing.T) {
	dir, store := t.TempDir(), t.TempDir()
	write(t, dir, map[string]string{"a.py": "aaaa", "b.py": "bbbb"})
	files, err := walk(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	files[1].Size++ // b.py "changed" after it was listed
	s := &Snapshot{Dir: dir, Store: store, Files: files}
	if err := s.hash(context.Background(), &index{}); err == nil || !strings.Contains(err.Error(), "b.py changed") {
		t.Fatalf("got %v, want b.py named as changed", err)
	}
	if packs, _ := filepath.Glob(filepath.Join(store, packDir, "*")); len(packs) != 0 {
		t.Errorf("packs left: %v", packs)
	}
}

// A pack removed by hand is not pointed to again: the next snapshot reads
// the files and packs them anew.
func TestPackRemovedByHand(t *testing.T) {
	dir, store := t.TempDir(), t.TempDir()
	write(t, dir, map[string]string{"a.py": "aaaa", "b.py": "bbbb"})
	old := time.Now().Add(-time.Hour)
	for _, name := range []string{"a.py", "b.py"} {
		os.Chtimes(filepath.Join(dir, name), old, old)
	}
	if _, err := Take(context.Background(), dir, store, DefaultLimit); err != nil {
		t.Fatal(err)
	}
	packs, _ := filepath.Glob(filepath.Join(store, packDir, "*"))
	for _, p := range packs {
		os.Remove(p)
	}
	s, err := Take(context.Background(), dir, store, DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range s.Files {
		if got, want := content(t, s, f), map[string]string{"a.py": "aaaa", "b.py": "bbbb"}[f.Path]; got != want {
			t.Errorf("%s reads %q, want %q", f.Path, got, want)
		}
	}
}

// A pack mostly dead to a snapshot (its files edited since) is not kept
// alive by the few it still has: they are copied into the new pack, and
// the old one goes with the lists that name it.
func TestRepack(t *testing.T) {
	dir, store := t.TempDir(), t.TempDir()
	big := strings.Repeat("a", 1000)
	write(t, dir, map[string]string{"big.dat": big, "small.py": "small", "twin.py": "small"})
	first, err := Take(context.Background(), dir, store, DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	old := first.Files[0].pack
	write(t, dir, map[string]string{"big.dat": strings.Repeat("b", 1000)})
	second, err := Take(context.Background(), dir, store, DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range second.Files {
		if f.pack == old {
			t.Errorf("%s still points at the old pack, which holds %d bytes of the snapshot's %d", f.Path, len("small"), 1000+len("small"))
		}
	}
	if second.Files[1].pack != second.Files[2].pack || second.Files[1].off != second.Files[2].off {
		t.Errorf("two files of the same content were copied twice: %+v, %+v", second.Files[1], second.Files[2])
	}
	age(t, store, time.Now().Add(-48*time.Hour))
	if _, err := Take(context.Background(), dir, store, DefaultLimit); err != nil { // renews the second's list
		t.Fatal(err)
	}
	Prune(store, 24*time.Hour)
	if _, err := os.Stat(packPath(store, old)); err == nil {
		t.Errorf("the old pack stays")
	}
	for _, f := range second.Files {
		want := map[string]string{"big.dat": strings.Repeat("b", 1000), "small.py": "small", "twin.py": "small"}[f.Path]
		if got := content(t, second, f); got != want {
			t.Errorf("%s reads %q, want %q", f.Path, got, want)
		}
	}
}

// A copy cut short in an old pack is named as it is repacked, with what to
// do.
func TestRepackCutShort(t *testing.T) {
	store := t.TempDir()
	const old = "0123456789abcdef"
	os.MkdirAll(filepath.Join(store, packDir), 0o700)
	os.WriteFile(packPath(store, old), []byte("abc"), 0o600) // the file's byte, at 10, is gone
	s := &Snapshot{Store: store, Files: []File{{Path: "a.py", Size: 1, Hash: strings.Repeat("0", 64), pack: old, off: 10}}}
	p := newPacker(store, nil)
	err := s.repack(p)
	p.discard()
	if err == nil || !strings.Contains(err.Error(), "a.py is cut short") || !strings.Contains(err.Error(), "hosts --clean") {
		t.Errorf("got %v, want a.py named as cut short, with what to do", err)
	}
}

// A git submodule's committed files are shipped, as git lists them with
// --recurse-submodules, minus what .gpdignore names (its patterns relative
// to the top); what is untracked in a submodule is not, and a submodule's
// own .gitignore takes out nothing it commits.
func TestTakeSubmodules(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is not installed: the ignore rules are git's")
	}
	top := t.TempDir()
	sub, proj := filepath.Join(top, "lib"), filepath.Join(top, "proj")
	commit := func(dir string, args ...string) {
		t.Helper()
		for _, a := range [][]string{args, {"-c", "user.email=a@b", "-c", "user.name=n", "commit", "-qm", "x"}} {
			if out, err := exec.Command("git", append([]string{"-C", dir}, a...)...).CombinedOutput(); err != nil {
				t.Fatalf("git %v: %v: %s", a, err, out)
			}
		}
	}
	write(t, sub, map[string]string{"model.py": "m", "data/big.bin": "b", "build.so": "so", ".gitignore": "*.so\n"})
	gitInit(t, sub)
	commit(sub, "add", "-f", ".")
	write(t, proj, map[string]string{"train.py": "t", ".gpdignore": "data/\n/ext/lib/notes.txt\n"})
	gitInit(t, proj, "train.py", ".gpdignore")
	commit(proj, "-c", "protocol.file.allow=always", "submodule", "add", "-q", sub, "ext/lib")
	write(t, filepath.Join(proj, "ext/lib"), map[string]string{"scratch.py": "untracked", "notes.txt": "n"})
	commit(filepath.Join(proj, "ext/lib"), "add", "notes.txt")
	s, err := Take(context.Background(), proj, t.TempDir(), DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range s.Files {
		got = append(got, f.Path)
	}
	want := []string{".gitmodules", ".gpdignore", "ext/lib/.gitignore", "ext/lib/build.so", "ext/lib/model.py", "train.py"}
	if !slices.Equal(got, want) {
		t.Errorf("shipped %q, want %q", got, want)
	}
}
