package results

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

func TestMain(m *testing.M) { os.Exit(sshtest.RunWithOwnHome(m)) }

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

// read reads the files under dir back, path: content.
func read(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			b, _ := os.ReadFile(p)
			got[rel] = string(b)
		}
		return nil
	})
	return got
}

// workdir is what a job left in its workdir.
var workdir = map[string]string{
	"out/a.txt":         "a\n",
	"out/sub/deep/b.pt": strings.Repeat("b", 300_000),
	"out/.hidden":       "h",
	"m1.json":           `{"loss":1}`,
	"m2.json":           `{"loss":2}`,
	"code.py":           "not asked for",
	"best.pt":           "->out/sub/deep/b.pt",
	"data":              "->/usr",
	"dangling":          "->nowhere",
	"has space/x y.txt": "spaces",
}

// returned is what the paths below bring back.
var returned = map[string]string{
	"out/a.txt":         "a\n",
	"out/sub/deep/b.pt": strings.Repeat("b", 300_000),
	"out/.hidden":       "h",
	"m1.json":           `{"loss":1}`,
	"m2.json":           `{"loss":2}`,
	"best.pt":           strings.Repeat("b", 300_000),
	"has space/x y.txt": "spaces",
}

var paths = []string{"out/", "*.json", "best.pt", "data", "dangling", "nothing/*.csv", "has space/*", "$(touch pwned)"}

// Directories, globs and links come back under their relative paths, from
// a workdir or a snapshot's tree, here and from real OpenSSH hosts; what
// names nothing and links to no file are said; a second fetch sends nothing.
func TestFetch(t *testing.T) {
	check := func(t *testing.T, start spawn.Func, home string) {
		for _, from := range []executor.Return{
			{Workdir: "~/work"},
			{Workdir: filepath.Join(home, "work")},
			{Workdir: "work"},
			{Snapshot: "0123abcd"},
			{Snapshot: "0123abcd", Tree: "9f"},
		} {
			dir := filepath.Join(home, "work")
			switch {
			case from.Tree != "":
				dir = filepath.Join(home, ".gpudispatch/code/work", from.Tree, from.Snapshot)
			case from.Snapshot != "":
				dir = filepath.Join(home, ".gpudispatch/code/snaps", from.Snapshot)
			}
			os.RemoveAll(dir)
			write(t, dir, workdir)
			from.Paths = paths
			dst := t.TempDir()
			got, err := Fetch(context.Background(), start, from, dst, 0)
			if err != nil {
				t.Fatalf("%+v: %v", from, err)
			}
			if diff := compare(read(t, dst), returned); diff != "" {
				t.Errorf("%+v: %s", from, diff)
			}
			if len(got.Files) != len(returned) {
				t.Errorf("%+v: Files %v", from, got.Files)
			}
			if !slices.Equal(got.Missing, []string{"nothing/*.csv", "$(touch pwned)"}) || !slices.Equal(got.Links, []string{"data", "dangling"}) {
				t.Errorf("%+v: missing %q, links %q", from, got.Missing, got.Links)
			}
			if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
				t.Errorf("a path was run as a command")
			}
			again, err := Fetch(context.Background(), start, from, dst, 0)
			if err != nil || len(again.Files) != len(returned) {
				t.Errorf("%+v: the second fetch: %v, %v", from, again.Files, err)
			}
		}
		_, err := Fetch(context.Background(), start, executor.Return{Workdir: "~/gone", Paths: paths}, t.TempDir(), 0)
		if err == nil || !strings.Contains(err.Error(), "workdir "+home+"/gone is not there any more") {
			t.Errorf("a workdir gone: %v", err)
		}
	}
	t.Run("local", func(t *testing.T) { check(t, spawn.Local, os.Getenv("HOME")) })
	t.Run("ssh", func(t *testing.T) {
		lab := sshtest.Start(t, sshtest.Options{Hosts: 2})
		for _, h := range lab.Hosts {
			check(t, lab.Spawn(h.Name), h.Home)
		}
	})
}

// compare says how got differs from want.
func compare(got, want map[string]string) string {
	var b strings.Builder
	for p, w := range want {
		if g, ok := got[p]; !ok {
			b.WriteString(" missing " + p + ";")
		} else if g != w {
			b.WriteString(" " + p + " differs;")
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			b.WriteString(" extra " + p + ";")
		}
	}
	return b.String()
}

// cutAfter starts bash as spawn.Local does, but its stdout breaks off
// after n bytes, as a lost connection would.
func cutAfter(n int64, counted *int64) spawn.Func {
	return func(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
		ctx, cancel := context.WithCancel(ctx)
		w := &cutWriter{w: stdout, left: n, counted: counted, cut: cancel}
		p, err := spawn.Local(ctx, line, w, stderr)
		if err != nil {
			cancel()
			return nil, err
		}
		wait := p.Wait
		p.Wait = func() error {
			err := wait()
			if w.left <= 0 {
				return errors.New("connection lost") // no exit status
			}
			return err
		}
		return p, nil
	}
}

