package snapshot

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// DefaultLimit is the largest snapshot taken unless told otherwise.
const DefaultLimit = 1 << 30

// IgnoreFile names, at the top of a snapshot's directory, what is not
// shipped (gitignore syntax).
const IgnoreFile = ".gpdignore"

// File is one entry of a snapshot.
type File struct {
	// Path is relative to the snapshot's directory, with "/" separators.
	Path string
	// Exec is set for a file with an executable bit.
	Exec bool
	// Size is the content's length; Hash its SHA-256, in hex. Both are
	// empty for a symbolic link, whose target is Link.
	Size int64
	Hash string
	Link string
	// mtime is the file's modification time as listed (UnixNano).
	mtime int64
	// pack and off say where the coordinator's store has the content: in
	// which pack, from which byte (see packer).
	pack string
	off  int64
}

// Blob is the name of f's content in a content store (executor.BlobName).
func (f File) Blob() string { return executor.BlobName(f.Hash, f.Exec) }

// Snapshot is what a directory held when it was taken.
type Snapshot struct {
	// Dir is the directory taken, absolute.
	Dir string
	// ID is a hash of Files: equal IDs, equal trees.
	ID string
	// Files are sorted by Path.
	Files []File
	// Bytes is the sum of the files' sizes.
	Bytes int64
	// Store holds the content, by hash, as it was when the snapshot was
	// taken: later edits of Dir do not change what ships.
	Store string
	// Key names Dir among the directories snapshots are taken of, so that
	// a machine can say which snapshot of it it has last.
	Key string

	mu    sync.Mutex
	since map[string]since // by earlier ID; see Since

	codeOnce sync.Once
	code     *executor.Code // see Code
}

// Take takes a snapshot of dir, whose content it keeps in store (the
// coordinator's content store; files already there are not copied again).
// It fails, naming the largest files, when they add up to more than limit
// bytes; and naming the link, on a symbolic link that leads out of dir.
func Take(ctx context.Context, dir, store string, limit int64) (*Snapshot, error) {
	return take(ctx, dir, store, limit, entries)
}

// TakeAll takes a snapshot of every file under dir, as Take does where no
// git is asked: neither git's ignore rules nor a .gpdignore apply (the
// files a run brought back, which a log dir inside a work tree would
// have git ignore).
func TakeAll(ctx context.Context, dir, store string, limit int64) (*Snapshot, error) {
	return take(ctx, dir, store, limit, walk)
}

// take is Take, with the files of dir listed by list.
func take(ctx context.Context, dir, store string, limit int64, list func(context.Context, string) ([]File, error)) (*Snapshot, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("sync: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("sync: %s is not a directory", abs)
	}
	// The index is read while the directory is.
	indexed := make(chan *index, 1)
	go func() { indexed <- openIndex(store, abs) }()
	s := &Snapshot{Dir: abs, Store: store}
	if s.Files, err = list(ctx, abs); err != nil {
		return nil, err
	}
	for _, f := range s.Files {
		s.Bytes += f.Size
	}
	if s.Bytes > limit {
		return nil, tooLarge(s, limit)
	}
	if err := os.MkdirAll(store, 0o700); err != nil {
		return nil, fmt.Errorf("sync: the coordinator's content store: %w", err)
	}
	idx := <-indexed
	if err := s.hash(ctx, idx); err != nil {
		return nil, err
	}
	s.ID = idOf(s.Files)
	s.Key = dirKey(abs)
	s.saveManifest()
	idx.save(s.ID)
	if idx.id != "" {
		// The machines that have the directory's last snapshot are sent
		// its differences: worked out here from the index at hand.
		s.remember(idx.id, since{diff(s.Files, idx.list), true})
	}
	return s, nil
}

// entries returns what is shipped of dir (see list), sorted by path.
func entries(ctx context.Context, dir string) ([]File, error) {
	paths, all, err := list(ctx, dir)
	if err != nil {
		return nil, err
	}
	if all {
		return walk(ctx, dir)
	}
	return stat(ctx, dir, paths)
}

