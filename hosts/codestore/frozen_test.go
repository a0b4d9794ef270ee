package codestore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// shipped is the project the frozen-snapshot tests ship: one file per
// way a job may write into a shipped file.
var shipped = map[string]string{
	"append.txt":   "shipped append\n",
	"rplus.txt":    "shipped rplus\n",
	"trunc.txt":    "shipped trunc\n",
	"chmod.txt":    "shipped chmod\n",
	"sed.txt":      "shipped sed\n",
	"rename.txt":   "shipped rename\n",
	"hardlink.txt": "shipped hardlink\n",
	"run.sh":       "x:#!/bin/sh\necho shipped run\n",
}

// writes does to the tree it runs in every way a job writes into a
// shipped file, each after a chmod u+w (a file's owner may always make it
// writable; root needs no chmod).
const writes = `set -e
chmod u+w append.txt rplus.txt trunc.txt chmod.txt sed.txt hardlink.txt run.sh
echo CORRUPTED >>append.txt
printf XX | dd of=rplus.txt conv=notrunc status=none
: >trunc.txt
chmod 0666 chmod.txt && echo CORRUPTED >chmod.txt
sed -i s/shipped/CORRUPTED/ sed.txt
echo CORRUPTED >new && mv -f new rename.txt
ln hardlink.txt linked && echo CORRUPTED >>linked
echo 'echo CORRUPTED' >>run.sh
`

