package codestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/dispatch/snapshot"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

func TestMain(m *testing.M) { os.Exit(sshtest.RunWithOwnHome(m)) }

// testLog is the log dir whose working trees the tests ask for, unless a
// test names others.
const testLog = "1"

// project writes files (path: content; a "->" content makes a link, a
// "x:" prefix an executable) under a new directory.
func project(t *testing.T, files map[string]string) string {
	dir := t.TempDir()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case strings.HasPrefix(content, "->"):
			err = os.Symlink(strings.TrimPrefix(content, "->"), full)
		case strings.HasPrefix(content, "x:"):
			err = os.WriteFile(full, []byte(strings.TrimPrefix(content, "x:")), 0o755)
		default:
			err = os.WriteFile(full, []byte(content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// tree reads a built tree back: path: content, as project writes them.
func tree(t *testing.T, dir string) map[string]string {
	got := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			link, _ := os.Readlink(p)
			got[rel] = "->" + link
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			got[rel] = string(b)
			if fi.Mode()&0o111 != 0 {
				got[rel] = "x:" + got[rel]
			}
			if fi.Mode()&0o222 != 0 {
				t.Errorf("%s is writable (%v): a job could change every snapshot that shares it", rel, fi.Mode())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// A snapshot's tree is built on each machine with the files, modes and
// in-tree links of the project; a second snapshot with one file changed
// sends that file alone; a snapshot a machine has sends nothing. Machines
// are this one and two real OpenSSH hosts, each with a home of its own.
func TestShip(t *testing.T) {
	files := map[string]string{
		"train.py":      "print('train')\n",
		"run.sh":        "x:#!/bin/sh\necho run\n",
		"conf/a.yaml":   "lr: 0.1\n",
		"conf/b.yaml":   "lr: 0.1\n", // the same content: one blob
		"data/latest":   "->../conf/a.yaml",
		"deep/er/x.txt": strings.Repeat("x", 100_000),
	}
	dir := project(t, files)
	local := t.TempDir()
	t.Run("local", func(t *testing.T) { shipTwice(t, spawn.Local, os.Getenv("HOME"), dir, local, files) })
	t.Run("ssh", func(t *testing.T) {
		sshtest.Require(t)
		lab := sshtest.Start(t, sshtest.Options{Hosts: 2})
		for _, h := range lab.Hosts {
			shipTwice(t, lab.Spawn(h.Name), h.Home, dir, local, files)
		}
	})
}

// shipTwice ships the project in dir (holding files) to the machine that
// start runs bash on, whose home is home; then an edited copy of it.
func shipTwice(t *testing.T, start spawn.Func, home, dir, local string, files map[string]string) {
	s := take(t, dir, local)
	first := newStore(t, start, 0, "")
	got, sent, err := first.Ensure(context.Background(), s, testLog)
	if err != nil {
		t.Fatal(err)
	}
	// The machine keeps the content it got once it answered.
	first.Close()
	if want := filepath.Join(home, ".gpudispatch/code/work", testLog, s.ID); got != want {
		t.Errorf("the tree is at %s, want %s", got, want)
	}
	var total int64
	for _, f := range s.Files {
		total += f.Size
	}
	if want := total - int64(len(files["conf/b.yaml"])); sent.Files != 4 || sent.Bytes != want {
		t.Errorf("the first shipping sent %+v; want 4 files, %d bytes", sent, want)
	}
	if diff := compare(tree(t, got), files); diff != "" {
		t.Errorf("the tree differs from the project: %s", diff)
	}
	// The project edited: one file changes.
	edited := project(t, files)
	os.WriteFile(filepath.Join(edited, "conf/a.yaml"), []byte("lr: 0.2\n"), 0o644)
	s2 := take(t, edited, local)
	got2, sent, err := newStore(t, start, 0, "").Ensure(context.Background(), s2, testLog)
	if err != nil {
		t.Fatal(err)
	}
	if sent.Files != 1 || sent.Bytes != 8 {
		t.Errorf("a snapshot with one file changed sent %+v; want the one file, 8 bytes", sent)
	}
	if b, _ := os.ReadFile(filepath.Join(got2, "data/latest")); string(b) != "lr: 0.2\n" {
		t.Errorf("the second tree's link reads %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(got, "conf/a.yaml")); string(b) != "lr: 0.1\n" {
		t.Errorf("the first tree changed: %q", b)
	}
	// A store that has the snapshot sends nothing, even to a new
	// coordinator.
	if _, sent, err := newStore(t, start, 0, "").Ensure(context.Background(), s, testLog); err != nil || sent.Files != 0 || sent.Bytes != 0 {
		t.Errorf("shipping a snapshot the machine has: sent %+v, %v", sent, err)
	}
}

// Ensure ships once for all its callers.
func TestEnsureOnce(t *testing.T) {
	dir := project(t, map[string]string{"a": "a"})
	s := take(t, dir, t.TempDir())
	st := newStore(t, spawn.Local, 0, "")
	errs := make(chan error)
	total := make(chan int)
	for range 5 {
		go func() {
			_, sent, err := st.Ensure(context.Background(), s, testLog)
			errs <- err
			total <- sent.Files
		}()
	}
	n := 0
	for range 5 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		n += <-total
	}
	if n != 1 {
		t.Errorf("five callers sent %d files in all; want 1", n)
	}
}

// A store that cannot be written says so in its own words, and the next
// call tries again.
func TestShipFails(t *testing.T) {
	home := t.TempDir()
	os.MkdirAll(filepath.Join(home, ".gpudispatch", "code"), 0o700)
	os.Chmod(filepath.Join(home, ".gpudispatch", "code"), 0o500)
	t.Cleanup(func() { os.Chmod(filepath.Join(home, ".gpudispatch", "code"), 0o700) })
	if os.Geteuid() == 0 {
		// root writes anyway: a store that is a link fails the same way.
		os.Remove(filepath.Join(home, ".gpudispatch", "code"))
		os.Symlink(t.TempDir(), filepath.Join(home, ".gpudispatch", "code"))
	}
	start := homeIn(home)
	s := take(t, project(t, map[string]string{"a": "a"}), t.TempDir())
	st := newStore(t, start, 0, "")
	for range 2 {
		_, _, err := st.Ensure(context.Background(), s, testLog)
		if err == nil || !strings.Contains(err.Error(), "cannot put the code") || !strings.Contains(err.Error(), ".gpudispatch/code") {
			t.Errorf("shipping into a store not one's own: %v", err)
		}
	}
}

// The coordinator's copy of a file cut short (its pack truncated by hand or
// by a full disk), or gone, is named, with what to do; no tree is built of
// it.
func TestShipCutShortCopy(t *testing.T) {
	local := t.TempDir()
	s := take(t, project(t, map[string]string{"a.py": "print(1)", "b.py": "print(2)"}), local)
	packs, _ := filepath.Glob(filepath.Join(local, "packs", "*"))
	if len(packs) != 1 {
		t.Fatalf("packs %v, want one", packs)
	}
	if err := os.Truncate(packs[0], 3); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	_, _, err := newStore(t, homeIn(home), 0, "").Ensure(context.Background(), s, testLog)
	if err == nil || !strings.Contains(err.Error(), "a.py is cut short") || !strings.Contains(err.Error(), "hosts --clean") {
		t.Errorf("shipping a copy cut short: %v", err)
	}
	if snaps, _ := filepath.Glob(filepath.Join(home, ".gpudispatch", "code", "snaps", s.ID+"*")); len(snaps) != 0 {
		t.Errorf("a tree was built: %v", snaps)
	}
	// Gone altogether.
	os.Remove(packs[0])
	_, _, err = newStore(t, homeIn(home), 0, "").Ensure(context.Background(), s, testLog)
	if err == nil || !strings.Contains(err.Error(), "coordinator's copy of a.py") || !strings.Contains(err.Error(), "hosts --clean") {
		t.Errorf("shipping a copy that is gone: %v", err)
	}
}

// homeIn starts bash here as a machine whose home is home, with the
// variables vars (NAME=VALUE) set too.
func homeIn(home string, vars ...string) spawn.Func {
	set := "export HOME=" + home
	for _, v := range vars {
		set += " " + v
	}
	return func(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
		return spawn.Local(ctx, set+"; "+line, stdout, stderr)
	}
}

// A warm store shell, started ahead, ships the next snapshot with no
// shell started then, even one still being started; one that ended
// meanwhile is replaced by a new one.
func TestWarm(t *testing.T) {
	dir := project(t, map[string]string{"a.py": "a1"})
	local := t.TempDir()
	home := t.TempDir()
	starts := 0
	var mu sync.Mutex
	start := func(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
		mu.Lock()
		starts++
		mu.Unlock()
		return homeIn(home)(ctx, line, stdout, stderr)
	}
	st := newStore(t, start, 0, "")
	warmed := func() *shell {
		t.Helper()
		st.Warm()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			st.mu.Lock()
			sh := st.warm
			st.mu.Unlock()
			if sh != nil {
				return sh
			}
		}
		t.Fatal("no warm shell after 10 s")
		return nil
	}
	ship := func(content string, wantStarts int) {
		t.Helper()
		os.WriteFile(filepath.Join(dir, "a.py"), []byte(content), 0o644)
		got, _, err := st.Ensure(context.Background(), take(t, dir, local), testLog)
		if err != nil {
			t.Fatal(err)
		}
		if diff := compare(tree(t, got), map[string]string{"a.py": content}); diff != "" {
			t.Errorf("the tree: %s", diff)
		}
		mu.Lock()
		defer mu.Unlock()
		if starts != wantStarts {
			t.Errorf("%d store shells started; want %d", starts, wantStarts)
		}
	}
	st.Warm()
	ship("a1", 1)               // at once: the warm shell is not ready yet
	warmed().proc.Stdin.Close() // it ends
	ship("a2", 3)
}

// Store shells that find no store at once, on a new machine, all make it
// (one mkdir wins, the others find it there).
func TestFirstShipsAtOnce(t *testing.T) {
	local := t.TempDir()
	for range 3 {
		home := t.TempDir()
		var wg sync.WaitGroup
		for i := range 8 {
			s := take(t, project(t, map[string]string{"a.py": fmt.Sprint(i)}), local)
			wg.Go(func() {
				if _, _, err := newStore(t, homeIn(home), 0, "").Ensure(context.Background(), s, testLog); err != nil {
					t.Errorf("a first shipping with others: %v", err)
				}
			})
		}
		wg.Wait()
	}
}

// newStore is New's store, closed as the test ends: what it does on the
// machine after it answered is over before the machine's files go.
func newStore(t *testing.T, start spawn.Func, keep time.Duration, dir string) *Store {
	st := New(start, keep, dir)
	t.Cleanup(st.Close)
	return st
}

func take(t *testing.T, dir, store string) *executor.Code {
	t.Helper()
	s, err := snapshot.Take(context.Background(), dir, store, snapshot.DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	return s.Code()
}

// compare says how got differs from want.
func compare(got, want map[string]string) string {
	var diffs []string
	for p, w := range want {
		if got[p] != w {
			diffs = append(diffs, fmt.Sprintf("%s: %q, want %q", p, got[p], w))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			diffs = append(diffs, p+" is extra")
		}
	}
	return strings.Join(diffs, "; ")
}

// A machine makes the next tree of a directory from the last one it built
// of it, by their differences: a changed file, a removed one, a new one, a
// file that became a directory and a directory that became a file; what
// jobs wrote into (or removed from) the earlier tree stays out of the new
// one, and the earlier tree stays as it was. With flock(1) there, the
// machine keeps a spare copy of the last tree, made after it answered, and
// the next build makes the base and the spare the new tree and the new
// base, copying neither; without flock, it copies the base as it builds.
func TestShipIncremental(t *testing.T) {
	noFlock := t.TempDir()
	for _, bin := range []string{"/usr/bin", "/bin"} {
		entries, _ := os.ReadDir(bin)
		for _, e := range entries {
			if e.Name() != "flock" {
				os.Symlink(filepath.Join(bin, e.Name()), filepath.Join(noFlock, e.Name()))
			}
		}
	}
	for _, tc := range []struct {
		name, path string
		spare      bool
	}{
		{"flock", os.Getenv("PATH"), true},
		{"no flock", noFlock, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := t.TempDir()
			start := homeIn(home, "PATH="+tc.path)
			shipIncrementally(t, start, filepath.Join(home, ".gpudispatch", "code"), tc.spare)
		})
	}
}

func shipIncrementally(t *testing.T, start spawn.Func, store string, spare bool) {
	files := map[string]string{"a.py": "a1", "b.py": "b", "gone.py": "g", "x": "file", "d/in.py": "i", "keep/k.py": "k"}
	dir := project(t, files)
	local := t.TempDir()
	st := newStore(t, start, 0, "")
	s1 := take(t, dir, local)
	first, _, err := st.Ensure(context.Background(), s1, "a1")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(first, "result.txt"), []byte("a job's"), 0o444)
	// The base is made once the machine answered, while a job may write
	// in the tree: it is the snapshot, not the tree.
	st.Close()
	if diff := compare(tree(t, filepath.Join(store, "base", s1.Key)), files); diff != "" {
		t.Errorf("the first base: %s", diff)
	}
	os.WriteFile(filepath.Join(dir, "a.py"), []byte("a2"), 0o644)
	os.Remove(filepath.Join(dir, "gone.py"))
	os.WriteFile(filepath.Join(dir, "new.py"), []byte("n"), 0o644)
	os.Remove(filepath.Join(dir, "x"))
	os.MkdirAll(filepath.Join(dir, "x"), 0o755)
	os.WriteFile(filepath.Join(dir, "x", "y.py"), []byte("y"), 0o644)
	os.RemoveAll(filepath.Join(dir, "d"))
	os.WriteFile(filepath.Join(dir, "d"), []byte("now a file"), 0o644)
	s2 := take(t, dir, local)
	second, sent, err := st.Ensure(context.Background(), s2, "a2")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a.py": "a2", "b.py": "b", "new.py": "n", "x/y.py": "y", "d": "now a file", "keep/k.py": "k"}
	if diff := compare(tree(t, second), want); diff != "" {
		t.Errorf("the second tree: %s", diff)
	}
	if sent.Files != 4 {
		t.Errorf("sent %+v; want the 4 new contents", sent)
	}
	files["result.txt"] = "a job's"
	if diff := compare(tree(t, first), files); diff != "" {
		t.Errorf("the first tree changed: %s", diff)
	}
	// A job of the second tree writes a file and removes one: the base and
	// its spare stay as the snapshot was.
	os.WriteFile(filepath.Join(second, "result.txt"), []byte("a job's"), 0o444)
	os.Remove(filepath.Join(second, "b.py"))
	st.Close()
	base := filepath.Join(store, "base", s2.Key)
	if diff := compare(tree(t, base), want); diff != "" {
		t.Errorf("the base: %s", diff)
	}
	fi, err := os.Stat(base + ".spare")
	if (err == nil) != spare {
		t.Fatalf("a spare of the base: %v, want one %t", err, spare)
	}
	if spare {
		if diff := compare(tree(t, base+".spare"), want); diff != "" {
			t.Errorf("the spare: %s", diff)
		}
	}
	was, _ := os.Stat(base)
	os.WriteFile(filepath.Join(dir, "a.py"), []byte("a3"), 0o644)
	s3 := take(t, dir, local)
	third, sent, err := st.Ensure(context.Background(), s3, "a3")
	if err != nil {
		t.Fatal(err)
	}
	want["a.py"] = "a3"
	if diff := compare(tree(t, third), want); diff != "" {
		t.Errorf("the third tree: %s", diff)
	}
	if sent.Files != 1 {
		t.Errorf("the third tree sent %+v; want the one new content", sent)
	}
	// With a spare, the build was done in place: the spare became the
	// tree, and the base stayed the base.
	if got, err := os.Stat(filepath.Join(store, "snaps", s3.ID)); spare && (err != nil || !os.SameFile(got, fi)) {
		t.Errorf("the third tree is not the spare the machine made: %v", err)
	}
	if got, err := os.Stat(base); spare && (err != nil || !os.SameFile(got, was)) {
		t.Errorf("the base was replaced, not changed in place: %v", err)
	}
	st.Close()
	if diff := compare(tree(t, base), want); diff != "" {
		t.Errorf("the third base: %s", diff)
	}
}

// A shipping removes on the machine what no run used for the keep time:
// an old tree (not one a process runs in), an old base, and the content
// no tree links to any more; what the trees still use stays.
func TestShipPrunes(t *testing.T) {
	local := t.TempDir()
	store := filepath.Join(os.Getenv("HOME"), ".gpudispatch", "code")
	build := func(files map[string]string) (*executor.Code, string) {
		s := take(t, project(t, files), local)
		st := New(spawn.Local, time.Hour, "")
		dir, _, err := st.Ensure(context.Background(), s, testLog)
		if err != nil {
			t.Fatal(err)
		}
		st.Close() // it prunes after it answered
		return s, dir
	}
	oldSnap, oldDir := build(map[string]string{"only-old.py": "prune-test old", "shared.py": "prune-test shared"})
	busySnap, busyDir := build(map[string]string{"busy.py": "prune-test busy"})
	long := time.Now().Add(-2 * time.Hour)
	for _, s := range []*executor.Code{oldSnap, busySnap} {
		os.Chtimes(filepath.Join(store, "snaps", s.ID+".ok"), long, long)
		os.Chtimes(filepath.Join(store, "work", testLog, s.ID+".ok"), long, long)
		os.Chtimes(filepath.Join(store, "base", s.Key+".id"), long, long)
		for _, f := range s.Files {
			os.Chtimes(filepath.Join(store, "blobs", f.Blob()[:2], f.Blob()), long, long)
		}
	}
	// The store pruned as the first two were built: the next shipping
	// prunes once a tenth of the keep time has passed since.
	if err := os.WriteFile(filepath.Join(store, ".pruned"), fmt.Appendf(nil, "%d\n", long.Unix()), 0o600); err != nil {
		t.Fatal(err)
	}
	busy := exec.Command("sleep", "30")
	busy.Dir = busyDir
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer busy.Process.Kill()
	_, newDir := build(map[string]string{"shared.py": "prune-test shared", "new.py": "prune-test new"})
	blob := func(s *executor.Code, path string) bool {
		for _, f := range s.Files {
			if f.Path == path {
				_, err := os.Stat(filepath.Join(store, "blobs", f.Blob()[:2], f.Blob()))
				return err == nil
			}
		}
		return false
	}
	for what, tc := range map[string]struct {
		path string
		want bool
	}{
		"the old tree":             {oldDir, false},
		"the tree a process is in": {busyDir, true},
		"the new tree":             {newDir, true},
	} {
		if _, err := os.Stat(tc.path); (err == nil) != tc.want {
			t.Errorf("%s: there %t, want %t", what, err == nil, tc.want)
		}
	}
	if blob(oldSnap, "only-old.py") || !blob(oldSnap, "shared.py") || !blob(busySnap, "busy.py") {
		t.Errorf("content: only-old.py kept %t (want false), shared.py %t, busy.py %t (want true)",
			blob(oldSnap, "only-old.py"), blob(oldSnap, "shared.py"), blob(busySnap, "busy.py"))
	}
	// Pruned just now: the next shipping does not look again.
	os.Chtimes(newDir+".ok", long, long)
	build(map[string]string{"other.py": "prune-test other"})
	if _, err := os.Stat(newDir); err != nil {
		t.Errorf("pruned again at once: %v", err)
	}
}

// Two users of one machine have stores of their own: neither can read the
// other's content or trees, nor put a file in them.
func TestStoresAreTheirUsers(t *testing.T) {
	alice, bob := sshtest.NewUser(t, "gpdalice"), sshtest.NewUser(t, "gpdbob")
	shared := sshtest.SharedDir(t)
	home := map[string]string{}
	starts := map[string]spawn.Func{}
	for _, u := range []sshtest.User{alice, bob} {
		h := filepath.Join(shared, u.Name)
		if err := os.Mkdir(h, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chown(h, u.UID, u.GID)
		home[u.Name] = h
		starts[u.Name] = func(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
			return spawn.Local(ctx, u.Line("export HOME="+h+"; "+line), stdout, stderr)
		}
	}
	s := take(t, project(t, map[string]string{"secret.py": "alice's own"}), t.TempDir())
	aliceTree, _, err := newStore(t, starts["gpdalice"], 0, "").Ensure(context.Background(), s, testLog)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := newStore(t, starts["gpdbob"], 0, "").Ensure(context.Background(), s, testLog); err != nil {
		t.Fatalf("bob's own store: %v", err)
	}
	store := filepath.Join(home["gpdalice"], ".gpudispatch", "code")
	if fi, err := os.Stat(store); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("alice's store: %v, %v; want mode 0700", fi.Mode(), err)
	}
	for _, try := range [][]string{
		{"cat", filepath.Join(aliceTree, "secret.py")},
		{"ls", filepath.Join(store, "blobs")},
		{"touch", filepath.Join(store, "snaps", "planted")},
		{"touch", filepath.Join(home["gpdalice"], ".gpudispatch", "planted")},
	} {
		if out, err := bob.Command(shared, try...).CombinedOutput(); err == nil {
			t.Errorf("bob could %v: %s", try, out)
		}
	}
}

// A store asks the machine again once a tenth of the keep time has passed
// since it last shipped a snapshot: the snapshot is renewed there, or built
// again if another run's prune took it.
func TestEnsureRenews(t *testing.T) {
	s := take(t, project(t, map[string]string{"a.py": "renew"}), t.TempDir())
	st := newStore(t, spawn.Local, 10*time.Minute, "")
	dir, _, err := st.Ensure(context.Background(), s, testLog)
	if err != nil {
		t.Fatal(err)
	}
	st.Close() // the machine keeps the content it got once it answered
	os.RemoveAll(dir)
	os.Remove(dir + ".ok")
	if again, _, _ := st.Ensure(context.Background(), s, testLog); again != dir {
		t.Fatalf("the tree moved: %s then %s", dir, again)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Fatalf("a second call within the keep time's tenth asked the machine again")
	}
	st.mu.Lock()
	st.ships[s.ID+" "+testLog].at = time.Now().Add(-2 * time.Minute)
	st.mu.Unlock()
	if _, sent, err := st.Ensure(context.Background(), s, testLog); err != nil || sent.Files != 0 {
		t.Fatalf("renewing: sent %+v, %v", sent, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a.py")); err != nil || string(b) != "renew" {
		t.Errorf("the tree was not built again: %q, %v", b, err)
	}
}

// A caller whose job is cancelled while the code travels stops waiting,
// with its own cause; the shipping goes on for the other callers.
func TestEnsureOutlivesACancelledCaller(t *testing.T) {
	s := take(t, project(t, map[string]string{"a.py": "slow"}), t.TempDir())
	slow := func(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
		time.Sleep(300 * time.Millisecond)
		return spawn.Local(ctx, line, stdout, stderr)
	}
	st := newStore(t, slow, 0, "")
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("the job was cancelled")
	time.AfterFunc(50*time.Millisecond, func() { cancel(cause) })
	if _, _, err := st.Ensure(ctx, s, testLog); !errors.Is(err, cause) {
		t.Errorf("the cancelled caller got %v, want its cause", err)
	}
	dir, _, err := st.Ensure(context.Background(), s, testLog)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a.py")); err != nil || string(b) != "slow" {
		t.Errorf("the tree: %q, %v", b, err)
	}
}

// A store can live elsewhere than ~/.gpudispatch/code (a Slurm cluster's
// workdir, on its shared filesystem): trees are built there, Tree names
// them as the store was given, and Clean empties it.
func TestStoreElsewhere(t *testing.T) {
	s := take(t, project(t, map[string]string{"a.py": "there"}), t.TempDir())
	st := newStore(t, spawn.Local, 0, "~/scratch/gpd/code")
	dir, _, err := st.Ensure(context.Background(), s, testLog)
	home := os.Getenv("HOME")
	if want := filepath.Join(home, "scratch/gpd/code/work", testLog, s.ID); err != nil || dir != want {
		t.Fatalf("the tree is at %q (%v), want %s", dir, err, want)
	}
	if got := st.Tree(testLog, s.ID); got != "~/scratch/gpd/code/work/"+testLog+"/"+s.ID {
		t.Errorf("Tree: %s", got)
	}
	if fi, err := os.Stat(filepath.Join(home, "scratch/gpd/code")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the store: %v, %v; want a 0700 directory", fi, err)
	}
	st.Close()
	said, err := Clean(context.Background(), spawn.Local, filepath.Join(home, "scratch/gpd/code"))
	if err != nil || !strings.HasPrefix(said, "removed 1 snapshots, 1 working trees and 1 files") {
		t.Errorf("Clean said %q, %v", said, err)
	}
	if said, err := Clean(context.Background(), spawn.Local, "~/none/here"); err != nil || said != "no content store" {
		t.Errorf("Clean of no store said %q, %v", said, err)
	}
}

// gated holds a process's second write to its stdin (the first is the
// store shell's code, the second the coordinator's lists) until open is
// closed, and says on reached that it got there.
type gated struct {
	io.WriteCloser
	writes        int
	reached, open chan struct{}
}

func (g *gated) Write(b []byte) (int, error) {
	if g.writes++; g.writes == 2 {
		close(g.reached)
		<-g.open
	}
	return g.WriteCloser.Write(b)
}

// cut is a store shell's stdin whose tar stream (its third write) ends
// before its entry for base/KEY/a.py: where a lost connection can end it,
// between two entries, which tar takes for the archive's end.
type cut struct {
	io.WriteCloser
	writes int
}

func (c *cut) Write(b []byte) (int, error) {
	if c.writes++; c.writes != 3 {
		return c.WriteCloser.Write(b)
	}
	for off := len(b) - 512; off >= 0; off -= 512 {
		name := string(bytes.TrimRight(b[off:off+100], "\x00"))
		if strings.HasPrefix(name, "base/") && !strings.Contains(name, ".spare") && strings.HasSuffix(name, "/a.py") {
			c.WriteCloser.Write(b[:off])
			break
		}
	}
	c.WriteCloser.Close()
	return 0, errors.New("cut off")
}

// A build from the base cut off midway (the spare changed, the base not
// yet) is not taken for built, and leaves no base that says it is a
// snapshot it is not: the next snapshot, which differs from the cut-off
// one only elsewhere, is built right.
func TestShipCutOff(t *testing.T) {
	dir := project(t, map[string]string{"a.py": "a1", "b.py": "b1"})
	local := t.TempDir()
	home := t.TempDir()
	// A short host name: no tar entry needs a long-name record.
	start := homeIn(home, "HOSTNAME=h")
	st := newStore(t, start, 0, "")
	if _, _, err := st.Ensure(context.Background(), take(t, dir, local), testLog); err != nil {
		t.Fatal(err)
	}
	st.Close() // the spare is made
	os.WriteFile(filepath.Join(dir, "a.py"), []byte("a2"), 0o644)
	cutOff := func(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
		proc, err := start(ctx, line, stdout, stderr)
		if err == nil {
			proc.Stdin = &cut{WriteCloser: proc.Stdin}
		}
		return proc, err
	}
	second := take(t, dir, local)
	cutSt := newStore(t, cutOff, 0, "")
	if _, _, err := cutSt.Ensure(context.Background(), second, testLog); err == nil {
		t.Fatal("a build whose tar stream was cut off succeeded")
	}
	cutSt.Close()
	if _, err := os.Stat(filepath.Join(home, ".gpudispatch/code/snaps", second.ID+".ok")); err == nil {
		t.Errorf("the cut-off tree is marked whole")
	}
	os.WriteFile(filepath.Join(dir, "b.py"), []byte("b3"), 0o644)
	s := take(t, dir, local)
	got, _, err := newStore(t, start, 0, "").Ensure(context.Background(), s, testLog)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a.py": "a2", "b.py": "b3"}
	if diff := compare(tree(t, got), want); diff != "" {
		t.Errorf("the tree after a cut-off build: %s", diff)
	}
}

// Two builds of one directory's next snapshots at once on a machine: the
// one that read the base before the other replaced it, and took the lock
// after, asks again, and is built from the base the other left, right.
func TestShipRace(t *testing.T) {
	// Content no earlier run built: a tree the machine has would be
	// answered at once.
	fresh := fmt.Sprint(time.Now().UnixNano())
	dir := project(t, map[string]string{"a.py": "a1", "b.py": "b1", "fresh": fresh})
	local := t.TempDir()
	first := newStore(t, spawn.Local, 0, "")
	if _, _, err := first.Ensure(context.Background(), take(t, dir, local), testLog); err != nil {
		t.Fatal(err)
	}
	first.Close() // the spare is made
	os.WriteFile(filepath.Join(dir, "a.py"), []byte("a2"), 0o644)
	second := take(t, dir, local)
	os.WriteFile(filepath.Join(dir, "b.py"), []byte("b3"), 0o644)
	third := take(t, dir, local)

	type result struct {
		dir string
		err error
	}
	// build ships s from a store whose first shell's stdin is g, and
	// counts the shells it starts in starts.
	build := func(s *executor.Code, g *gated, starts *int) chan result {
		start := func(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
			proc, err := spawn.Local(ctx, line, stdout, stderr)
			if *starts++; err == nil && *starts == 1 {
				g.WriteCloser = proc.Stdin
				proc.Stdin = g
			}
			return proc, err
		}
		done := make(chan result, 1)
		go func() {
			got, _, err := newStore(t, start, 0, "").Ensure(context.Background(), s, testLog)
			done <- result{got, err}
		}()
		return done
	}
	// The third snapshot's build holds the lock, its lists not yet sent.
	held := &gated{reached: make(chan struct{}), open: make(chan struct{})}
	var thirdStarts int
	thirdDone := build(third, held, &thirdStarts)
	<-held.reached
	// Its shell takes the lock in the background as it starts: the
	// second must come to it held, whatever the load.
	waitBaseLocked(t)
	// The second's has read the base, and waits for the lock.
	asked := &gated{reached: make(chan struct{}), open: make(chan struct{})}
	close(asked.open)
	var secondStarts int
	secondDone := build(second, asked, &secondStarts)
	<-asked.reached
	close(held.open)
	for _, c := range []struct {
		name   string
		done   chan result
		starts *int
		want   map[string]string
	}{
		{"third", thirdDone, &thirdStarts, map[string]string{"a.py": "a2", "b.py": "b3", "fresh": fresh}},
		{"second", secondDone, &secondStarts, map[string]string{"a.py": "a2", "b.py": "b1", "fresh": fresh}},
	} {
		r := <-c.done
		if r.err != nil {
			t.Fatalf("the %s snapshot's build: %v", c.name, r.err)
		}
		if diff := compare(tree(t, r.dir), c.want); diff != "" {
			t.Errorf("the %s snapshot's tree: %s", c.name, diff)
		}
	}
	if thirdStarts != 1 || secondStarts != 2 {
		t.Errorf("the store shells were started %d and %d times; want 1, and 2 for the build that came second to the base", thirdStarts, secondStarts)
	}
}

// waitBaseLocked waits until a build holds the lock of a base of the
// store in $HOME (flock(1) on base/KEY.lock).
func waitBaseLocked(t *testing.T) {
	t.Helper()
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	for range 2000 {
		locks, _ := filepath.Glob(filepath.Join(home, ".gpudispatch", "code", "base", "*.lock"))
		for _, l := range locks {
			if exec.Command("flock", "-n", l, "true").Run() != nil {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no build took the lock of a base within 10 s")
}

// A next snapshot that changes and removes thousands of files (lists too
// long for one command line) is built from the base as one that changes
// a few.
func TestShipManyChanges(t *testing.T) {
	files := map[string]string{}
	for i := range 3000 {
		files[fmt.Sprintf("dir-%02d/a-rather-long-file-name-%04d.py", i%30, i)] = fmt.Sprint("v1 ", i)
	}
	dir := project(t, files)
	local := t.TempDir()
	home := t.TempDir()
	start := homeIn(home)
	st := newStore(t, start, 0, "")
	if _, _, err := st.Ensure(context.Background(), take(t, dir, local), testLog); err != nil {
		t.Fatal(err)
	}
	st.Close()
	want := map[string]string{}
	for p, content := range files {
		var i int
		fmt.Sscanf(content, "v1 %d", &i)
		switch {
		case i%2 == 0:
			os.Remove(filepath.Join(dir, p))
		default:
			want[p] = fmt.Sprint("v2 ", i)
			os.WriteFile(filepath.Join(dir, p), []byte(want[p]), 0o644)
		}
	}
	s := take(t, dir, local)
	got, sent, err := st.Ensure(context.Background(), s, testLog)
	if err != nil {
		t.Fatal(err)
	}
	if sent.Files != 1500 {
		t.Errorf("sent %+v; want the 1500 changed files", sent)
	}
	if diff := compare(tree(t, got), want); diff != "" {
		t.Errorf("the tree: %.300s", diff)
	}
	st.Close()
	if diff := compare(tree(t, filepath.Join(home, ".gpudispatch/code/base", s.Key)), want); diff != "" {
		t.Errorf("the base: %.300s", diff)
	}
}

// A copy swapped in the coordinator's cache after the snapshot was taken
// (a colleague who could write there put print("pwnd!!") in a pack) is
// caught by its hash as it ships: the run is told, nothing is built, and
// no blob of the store holds it.
func TestShipSwappedCopy(t *testing.T) {
	local := t.TempDir()
	s := take(t, project(t, map[string]string{"train.py": "print('train')"}), local)
	packs, _ := filepath.Glob(filepath.Join(local, "packs", "*"))
	if len(packs) != 1 {
		t.Fatalf("packs %v, want one", packs)
	}
	if err := os.WriteFile(packs[0], []byte("print('pwnd!!')")[:len("print('train')")], 0o600); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	_, _, err := newStore(t, homeIn(home), 0, "").Ensure(context.Background(), s, testLog)
	if err == nil || !strings.Contains(err.Error(), "copy of train.py no longer holds the content the snapshot took") {
		t.Errorf("shipping a swapped copy: %v", err)
	}
	built, _ := filepath.Glob(filepath.Join(home, ".gpudispatch", "code", "*", "*", s.ID+"*"))
	snaps, _ := filepath.Glob(filepath.Join(home, ".gpudispatch", "code", "snaps", s.ID+"*"))
	if len(built)+len(snaps) != 0 {
		t.Errorf("a tree was built: %v %v", built, snaps)
	}
	filepath.Walk(filepath.Join(home, ".gpudispatch", "code"), func(p string, fi os.FileInfo, err error) error {
		if b, _ := os.ReadFile(p); err == nil && fi.Mode().IsRegular() && strings.Contains(string(b), "pwnd") {
			t.Errorf("%s holds the swapped content", p)
		}
		return nil
	})
}