// stat returns the entries of the paths under dir, on as many goroutines
// as there are CPUs (see entry).
func stat(ctx context.Context, dir string, paths []string) ([]File, error) {
	files := make([]File, len(paths))
	keep := make([]bool, len(paths))
	err := parallel(ctx, len(paths), func(i int) error {
		// A directory git lists is a submodule's: not shipped.
		f, k, err := entry(dir, filepath.Join(dir, filepath.FromSlash(paths[i])), paths[i])
		files[i], keep[i] = f, k == aFile
		return err
	})
	if err != nil {
		return nil, err
	}
	kept := files[:0]
	for i, f := range files {
		if keep[i] {
			kept = append(kept, f)
		}
	}
	return kept, nil
}

// entry returns the entry of the path p under dir (full: the two joined)
// and what it is: a regular file's mode, size and time, a link's target
// (which must stay in dir). Paths that are gone (tracked by git, deleted in
// the work tree, or since the walk) are other; a special file (a FIFO, a
// socket, a device) is an error that names it: nothing ships it, and a
// read of it could hang.
func entry(dir, full, p string) (File, kind, error) {
	fi, err := os.Lstat(full)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return File{}, other, fmt.Errorf("sync: %w", err)
	case fi.Mode()&fs.ModeSymlink != 0:
		link, err := os.Readlink(full)
		if err != nil {
			return File{}, other, fmt.Errorf("sync: %w", err)
		}
		if !inside(p, link) || !leadsInside(dir, p, link) {
			return File{}, other, fmt.Errorf("sync: %s is a symbolic link to %s, out of %s: gpudispatch ships no link that leads out of the directory; remove it, or name it in %s", full, link, dir, IgnoreFile)
		}
		return File{Path: p, Link: link}, aFile, nil
	case fi.Mode().IsRegular():
		return File{Path: p, Exec: fi.Mode()&0o111 != 0, Size: fi.Size(), mtime: fi.ModTime().UnixNano()}, aFile, nil
	case fi.IsDir():
		return File{}, aDir, nil
	}
	return File{}, other, fmt.Errorf("sync: %s is %s, not a file: gpudispatch ships regular files and links; remove it, or name it in %s", full, FileKind(fi.Mode()), IgnoreFile)
}

// FileKind names the kind of a file that is not a regular one.
func FileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO (named pipe)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "a special file"
}

// kind is what an entry of a directory is.
type kind int

const (
	other kind = iota // gone, or a special file: not shipped
	aFile             // a regular file, or a link in the tree
	aDir
)

// walk returns the entries of every file under dir but those of a
// directory named .git (a repository git is not here to read), sorted by
// path. Directories are read on as many goroutines as there are CPUs, each
// one directory at a time, its names sorted; the lists are then put
// together in path order, so that no sort of the whole list is needed.
func walk(ctx context.Context, dir string) ([]File, error) {
	w := &walker{root: dir, todo: []string{""}, read: map[string]*listing{}}
	w.more = sync.NewCond(&w.mu)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() { w.work(ctx) })
	}
	wg.Wait()
	if w.err != nil {
		return nil, w.err
	}
	files := make([]File, 0, w.files)
	w.emit("", &files)
	return files, nil
}

// walker is the state walk's goroutines share.
type walker struct {
	root string
	mu   sync.Mutex
	more *sync.Cond // signalled when todo grows, or busy falls
	todo []string   // directories to read, relative ("" for the root)
	busy int        // directories being read
	err  error
	// read holds the directories read, by relative path; files counts
	// their files.
	read  map[string]*listing
	files int
}

// listing is what one directory holds.
type listing struct {
	// files are its files' entries, and subdirs the relative paths of its
	// subdirectories, each with a "/" after it: both in path order.
	files   []File
	subdirs []string
}