// Nothing a job does to the files of its tree reaches the machine's
// content store or another log dir's tree: after every kind of write, as
// the store's owner (root, where the tests run as root) and as another
// Unix user, every blob still holds the content it is named by, a new log
// dir's tree of the same snapshot and a tree of a new snapshot that ships
// the same files hold the shipped bytes, and so does the same log dir's
// tree of its next snapshot (what a job changed is not passed on).
func TestJobsCannotChangeTheStore(t *testing.T) {
	t.Run("owner", func(t *testing.T) {
		home := t.TempDir()
		writeEverything(t, homeIn(home), home)
	})
	t.Run("another user", func(t *testing.T) {
		u := sshtest.NewUser(t, "gpdalice")
		shared := sshtest.SharedDir(t)
		home := filepath.Join(shared, "frozen")
		if err := os.Mkdir(home, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chown(home, u.UID, u.GID)
		start := func(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
			return spawn.Local(ctx, u.Line("export HOME="+home+"; "+line), stdout, stderr)
		}
		writeEverything(t, start, home)
	})
}

func writeEverything(t *testing.T, start spawn.Func, home string) {
	dir := project(t, shipped)
	local := t.TempDir()
	s := take(t, dir, local)
	st := newStore(t, start, 0, "")
	first, _, err := st.Ensure(context.Background(), s, "a")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := bashIn(start, first, writes); err != nil {
		t.Fatalf("the job's writes: %v: %s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(first, "append.txt")); !strings.Contains(string(b), "CORRUPTED") {
		t.Fatalf("the job could not write its own tree: append.txt reads %q", b)
	}
	st.Close()
	store := filepath.Join(home, ".gpudispatch", "code")
	checkBlobs(t, store)
	// Another log dir, the same snapshot.
	other, _, err := st.Ensure(context.Background(), s, "b")
	if err != nil {
		t.Fatal(err)
	}
	if diff := compare(tree(t, other), shipped); diff != "" {
		t.Errorf("another log dir's tree of the snapshot: %s", diff)
	}
	// A new snapshot that ships the same files, in a third log dir and in
	// the log dir whose job wrote (its next tree).
	os.WriteFile(filepath.Join(dir, "more.txt"), []byte("more"), 0o644)
	s2 := take(t, dir, local)
	want := map[string]string{"more.txt": "more"}
	for p, c := range shipped {
		want[p] = c
	}
	third, _, err := st.Ensure(context.Background(), s2, "c")
	if err != nil {
		t.Fatal(err)
	}
	if diff := compare(tree(t, third), want); diff != "" {
		t.Errorf("a new snapshot's tree: %s", diff)
	}
	next, _, err := st.Ensure(context.Background(), s2, "a")
	if err != nil {
		t.Fatal(err)
	}
	// What the job wrote is its own (writable, not shipped): read apart.
	if b, _ := os.ReadFile(filepath.Join(next, "linked")); string(b) != "shipped hardlink\nCORRUPTED\n" {
		t.Errorf("the log dir's next tree lacks what its job wrote: linked reads %q", b)
	}
	os.Remove(filepath.Join(next, "linked"))
	if diff := compare(tree(t, next), want); diff != "" {
		t.Errorf("the log dir's next tree: %s", diff)
	}
	st.Close()
	checkBlobs(t, store)
}

// bashIn runs script with bash in dir on the machine start runs bash on.
func bashIn(start spawn.Func, dir, script string) (string, error) {
	var out bytes.Buffer
	p, err := start(context.Background(), "cd "+dir+" && bash -s", &out, &out)
	if err != nil {
		return "", err
	}
	io.WriteString(p.Stdin, script)
	p.Stdin.Close()
	err = p.Wait()
	return out.String(), err
}

// checkBlobs fails unless every blob of the store holds the content whose
// hash names it.
func checkBlobs(t *testing.T, store string) {
	t.Helper()
	n := 0
	filepath.WalkDir(filepath.Join(store, "blobs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Error(err)
			return nil
		}
		sum := sha256.Sum256(b)
		if name := strings.TrimSuffix(d.Name(), "x"); hex.EncodeToString(sum[:]) != name {
			t.Errorf("blob %s now holds %q", d.Name(), b)
		}
		n++
		return nil
	})
	if n == 0 {
		t.Errorf("no blob in %s", store)
	}
}

// Each log dir has its own working tree of a snapshot: a new log dir sees
// nothing another wrote; the same log dir finds what its jobs wrote (a
// --resume finds its checkpoints), also in its tree of the next snapshot,
// which holds that snapshot's files as shipped (a job's change to one is
// not passed on) and shares none with the last tree. A tree starts as the
// directory's spare copy, made once the machine answered: taken by the
// next tree, and made again of the newest snapshot.
func TestLogDirTrees(t *testing.T) {
	home := t.TempDir()
	start := homeIn(home)
	base := filepath.Join(home, ".gpudispatch", "code", "base")
	dir := project(t, map[string]string{"train.py": "v1", "config.txt": "lr: 0.1\n", "util.py": "u"})
	local := t.TempDir()
	st := newStore(t, start, 0, "")
	ensure := func(s *executor.Code, log string) string {
		t.Helper()
		tree, _, err := st.Ensure(context.Background(), s, log)
		if err != nil {
			t.Fatal(err)
		}
		st.Close() // the machine's work after its answer: the spare
		return tree
	}
	s1 := take(t, dir, local)
	a := ensure(s1, "a")
	// taken says whether the tree is the spare copy spare was (renamed).
	taken := func(spare os.FileInfo, tree string) bool {
		fi, err := os.Stat(tree)
		return spare != nil && err == nil && os.SameFile(spare, fi)
	}
	spare1, err := os.Stat(filepath.Join(base, s1.Key+".work."+s1.ID))
	if err != nil {
		t.Errorf("no spare copy of the snapshot once the machine answered: %v", err)
	}
	if out, err := bashIn(start, a, "mkdir out && echo epoch3 >out/ckpt && chmod u+w config.txt && echo CORRUPTED >>config.txt"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	b := ensure(s1, "b")
	if !taken(spare1, b) {
		t.Errorf("a new log dir's tree of the snapshot is not the spare copy")
	}
	spare2, _ := os.Stat(filepath.Join(base, s1.Key+".work."+s1.ID))
	if diff := compare(tree(t, b), map[string]string{"train.py": "v1", "config.txt": "lr: 0.1\n", "util.py": "u"}); diff != "" {
		t.Errorf("a new log dir's tree: %s", diff)
	}
	if again := ensure(s1, "a"); again != a {
		t.Fatalf("the log dir's tree again: %s; want %s", again, a)
	}
	if got, _ := os.ReadFile(filepath.Join(a, "out/ckpt")); string(got) != "epoch3\n" {
		t.Errorf("the log dir's checkpoint, again: %q", got)
	}
	os.WriteFile(filepath.Join(dir, "train.py"), []byte("v2"), 0o644)
	s2 := take(t, dir, local)
	a2 := ensure(s2, "a")
	if !taken(spare2, a2) {
		t.Errorf("the next snapshot's tree is not the spare copy of the last one, changed")
	}
	got := map[string]string{}
	for _, p := range []string{"train.py", "config.txt", "util.py", "out/ckpt"} {
		b, _ := os.ReadFile(filepath.Join(a2, p))
		got[p] = string(b)
	}
	if diff := compare(got, map[string]string{"train.py": "v2", "config.txt": "lr: 0.1\n", "util.py": "u", "out/ckpt": "epoch3\n"}); diff != "" {
		t.Errorf("the log dir's tree of its next snapshot: %s", diff)
	}
	same := func(p string) bool {
		x, err1 := os.Stat(filepath.Join(a, p))
		y, err2 := os.Stat(filepath.Join(a2, p))
		return err1 == nil && err2 == nil && os.SameFile(x, y)
	}
	if !same("out/ckpt") || same("util.py") || same("config.txt") {
		t.Errorf("shared with the last tree: out/ckpt %t (want it), util.py %t, config.txt %t (want neither)",
			same("out/ckpt"), same("util.py"), same("config.txt"))
	}
	if got, _ := os.ReadFile(filepath.Join(a, "train.py")); string(got) != "v1" {
		t.Errorf("the first tree changed: train.py reads %q", got)
	}
	spares, _ := filepath.Glob(filepath.Join(base, s2.Key+".work.*"))
	if len(spares) != 1 || filepath.Base(spares[0]) != s2.Key+".work."+s2.ID {
		t.Fatalf("spares after the second snapshot: %v; want one, of it", spares)
	}
	spare3, _ := os.Stat(spares[0])
	// A coordinator that knows no earlier snapshot (a cache of its own)
	// sends no differences: the machine finds them itself.
	os.Remove(filepath.Join(dir, "util.py"))
	os.WriteFile(filepath.Join(dir, "new.py"), []byte("n"), 0o644)
	a3 := ensure(take(t, dir, t.TempDir()), "a")
	if !taken(spare3, a3) {
		t.Errorf("the third tree is not the spare copy of the second, changed")
	}
	got = map[string]string{}
	filepath.Walk(a3, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(a3, p)
			got[rel] = string(b)
		}
		return nil
	})
	if diff := compare(got, map[string]string{"train.py": "v2", "config.txt": "lr: 0.1\n", "new.py": "n", "out/ckpt": "epoch3\n"}); diff != "" {
		t.Errorf("the third tree: %s", diff)
	}
}

