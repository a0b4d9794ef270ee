package results

import (
	"archive/tar"
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
)

//go:embed results.sh
var resultsScript string

// script is what a fetch runs: results.sh after the exit statuses' names.
var script = spawn.Prelude + resultsScript

// ProcessName is the sending shell's $0, for ps.
const ProcessName = "gpudispatch-return"

// partialDir holds, in the destination, the files still coming.
const partialDir = executor.PartialDir

// entry is a file the machine lists.
type entry struct {
	path  string // clean, relative
	size  int64
	raw   string // the path as the machine said it ("./...")
	mtime time.Time
	at    int64 // where its bytes start; -1: not sent
}

// DefaultQuiet is how long a fetch waits on a machine that sends and
// takes nothing before it gives up.
const DefaultQuiet = 5 * time.Minute

// Fetch copies into the directory dst (which must exist) the files that
// from.Paths name in a job's workdir on the machine start runs bash on,
// under the same relative paths. It resumes the files a cut-off fetch
// left in dst, and skips those dst already has as they are there. New
// files get dst's mode without its execute bits. An error wraps
// executor.ErrHostDown when the machine could not be reached or the
// connection was lost; what came back before it is kept for the next try.
// A machine that neither sends nor takes a byte for quiet (0:
// DefaultQuiet) while the fetch waits on it (a disk that hangs) is given
// up, with an error that says so.
func Fetch(ctx context.Context, start spawn.Func, from executor.Return, dst string, quiet time.Duration) (executor.Returned, error) {
	var got executor.Returned
	root, err := os.OpenRoot(dst)
	if err != nil {
		return got, err
	}
	defer root.Close()
	st, err := root.Stat(".")
	if err != nil {
		return got, err
	}
	dirMode := st.Mode().Perm()
	if err := root.MkdirAll(partialDir, dirMode); err != nil {
		return got, err
	}
	defer root.Remove(partialDir) // once empty

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := newWatch(cmp.Or(quiet, DefaultQuiet), cancel)
	defer w.timer.Stop()
	// An OS pipe, not an io.Pipe: a local shell then writes into it
	// itself, and what it wrote before it exited waits there for a reader
	// as slow as a disk, where a copying goroutine would be cut off by
	// the process's WaitDelay.
	outR, outW, err := os.Pipe()
	if err != nil {
		return got, err
	}
	defer outR.Close()
	var errs bytes.Buffer
	proc, err := start(ctx, spawn.Bootstrap(script, ProcessName), outW, &errs)
	if err != nil {
		outW.Close()
		return got, err
	}
	waited := make(chan error, 1)
	go func() {
		err := proc.Wait()
		outW.Close()
		waited <- err
	}()
	out := bufio.NewReaderSize(reading{outR, w}, 1<<16)
	err = talk(root, dirMode, from, writing{proc.Stdin, w}, out, &got)
	proc.Stdin.Close()
	go io.Copy(io.Discard, outR)
	werr := <-waited
	code, said := spawn.ExitStatus(werr)
	switch {
	case errors.Is(context.Cause(ctx), errQuiet):
		return got, fmt.Errorf("the host neither sent nor took a byte for %v while the job's results came back (a disk that hangs?): given up; --resume fetches them again", w.limit)
	case !said:
		return got, fmt.Errorf("%w: the connection was lost while the job's results came back", executor.ErrHostDown)
	case code == spawn.ExitGone:
		return got, errors.New(strings.TrimPrefix(spawn.LastLine(errs.String()), "gpudispatch: "))
	case err == nil && werr != nil:
		// Said in the shell's words, not as an exit status.
		err = fmt.Errorf("the shell that sends the results failed (exit status %d): %s", code, cmp.Or(spawn.LastLine(errs.String()), "it said nothing"))
	}
	return got, err
}

// errQuiet ends a fetch whose machine went quiet.
var errQuiet = errors.New("the machine went quiet")

// watch gives a fetch up (cancel, with errQuiet) when one read from its
// machine or write to it waits longer than limit. The exchange reads and
// writes in turn, so one timer, set again at each wait, times them all.
type watch struct {
	limit time.Duration
	timer *time.Timer
}

func newWatch(limit time.Duration, cancel context.CancelCauseFunc) *watch {
	t := time.AfterFunc(limit, func() { cancel(errQuiet) })
	t.Stop()
	return &watch{limit: limit, timer: t}
}

// arm starts the clock of one wait; the func it returns stops it.
func (w *watch) arm() func() bool {
	w.timer.Reset(w.limit)
	return w.timer.Stop
}

// reading and writing are a machine's stdout and stdin, each wait on them
// timed by w.
type reading struct {
	io.Reader
	w *watch
}

type writing struct {
	io.Writer
	w *watch
}