// work reads directories until there are none left, or one failed.
func (w *walker) work(ctx context.Context) {
	for {
		w.mu.Lock()
		for len(w.todo) == 0 && w.busy > 0 && w.err == nil {
			w.more.Wait()
		}
		if len(w.todo) == 0 || w.err != nil {
			w.mu.Unlock()
			return
		}
		d := w.todo[len(w.todo)-1]
		w.todo = w.todo[:len(w.todo)-1]
		w.busy++
		w.mu.Unlock()
		l, err := w.list(d)
		if err == nil {
			err = ctx.Err()
		}
		w.mu.Lock()
		if err == nil {
			w.read[d] = l
			w.files += len(l.files)
			for _, sub := range l.subdirs {
				w.todo = append(w.todo, strings.TrimSuffix(sub, "/"))
			}
		}
		w.busy--
		w.err = cmp.Or(w.err, err)
		w.more.Broadcast()
		w.mu.Unlock()
	}
}

// list reads directory d (relative): its names sorted, each looked at
// (on Linux, an fstatat in the open directory). A path sorts after
// another when, at the first name where they part, its name does, a
// directory's name being taken with the "/" after it: "a.txt" comes
// before "a/b", and "a/b" before "a0".
func (w *walker) list(d string) (*listing, error) {
	full := filepath.Join(w.root, filepath.FromSlash(d))
	dir, err := os.Open(full)
	if err != nil {
		return nil, fmt.Errorf("sync: %w", err)
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("sync: %w", err)
	}
	slices.Sort(names)
	prefix := ""
	if d != "" {
		prefix = d + "/"
	}
	l := &listing{files: make([]File, 0, len(names))}
	for _, name := range names {
		p := prefix + name
		f, kind, err := entryIn(dir, w.root, full, name, p)
		switch {
		case err != nil:
			return nil, err
		case kind == aFile:
			l.files = append(l.files, f)
		case kind == aDir && name != ".git":
			l.subdirs = append(l.subdirs, p+"/")
		}
	}
	// Sorted by name, "a" came before "a.b"; with their "/", "a.b/" comes
	// first.
	slices.Sort(l.subdirs)
	return l, nil
}

// emit appends the files under directory d, which was read, in path
// order: its own files and its subdirectories' merged, as list orders
// them.
func (w *walker) emit(d string, files *[]File) {
	l := w.read[d]
	i, j := 0, 0
	for i < len(l.files) || j < len(l.subdirs) {
		if j == len(l.subdirs) || i < len(l.files) && l.files[i].Path < l.subdirs[j] {
			*files = append(*files, l.files[i])
			i++
			continue
		}
		w.emit(strings.TrimSuffix(l.subdirs[j], "/"), files)
		j++
	}
}

// parallel calls f for 0..n-1 on as many goroutines as there are CPUs, in
// runs of indexes, and returns the first error (or ctx's), after which it
// calls f no more.
func parallel(ctx context.Context, n int, f func(i int) error) error {
	const run = 64
	var (
		next  atomic.Int64
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return first != nil
	}
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				from := int(next.Add(run)) - run
				if from >= n || ctx.Err() != nil || failed() {
					return
				}
				for i := from; i < min(from+run, n); i++ {
					if err := f(i); err != nil {
						mu.Lock()
						first = cmp.Or(first, err)
						mu.Unlock()
						return
					}
				}
			}
		})
	}
	wg.Wait()
	return cmp.Or(first, ctx.Err())
}

// idOf is the ID of a snapshot of files: a hash of their list, a line per
// file: its path (quoted as Go does), exec (true or false), hash and link
// (quoted).
func idOf(files []File) string {
	id := sha256.New()
	var lines []byte
	for _, f := range files {
		lines = appendQuote(lines, f.Path)
		lines = append(lines, ' ')
		lines = strconv.AppendBool(lines, f.Exec)
		lines = append(lines, ' ')
		lines = append(lines, f.Hash...)
		lines = append(lines, ' ')
		lines = appendQuote(lines, f.Link)
		lines = append(lines, '\n')
		if len(lines) > 1<<16 {
			id.Write(lines)
			lines = lines[:0]
		}
	}
	id.Write(lines)
	return hex.EncodeToString(id.Sum(nil))[:20]
}