type cutWriter struct {
	w       io.Writer
	left    int64
	counted *int64
	cut     func()
}

func (c *cutWriter) Write(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, errors.New("cut")
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	c.left -= int64(len(p))
	*c.counted += int64(len(p))
	n, err := c.w.Write(p)
	if c.left <= 0 {
		c.cut()
		return n, errors.New("cut")
	}
	return n, err
}

// A fetch cut off halfway through a large file goes on from the byte it
// reached: the second fetch carries the rest, not the whole file again.
func TestFetchResumes(t *testing.T) {
	home := os.Getenv("HOME")
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	write(t, filepath.Join(home, "resume"), map[string]string{"ckpt.pt": string(big), "small": "s"})
	from := executor.Return{Workdir: "~/resume", Paths: []string{"ckpt.pt", "small"}}
	dst := t.TempDir()
	var first, second int64
	_, err := Fetch(context.Background(), cutAfter(600_000, &first), from, dst, 0)
	if !errors.Is(err, executor.ErrHostDown) {
		t.Fatalf("a fetch cut off: %v; want ErrHostDown", err)
	}
	if _, err := os.Stat(filepath.Join(dst, "ckpt.pt")); err == nil {
		t.Fatal("a file cut off is in place")
	}
	got, err := Fetch(context.Background(), cutAfter(1<<30, &second), from, dst, 0)
	if err != nil || len(got.Files) != 2 {
		t.Fatalf("the second fetch: %+v, %v", got, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "ckpt.pt")); !bytes.Equal(b, big) {
		t.Errorf("the resumed file differs (%d bytes)", len(b))
	}
	if second > int64(len(big))-first+20_000 {
		t.Errorf("the second fetch carried %d bytes after the first carried %d of a %d-byte file: it did not resume", second, first, len(big))
	}
	if _, err := os.Stat(filepath.Join(dst, partialDir)); err == nil {
		t.Errorf("%s is left in the results", partialDir)
	}
}

// changing writes to a file of the workdir as the coordinator answers the
// list (its first write past the header, of header bytes: the script and
// what to send): the file then changes while it is sent.
type changing struct {
	io.WriteCloser
	header, written int
	file            string
}

func (c *changing) Write(p []byte) (int, error) {
	before := c.written
	c.written += len(p)
	if before == c.header {
		f, _ := os.OpenFile(c.file, os.O_APPEND|os.O_WRONLY, 0)
		f.WriteString("more")
		f.Close()
	}
	return c.WriteCloser.Write(p)
}

// A file that changes while it is sent is not kept, and said.
func TestFetchChanged(t *testing.T) {
	home := os.Getenv("HOME")
	write(t, filepath.Join(home, "changing"), map[string]string{"log.txt": "first", "ok.txt": "ok"})
	start := func(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
		p, err := spawn.Local(ctx, line, stdout, stderr)
		if err == nil {
			header := len(script) + len(asking(executor.Return{Workdir: "~/changing", Paths: []string{"*.txt"}}))
			p.Stdin = &changing{WriteCloser: p.Stdin, header: header, file: filepath.Join(home, "changing/log.txt")}
		}
		return p, err
	}
	dst := t.TempDir()
	got, err := Fetch(context.Background(), start, executor.Return{Workdir: "~/changing", Paths: []string{"*.txt"}}, dst, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Changed, []string{"log.txt"}) || len(got.Files) != 1 || got.Files[0].Path != "ok.txt" {
		t.Errorf("got %+v; want log.txt changed, ok.txt back", got)
	}
	if _, err := os.Stat(filepath.Join(dst, "log.txt")); err == nil {
		t.Error("a file that changed as it was sent is kept")
	}
}

// hangAfter is a machine whose output stops after n bytes and never comes
// again (its disk hangs), until the fetch gives it up.
func hangAfter(n int64) spawn.Func {
	return func(ctx context.Context, line string, stdout, stderr io.Writer) (*spawn.Proc, error) {
		return spawn.Local(ctx, line, &hangWriter{w: stdout, left: n, done: ctx.Done()}, stderr)
	}
}

type hangWriter struct {
	w    io.Writer
	left int64
	done <-chan struct{}
}

func (h *hangWriter) Write(p []byte) (int, error) {
	if h.left <= 0 {
		<-h.done
		return 0, errors.New("hung")
	}
	if int64(len(p)) > h.left {
		n, _ := h.w.Write(p[:h.left])
		h.left = 0
		<-h.done
		return n, errors.New("hung")
	}
	h.left -= int64(len(p))
	return h.w.Write(p)
}