func (r reading) Read(p []byte) (int, error) {
	defer r.w.arm()()
	return r.Reader.Read(p)
}

func (w writing) Write(p []byte) (int, error) {
	defer w.w.arm()()
	return w.Writer.Write(p)
}

// asking is what results.sh is sent for from, after its code: where the
// files are, then the paths.
func asking(from executor.Return) []byte {
	where := "dir " + from.Workdir
	switch {
	case from.Snapshot != "" && from.Tree != "":
		where = "tree " + from.Tree + " " + from.Snapshot
	case from.Snapshot != "":
		where = "snap " + from.Snapshot
	}
	return spawn.Record(append([]string{where}, from.Paths...)...)
}

// answers is what results.sh is sent once it listed files: where to start
// each, in its order ("-": skip it, 0: all of it).
func answers(files []entry) []byte {
	ats := make([]string, len(files))
	for i, f := range files {
		ats[i] = "-"
		if f.at >= 0 {
			ats[i] = strconv.FormatInt(f.at, 10)
		}
	}
	return spawn.Record(ats...)
}

// talk is the coordinator's side of results.sh's exchange.
func talk(root *os.Root, dirMode fs.FileMode, from executor.Return, stdin io.Writer, out *bufio.Reader, got *executor.Returned) error {
	in := bufio.NewWriter(stdin)
	in.WriteString(script)
	in.Write(asking(from))
	if err := in.Flush(); err != nil {
		return err
	}
	files, err := list(out, got)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	var total int64
	for i := range files {
		f := &files[i]
		f.at = -1
		if !seen[f.path] {
			total += f.size
		}
		switch {
		case seen[f.path]:
		case from.Limit > 0 && total > from.Limit:
			got.Over = append(got.Over, f.path)
		case have(root, f):
			got.Files = append(got.Files, executor.ReturnedFile{Path: f.path, Size: f.size})
		default:
			f.at = resumeAt(root, f)
		}
		seen[f.path] = true
	}
	in.Write(answers(files))
	if err := in.Flush(); err != nil {
		return err
	}
	fileMode := dirMode &^ 0o111
	var sent []*entry
	whole := map[string]*entry{}
	for i := range files {
		f := &files[i]
		switch {
		case f.at < 0:
			continue
		case f.at == 0:
			whole[f.path] = f
		default:
			if err := receive(root, f, io.LimitReader(out, f.size-f.at), os.O_APPEND, fileMode); err != nil {
				return err
			}
		}
		sent = append(sent, f)
	}
	tr := tar.NewReader(out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("the results' stream: %w", err)
		}
		f := whole[path.Clean(h.Name)]
		if f == nil || (h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeGNUSparse) {
			return fmt.Errorf("the results' stream holds %q, which was not asked for", h.Name)
		}
		if err := receive(root, f, tr, 0, fileMode); err != nil {
			return err
		}
	}
	now := map[string]string{}
	for {
		f, err := spawn.ReadRecord(out)
		if err != nil {
			return errors.New("the machine ended before it said how the files it sent are now")
		}
		if len(f) == 1 && f[0] == "end" {
			break
		}
		if len(f) == 3 && f[0] == "now" {
			now[f[1]] = f[2]
		}
	}
	for _, f := range sent {
		size, when, _ := strings.Cut(now[f.raw], " ")
		if size != strconv.FormatInt(f.size, 10) || !parseMtime(when).Equal(f.mtime) || !complete(root, f) {
			// Changed (or vanished) as it was sent: its bytes may be
			// of two versions.
			root.Remove(partialName(f))
			got.Changed = append(got.Changed, f.path)
			continue
		}
		if err := keep(root, f, dirMode); err != nil {
			return err
		}
		got.Files = append(got.Files, executor.ReturnedFile{Path: f.path, Size: f.size})
	}
	return nil
}

// list reads the machine's list of the files to return, and records the
// patterns that named nothing and the links that lead to no file.
func list(out *bufio.Reader, got *executor.Returned) ([]entry, error) {
	var files []entry
	for {
		f, err := spawn.ReadRecord(out)
		if err != nil {
			return nil, errors.New("the machine ended before it listed the results")
		}
		switch {
		case len(f) == 1 && f[0] == "end":
			return files, nil
		case len(f) == 2 && f[0] == "miss":
			got.Missing = append(got.Missing, f[1])
		case len(f) == 2 && f[0] == "link":
			got.Links = append(got.Links, strings.TrimPrefix(f[1], "./"))
		case len(f) == 4 && f[0] == "file":
			fs := f[1:]
			size, err := strconv.ParseInt(fs[0], 10, 64)
			p := path.Clean(fs[2])
			when := parseMtime(fs[1])
			if err != nil || size < 0 || !filepath.IsLocal(p) || !strings.HasPrefix(fs[2], "./") || when.IsZero() {
				return nil, fmt.Errorf("the machine listed a result badly: %q", fs)
			}
			files = append(files, entry{path: p, raw: fs[2], size: size, mtime: when})
		default:
			return nil, fmt.Errorf("the machine answered %q", f)
		}
	}
}