// appendQuote is strconv.AppendQuote, which it calls only for a string
// that is not plain printable ASCII without quotes or backslashes (most
// paths are, and are quoted as they are).
func appendQuote(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '"' || c == '\\' {
			return strconv.AppendQuote(b, s)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// Open returns the snapshot id of dir that Take took earlier with store
// (another process's, a standing queue's submit), from its list there. It
// fails when the list is gone (pruned) or is not that snapshot's.
func Open(store, id, dir string) (*Snapshot, error) {
	files, ok := readManifest(store, id)
	if !ok {
		return nil, fmt.Errorf("sync: snapshot %s of %s is no longer in %s: submit again", id, dir, store)
	}
	s := &Snapshot{Dir: dir, ID: id, Store: store, Key: dirKey(dir), Files: files}
	for _, f := range files {
		s.Bytes += f.Size
	}
	if idOf(s.Files) != id {
		return nil, fmt.Errorf("sync: the list of snapshot %s in %s is not that snapshot's", id, store)
	}
	return s, nil
}

// list returns the paths under dir that are shipped, relative, with "/",
// as git lists them; all says every file is (no git repository, no
// ignore file): walk finds them.
func list(ctx context.Context, dir string) (paths []string, all bool, err error) {
	ignore := filepath.Join(dir, IgnoreFile)
	fi, serr := os.Stat(ignore)
	hasIgnore := serr == nil
	if hasIgnore && !fi.Mode().IsRegular() {
		// git would read a FIFO for ever.
		return nil, false, fmt.Errorf("sync: %s is %s, not a file of ignore rules: make it a regular file, or remove it", ignore, FileKind(fi.Mode()))
	}
	_, noGit := exec.LookPath("git")
	inGit := false
	if noGit == nil && mayBeGit(dir) {
		var errs bytes.Buffer
		probe := exec.CommandContext(ctx, "git", "-C", dir, "rev-parse", "--is-inside-work-tree")
		probe.Stderr = &errs
		inGit = probe.Run() == nil
		if !inGit && bytes.Contains(errs.Bytes(), []byte("safe.directory")) {
			// A work tree git will not read (another user's clone, a
			// bind mount): shipped as a plain directory it would lose
			// its .gitignore, and ship what that keeps out.
			return nil, false, fmt.Errorf("sync: git refuses the work tree %s: %s; if you trust it, run git config --global --add safe.directory %s", dir, firstLine(errs.String()), dir)
		}
	}
	if hasIgnore && noGit != nil {
		return nil, false, fmt.Errorf("sync: %s is read with git's rules, and git is not installed here: install git, or remove it", ignore)
	}
	if !inGit && !hasIgnore {
		return nil, true, nil
	}
	git := func(args ...string) ([]string, error) {
		if !inGit {
			// No repository: an empty one of its own lends git's ignore
			// rules to a plain directory.
			tmp, err := os.MkdirTemp("", "gpudispatch-git-")
			if err != nil {
				return nil, err
			}
			defer os.RemoveAll(tmp)
			if out, err := exec.CommandContext(ctx, "git", "init", "-q", "--bare", tmp).CombinedOutput(); err != nil {
				return nil, fmt.Errorf("git init: %v: %s", err, bytes.TrimSpace(out))
			}
			args = append([]string{"--git-dir", tmp, "--work-tree", dir}, args...)
		}
		cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
		var errs bytes.Buffer
		cmd.Stderr = &errs
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("sync: git ls-files in %s: %v: %s", dir, err, bytes.TrimSpace(errs.Bytes()))
		}
		return strings.FieldsFunc(string(out), func(r rune) bool { return r == 0 }), nil
	}
	args := []string{"ls-files", "-z", "--others", "--exclude-standard"}
	if inGit {
		args = append(args, "--cached")
	}
	if hasIgnore {
		args = append(args, "--exclude-from="+ignore)
	}
	if paths, err = git(args...); err != nil {
		return nil, false, err
	}
	if inGit && hasIgnore {
		// Tracked files are listed whatever the ignore rules: take out
		// those .gpdignore names.
		ignored, err := git("ls-files", "-z", "--cached", "--ignored", "--exclude-from="+ignore)
		if err != nil {
			return nil, false, err
		}
		out := make(map[string]bool, len(ignored))
		for _, p := range ignored {
			out[p] = true
		}
		paths = slices.DeleteFunc(paths, func(p string) bool { return out[p] })
	}
	gpdignore := ""
	if hasIgnore {
		gpdignore = ignore
	}
	if paths, err = nestedRepos(ctx, dir, paths, gpdignore); err != nil {
		return nil, false, err
	}
	if inGit {
		sub, err := submoduleFiles(ctx, dir, paths, git, gpdignore)
		if err != nil {
			return nil, false, err
		}
		paths = append(paths, sub...)
	}
	slices.Sort(paths)
	return slices.Compact(paths), false, nil
}

// submoduleFiles returns the files of the git submodules in dir that
// paths (what git listed of dir) name, each as one entry: what each
// submodule commits (git ls-files --cached --recurse-submodules), minus
// what the ignore file names ("": none). git lists none of an untracked
// file there. A work tree with no .gitmodules has no submodule: git is not
// asked.
func submoduleFiles(ctx context.Context, dir string, paths []string, git func(...string) ([]string, error), ignore string) ([]string, error) {
	if !hasSubmodules(dir) {
		return nil, nil
	}
	all, err := git("ls-files", "-z", "--cached", "--recurse-submodules")
	if err != nil {
		return nil, err
	}
	listed := make(map[string]bool, len(paths))
	for _, p := range paths {
		listed[p] = true
	}
	var sub []string
	for _, p := range all {
		if listed[p] {
			continue
		}
		// Under a submodule: a directory above it is one entry of paths.
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if listed[d] {
				sub = append(sub, p)
				break
			}
		}
	}
	if ignore == "" || len(sub) == 0 {
		return sub, nil
	}
	return notIgnored(ctx, sub, ignore)
}