// A machine that goes quiet halfway through a file is given up once it
// has sent nothing for the quiet time, with words that say so; a later
// fetch brings the rest.
func TestFetchGivesUpAQuietMachine(t *testing.T) {
	home := os.Getenv("HOME")
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	write(t, filepath.Join(home, "quiet"), map[string]string{"ckpt.pt": string(big)})
	from := executor.Return{Workdir: "~/quiet", Paths: []string{"ckpt.pt"}}
	dst := t.TempDir()
	start := time.Now()
	_, err := Fetch(context.Background(), hangAfter(300_000), from, dst, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "neither sent nor took a byte for 300ms") || errors.Is(err, executor.ErrHostDown) {
		t.Fatalf("a machine gone quiet: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("giving up took %v", took)
	}
	got, err := Fetch(context.Background(), spawn.Local, from, dst, 0)
	if err != nil || len(got.Files) != 1 {
		t.Fatalf("the fetch after: %+v, %v", got, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "ckpt.pt")); !bytes.Equal(b, big) {
		t.Errorf("ckpt.pt came back with %d bytes, not the file", len(b))
	}
}

// A glob never follows a link to a directory: lnk/* with lnk leading to a
// directory of keys out of the workdir (or in it) brings nothing of it,
// and says so; what the glob names beside it still comes.
func TestFetchNoDirLinks(t *testing.T) {
	home := os.Getenv("HOME")
	keys := t.TempDir()
	os.WriteFile(filepath.Join(keys, "ssh_host_ed25519_key"), []byte("PRIVATE"), 0o600)
	write(t, filepath.Join(home, "linked"), map[string]string{"lnk": "->" + keys, "in/ok.txt": "ok", "inlnk": "->in"})
	dst := t.TempDir()
	got, err := Fetch(context.Background(), spawn.Local, executor.Return{Workdir: "~/linked", Paths: []string{"lnk/*", "lnk/**", "inlnk/*", "in/*"}}, dst, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Files) != 1 || got.Files[0].Path != "in/ok.txt" {
		t.Errorf("brought %+v; want in/ok.txt alone", got.Files)
	}
	if len(got.Links) < 2 {
		t.Errorf("the links not followed are not said: %q", got.Links)
	}
	if _, err := os.Stat(filepath.Join(dst, "lnk")); err == nil {
		t.Errorf("something of the linked directory came back")
	}
}

// A sparse file (a 300 MB checkpoint of holes) comes back sparse: its
// length and bytes as they are, its holes not written here.
func TestFetchSparse(t *testing.T) {
	home := os.Getenv("HOME")
	dir := filepath.Join(home, "sparse")
	os.MkdirAll(dir, 0o755)
	f, err := os.Create(filepath.Join(dir, "ckpt.bin"))
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("head"), 0)
	f.WriteAt([]byte("middle"), 150<<20)
	f.Truncate(300 << 20)
	f.Close()
	dst := t.TempDir()
	got, err := Fetch(context.Background(), spawn.Local, executor.Return{Workdir: "~/sparse", Paths: []string{"ckpt.bin"}}, dst, 0)
	if err != nil || len(got.Files) != 1 {
		t.Fatalf("%+v, %v", got, err)
	}
	back := filepath.Join(dst, "ckpt.bin")
	fi, err := os.Stat(back)
	if err != nil || fi.Size() != 300<<20 {
		t.Fatalf("came back as %v, %v; want 300 MiB", fi, err)
	}
	if used := fi.Sys().(*syscall.Stat_t).Blocks * 512; used > 1<<20 {
		t.Errorf("the file uses %d bytes of disk here; want its holes left holes", used)
	}
	b := make([]byte, 6)
	r, _ := os.Open(back)
	defer r.Close()
	if r.ReadAt(b[:4], 0); string(b[:4]) != "head" {
		t.Errorf("its start reads %q", b[:4])
	}
	if r.ReadAt(b, 150<<20); string(b) != "middle" {
		t.Errorf("its middle reads %q", b)
	}
}

// --return-limit: the files past the limit, in the order they are
// listed, stay on the host and are named; those before it come.
func TestFetchLimit(t *testing.T) {
	home := os.Getenv("HOME")
	write(t, filepath.Join(home, "limited"), map[string]string{"a.txt": strings.Repeat("a", 600), "b.txt": strings.Repeat("b", 600), "c.txt": "c"})
	dst := t.TempDir()
	got, err := Fetch(context.Background(), spawn.Local, executor.Return{Workdir: "~/limited", Paths: []string{"a.txt", "b.txt", "c.txt"}, Limit: 1000}, dst, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Files) != 1 || got.Files[0].Path != "a.txt" || !slices.Equal(got.Over, []string{"b.txt", "c.txt"}) {
		t.Errorf("got %+v; want a.txt, and b.txt and c.txt over the limit", got)
	}
	if _, err := os.Stat(filepath.Join(dst, "b.txt")); err == nil {
		t.Error("a file over the limit came back")
	}
}