// have reports whether dst already has f as it is on the machine.
func have(root *os.Root, f *entry) bool {
	st, err := root.Lstat(f.path)
	return err == nil && st.Mode().IsRegular() && st.Size() == f.size && st.ModTime().Equal(f.mtime)
}

// resumeAt is where f's bytes start: past those an earlier fetch got.
func resumeAt(root *os.Root, f *entry) int64 {
	st, err := root.Lstat(partialName(f))
	if err != nil || !st.Mode().IsRegular() || st.Size() > f.size {
		return 0
	}
	return st.Size()
}

// complete reports whether f's partial file holds all of its bytes.
func complete(root *os.Root, f *entry) bool {
	st, err := root.Lstat(partialName(f))
	return err == nil && st.Size() == f.size
}

// receive writes what r holds to f's partial file: after its end with
// flag os.O_APPEND (a file that was cut off), else the whole file, whose
// blocks of zeros are left holes (a sparse file stays sparse).
func receive(root *os.Root, f *entry, r io.Reader, flag int, mode fs.FileMode) error {
	if flag != os.O_APPEND {
		flag = os.O_TRUNC
	}
	w, err := root.OpenFile(partialName(f), os.O_WRONLY|os.O_CREATE|flag, mode)
	if err != nil {
		return fmt.Errorf("results: %w", err)
	}
	if flag == os.O_APPEND {
		_, err = io.Copy(w, r)
	} else {
		err = writeSparse(w, r)
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("results: %s: %w", f.path, err)
	}
	return nil
}

// keep puts f's whole partial file at its path, with its mtime there.
func keep(root *os.Root, f *entry, dirMode fs.FileMode) error {
	if d := path.Dir(f.path); d != "." {
		if err := root.MkdirAll(d, dirMode); err != nil {
			return fmt.Errorf("results: %w", err)
		}
	}
	part := partialName(f)
	root.Chtimes(part, f.mtime, f.mtime)
	if st, err := root.Lstat(f.path); err == nil && st.IsDir() {
		return fmt.Errorf("results: %s is a directory here and a file on the machine", f.path)
	}
	if err := root.Rename(part, f.path); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	return nil
}

// partialName is where f's bytes gather until they are all there.
func partialName(f *entry) string {
	h := sha256.Sum256([]byte(f.path))
	return fmt.Sprintf("%s/%s-%d-%d", partialDir, hex.EncodeToString(h[:12]), f.size, f.mtime.UnixNano())
}

// mtimeRE is the form of an mtime as find's %T@ and stat's %.9Y give it:
// seconds, and a fraction of up to 10 digits.
var mtimeRE = regexp.MustCompile(`^([0-9]+)(?:\.([0-9]{1,10}))?$`)

// parseMtime reads an mtime of mtimeRE's form, to the nanosecond; the zero
// time when it is not one.
func parseMtime(s string) time.Time {
	m := mtimeRE.FindStringSubmatch(s)
	if m == nil {
		return time.Time{}
	}
	sec, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return time.Time{}
	}
	nsec, _ := strconv.ParseInt((m[2] + "000000000")[:9], 10, 64)
	return time.Unix(sec, nsec)
}

// holeBlock is the size of the blocks writeSparse leaves holes for.
const holeBlock = 4096

// writeSparse writes what r holds to w from its start, seeking past each
// block of holeBlock zeros rather than writing it, as cp --sparse=always
// does: a file of holes (a sparse checkpoint, a disk image) comes back
// with its holes.
func writeSparse(w *os.File, r io.Reader) error {
	buf := make([]byte, 256*holeBlock)
	var size int64
	for {
		n, err := io.ReadFull(r, buf)
		for off := 0; off < n; off += holeBlock {
			b := buf[off:min(off+holeBlock, n)]
			if len(b) == holeBlock && allZero(b) {
				if _, err := w.Seek(holeBlock, io.SeekCurrent); err != nil {
					return err
				}
				continue
			}
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
		size += int64(n)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			// A file that ends in a hole has its length all the same.
			return w.Truncate(size)
		}
		if err != nil {
			return err
		}
	}
}

// allZero says whether b (of holeBlock bytes) holds zeros only.
func allZero(b []byte) bool { return bytes.Equal(b, zeros[:]) }

// zeros is a block of holeBlock zeros.
var zeros [holeBlock]byte