// nestedRepos replaces each directory that git listed whole (a git
// repository inside the project that is not a submodule: git lists it as
// "dir/", none of its files) by its files, but its .git, minus what the
// ignore file names ("": none): it ships whole, as it does where no git
// is asked, rather than not at all.
func nestedRepos(ctx context.Context, dir string, paths []string, ignore string) ([]string, error) {
	var nested []string
	kept := slices.DeleteFunc(paths, func(p string) bool {
		if strings.HasSuffix(p, "/") {
			nested = append(nested, strings.TrimSuffix(p, "/"))
			return true
		}
		return false
	})
	if len(nested) == 0 {
		return kept, nil
	}
	var files []string
	for _, top := range nested {
		err := filepath.WalkDir(filepath.Join(dir, filepath.FromSlash(top)), func(full string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case d.IsDir() && d.Name() == ".git":
				return filepath.SkipDir
			case d.IsDir():
				return nil
			}
			rel, err := filepath.Rel(dir, full)
			files = append(files, filepath.ToSlash(rel))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("sync: %w", err)
		}
	}
	if ignore != "" && len(files) > 0 {
		var err error
		if files, err = notIgnored(ctx, files, ignore); err != nil {
			return nil, err
		}
	}
	return append(kept, files...), nil
}

// hasSubmodules says whether the git work tree that dir is in has a
// .gitmodules at its top (in dir, or above it up to the directory that
// holds .git).
func hasSubmodules(dir string) bool {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(filepath.Join(d, ".gitmodules")); err == nil {
			return true
		}
		if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil || filepath.Dir(d) == d {
			return false
		}
	}
}