// A store that an earlier gpudispatch made, whose jobs could write into
// its blobs, is checked once: a blob whose content is no longer its hash
// is removed and shipped again, with a warning, and no tree is built of
// it.
func TestOldStoreChecked(t *testing.T) {
	home := t.TempDir()
	start := homeIn(home)
	s := take(t, project(t, map[string]string{"config.txt": "lr: 0.1\n", "ok.py": "fine"}), t.TempDir())
	st := newStore(t, start, 0, "")
	if _, _, err := st.Ensure(context.Background(), s, "a"); err != nil {
		t.Fatal(err)
	}
	st.Close() // the blobs go into the store once it answered
	store := filepath.Join(home, ".gpudispatch", "code")
	os.Remove(filepath.Join(store, ".unshared"))
	corrupt(t, store, s, "config.txt")
	dir, sent, err := newStore(t, start, 0, "").Ensure(context.Background(), s, "b")
	if err != nil {
		t.Fatal(err)
	}
	if len(sent.Warnings) != 1 || !strings.Contains(sent.Warnings[0], "1 files of the content store") {
		t.Errorf("warnings %q; want one of 1 file", sent.Warnings)
	}
	if sent.Files != 1 {
		t.Errorf("sent %+v; want the one file again", sent)
	}
	if diff := compare(tree(t, dir), map[string]string{"config.txt": "lr: 0.1\n", "ok.py": "fine"}); diff != "" {
		t.Errorf("the tree: %s", diff)
	}
	checkBlobs(t, store)
	// Checked once.
	if _, sent, err := newStore(t, start, 0, "").Ensure(context.Background(), s, "c"); err != nil || len(sent.Warnings) != 0 {
		t.Errorf("again: %v, %q", err, sent.Warnings)
	}
}

// A blob changed after the store was checked (by hand: no job reaches
// one) is caught as the next spare copy of its snapshot is made: no tree
// is made of it again, the next shipping sends it anew and says so.
func TestChangedBlobCaught(t *testing.T) {
	home := t.TempDir()
	start := homeIn(home)
	dir := project(t, map[string]string{"config.txt": "lr: 0.1\n", "a.py": "a"})
	local := t.TempDir()
	st := newStore(t, start, 0, "")
	s := take(t, dir, local)
	if _, _, err := st.Ensure(context.Background(), s, "a"); err != nil {
		t.Fatal(err)
	}
	st.Close()
	store := filepath.Join(home, ".gpudispatch", "code")
	corrupt(t, store, s, "config.txt")
	// A new snapshot that ships the file too: its spare is made of it.
	os.WriteFile(filepath.Join(dir, "a.py"), []byte("a2"), 0o644)
	s2 := take(t, dir, local)
	b, _, err := st.Ensure(context.Background(), s2, "b")
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if got, _ := os.ReadFile(filepath.Join(b, "config.txt")); string(got) != "lr: 0.1\n" {
		t.Errorf("the tree made from the last spare reads %q", got)
	}
	c, sent, err := st.Ensure(context.Background(), s2, "c")
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if len(sent.Warnings) != 1 || !strings.Contains(sent.Warnings[0], "no longer held the content") || sent.Files == 0 {
		t.Errorf("the next shipping sent %+v; want the changed blob again, said", sent)
	}
	if got, _ := os.ReadFile(filepath.Join(c, "config.txt")); string(got) != "lr: 0.1\n" {
		t.Errorf("the next tree reads %q", got)
	}
	checkBlobs(t, store)
}

// corrupt changes, by hand, the blob of store that holds the content of
// path in s.
func corrupt(t *testing.T, store string, s *executor.Code, path string) {
	t.Helper()
	for _, f := range s.Files {
		if f.Path == path {
			blob := filepath.Join(store, "blobs", f.Blob()[:2], f.Blob())
			os.Chmod(blob, 0o644)
			if err := os.WriteFile(blob, []byte("CORRUPTED\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("the snapshot has no %s", path)
}