// notIgnored returns the paths that the ignore file (gitignore syntax,
// its patterns relative to the top) does not name: git check-ignore, in a
// repository of its own and an empty work tree, so that only that file's
// rules count (a submodule's .gitignore does not take out what it
// commits).
func notIgnored(ctx context.Context, paths []string, ignore string) ([]string, error) {
	tmp, err := os.MkdirTemp("", "gpudispatch-git-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	repo, tree := filepath.Join(tmp, "repo"), filepath.Join(tmp, "tree")
	if err := os.Mkdir(tree, 0o700); err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, "git", "init", "-q", "--bare", repo).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("git init: %v: %s", err, bytes.TrimSpace(out))
	}
	cmd := exec.CommandContext(ctx, "git", "--git-dir", repo, "--work-tree", tree, "-c", "core.excludesFile="+ignore,
		"check-ignore", "--no-index", "-z", "--stdin")
	cmd.Stdin = strings.NewReader(strings.Join(paths, "\x00") + "\x00")
	var errs bytes.Buffer
	cmd.Stderr = &errs
	out, err := cmd.Output()
	// Exit status 1: none is ignored.
	if err != nil && !(errors.As(err, new(*exec.ExitError)) && cmd.ProcessState.ExitCode() == 1) {
		return nil, fmt.Errorf("sync: git check-ignore with %s: %v: %s", ignore, err, bytes.TrimSpace(errs.Bytes()))
	}
	ignored := map[string]bool{}
	for _, p := range strings.Split(string(out), "\x00") {
		ignored[p] = true
	}
	return slices.DeleteFunc(paths, func(p string) bool { return ignored[p] }), nil
}

// mayBeGit says whether dir may be in a git work tree: git says so only
// with a .git in dir or above it, or with GIT_DIR set (a look costs less
// than starting git).
func mayBeGit(dir string) bool {
	if os.Getenv("GIT_DIR") != "" {
		return true
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
			return true
		}
		if filepath.Dir(d) == d {
			return false
		}
	}
}

// inside says whether the link at p (relative, "/") with target link stays
// in the tree.
func inside(p, link string) bool {
	if filepath.IsAbs(link) {
		return false
	}
	to := filepath.Clean(filepath.Join(filepath.Dir(filepath.FromSlash(p)), link))
	return to != ".." && !strings.HasPrefix(to, ".."+string(filepath.Separator))
}

// leadsInside says whether the link at p (relative, "/") in dir, with
// target link, stays in dir where it really leads: the links its path
// goes through are followed as the host will (self -> . makes
// self/../secret lead out), the components that are not there taken as
// written.
func leadsInside(dir, p, link string) bool {
	at := parts(path.Dir(p))
	todo := parts(link)
	for hops := 0; len(todo) > 0; {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "..":
			if len(at) == 0 {
				return false
			}
			at = at[:len(at)-1]
			continue
		}
		next := append(slices.Clip(at), c)
		full := filepath.Join(append([]string{dir}, next...)...)
		fi, err := os.Lstat(full)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			at = next
			continue
		}
		// A link on the way: its target, from the directory it is in.
		to, err := os.Readlink(full)
		if hops++; err != nil || hops > 40 || filepath.IsAbs(to) {
			return false
		}
		todo = append(parts(filepath.ToSlash(to)), todo...)
	}
	return true
}

// parts splits a relative "/" path into its components, without "." and
// empty ones.
func parts(p string) []string {
	var out []string
	for c := range strings.SplitSeq(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// tooLarge names the largest files of s.
func tooLarge(s *Snapshot, limit int64) error {
	files := slices.Clone(s.Files)
	slices.SortFunc(files, func(a, b File) int { return cmp.Compare(b.Size, a.Size) })
	var largest []string
	for _, f := range files[:min(5, len(files))] {
		largest = append(largest, fmt.Sprintf("%s (%s)", f.Path, Size(f.Size)))
	}
	return fmt.Errorf("sync: %s holds %s to ship, over the limit of %s (--sync-limit); the largest: %s; name what jobs do not need in %s",
		s.Dir, Size(s.Bytes), Size(limit), strings.Join(largest, ", "), filepath.Join(s.Dir, IgnoreFile))
}

// hash fills in the files' hashes, copying into the store the content it
// lacks (into one new pack), on as many goroutines as there are CPUs.
func (s *Snapshot) hash(ctx context.Context, idx *index) error {
	known := idx.pair(s.Files)
	p := newPacker(s.Store, idx.list)
	err := parallel(ctx, len(s.Files), func(i int) error {
		if s.Files[i].Link != "" {
			return nil
		}
		return s.keep(&s.Files[i], idx, known[i], p)
	})
	if err == nil {
		err = s.repack(p)
	}
	if err != nil {
		// No list will name it: what it holds is of no use.
		p.discard()
		return err
	}
	return p.close()
}

// keep fills in f's hash and where the store has its content (e: the
// index's entry of its path, or nil), writing the content into p's pack
// when the store lacks it.
func (s *Snapshot) keep(f *File, idx *index, e *File, p *packer) error {
	if hash, ok := idx.known(*f, e); ok {
		// The store has its content: Prune keeps what the index's list
		// names.
		f.Hash, f.pack, f.off = hash, e.pack, e.off
		return nil
	}
	path := filepath.Join(s.Dir, filepath.FromSlash(f.Path))
	var (
		n   int64
		err error
	)
	if f.Size <= smallFile {
		// Read whole: what is hashed is what is kept, and it is written
		// only when the store lacks it.
		var b []byte
		if b, err = os.ReadFile(path); err == nil {
			sum := sha256.Sum256(b)
			f.Hash, n = hex.EncodeToString(sum[:]), int64(len(b))
			err = s.put(f, p, b)
		}
	} else {
		n, err = s.copyLarge(f, p, path)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("sync: %s vanished while the snapshot was taken: take it again", path)
	case err != nil && !errors.Is(err, errChanged):
		return fmt.Errorf("sync: copying %s into the coordinator's content store %s: %w", path, s.Store, err)
	}
	if fi, serr := os.Lstat(path); err != nil || serr != nil || n != f.Size || fi.Size() != n || fi.ModTime().UnixNano() != f.mtime {
		return fmt.Errorf("sync: %s changed while the snapshot was taken: take it again", path)
	}
	return nil
}

// errChanged is a file whose length is no longer the one listed.
var errChanged = errors.New("changed while the snapshot was taken")

// put points f (hashed, its content b) at the store's copy of b, writing
// one into p's pack if the store has none.
func (s *Snapshot) put(f *File, p *packer, b []byte) error {
	if at, ok := p.find(f.Hash); ok {
		f.pack, f.off = at.pack, at.off
		return nil
	}
	if int64(len(b)) != f.Size {
		return errChanged
	}
	pf, at, err := p.reserve(f.Size)
	if err != nil {
		return err
	}
	if _, err := pf.WriteAt(b, at.off); err != nil {
		return err
	}
	f.pack, f.off = at.pack, at.off
	p.wrote(f.Hash, at)
	return nil
}

// copyLarge hashes the file at path (f, too large to be read whole) as it
// copies it into p's pack: f.Size bytes, and no more. It returns how many
// it read.
func (s *Snapshot) copyLarge(f *File, p *packer, path string) (int64, error) {
	src, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	pf, at, err := p.reserve(f.Size)
	if err != nil {
		return 0, err
	}
	h := sha256.New()
	n, err := io.CopyN(io.MultiWriter(h, io.NewOffsetWriter(pf, at.off)), src, f.Size)
	switch {
	case errors.Is(err, io.EOF):
		return n, errChanged
	case err != nil:
		return n, err
	}
	if m, _ := src.Read(make([]byte, 1)); m != 0 {
		return n + 1, errChanged
	}
	f.Hash, f.pack, f.off = hex.EncodeToString(h.Sum(nil)), at.pack, at.off
	p.wrote(f.Hash, at)
	return n, nil
}

// smallFile is the size up to which a file is read whole as it is hashed.
const smallFile = 1 << 20

// Size says n bytes in a unit a reader takes in at once.
func Size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// firstLine is the first line of git's message, without "fatal: ".
func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimPrefix(s, "fatal: ")
}
