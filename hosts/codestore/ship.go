package codestore

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
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
)

//go:embed store.sh
var storeScript string

//go:embed prune.sh
var pruneScript string

// storeCode is what a shipping runs on the machine.
var storeCode = spawn.Prelude + pruneScript + storeScript

// cleanScript prunes the store with no time kept, and counts.
const cleanScript = `
keep=0
open_store existing || { echo "no content store"; exit 0; }
count() {
  find "$store/snaps" -maxdepth 1 -name '*.ok' 2>/dev/null | wc -l
  find "$store/work" -mindepth 2 -maxdepth 2 -name '*.ok' 2>/dev/null | wc -l
  find "$store/blobs" -type f 2>/dev/null | wc -l
}
before=$(count)
prune
after=$(count)
set -- $before $after
echo "removed $(($1 - $4)) snapshots, $(($2 - $5)) working trees and $(($3 - $6)) files; $4 snapshots and $5 working trees in use kept"
`

// Clean removes from the content store in dir ("": the default) of the
// machine start runs bash on every snapshot and content no process runs
// in, and says how many snapshots and files went (hosts --clean).
func Clean(ctx context.Context, start spawn.Func, dir string) (string, error) {
	code := spawn.Prelude + pruneScript + cleanScript
	var out, errs bytes.Buffer
	proc, err := start(ctx, spawn.Bootstrap(code, ProcessName), &out, &errs)
	if err != nil {
		return "", err
	}
	_, werr := proc.Stdin.Write(append([]byte(code), spawn.Record(dir)...))
	proc.Stdin.Close()
	if err := proc.Wait(); err != nil {
		if said := spawn.LastLine(errs.String()); said != "" {
			return "", errors.New(strings.TrimPrefix(said, "gpudispatch: "))
		}
		return "", err
	}
	if werr != nil {
		return "", werr
	}
	return strings.TrimSpace(out.String()), nil
}

// ProcessName is the store shell's $0, for ps.
const ProcessName = "gpudispatch-code"

// Sent is what one shipping sent, and what the machine's store said of
// itself (Warnings: content jobs of an earlier gpudispatch had changed,
// removed and shipped again).
type Sent struct {
	Files    int
	Bytes    int64
	Warnings []string
}

// DefaultKeep is how long a machine keeps snapshots and content that no
// run used.
const DefaultKeep = 14 * 24 * time.Hour

// Store is one machine's content store, as seen from here: it ships each
// snapshot there once.
type Store struct {
	start spawn.Func
	keep  time.Duration
	dir   string

	mu    sync.Mutex
	ships map[string]*shipping
	// warm is a store shell started ahead (see Warm), or nil; warming is
	// closed once the one being started is (nil: none is).
	warm    *shell
	warming chan struct{}
	closed  bool
	// tails are the store shells that answered and go on (see Close).
	tails sync.WaitGroup
}

// New returns the store in dir of the machine that start runs bash on:
// "" is ~/.gpudispatch/code, a leading "~/" the home directory there. Each
// shipping removes there what no run used for keep (0: DefaultKeep).
func New(start spawn.Func, keep time.Duration, dir string) *Store {
	return &Store{start: start, keep: cmp.Or(keep, DefaultKeep), dir: dir, ships: map[string]*shipping{}}
}

// Tree is the directory of log dir log's working tree of snapshot id on
// the machine (see Ensure), as New was given the store's ("~/" for the
// home directory); with no log, the snapshot's own tree, where jobs of
// an earlier gpudispatch ran.
func (st *Store) Tree(log, id string) string {
	if log == "" {
		return cmp.Or(st.dir, spawn.CodeStore) + "/snaps/" + id
	}
	return cmp.Or(st.dir, spawn.CodeStore) + "/work/" + log + "/" + id
}

// CheckLog is the log key of commands that run in a snapshot's tree
// without a log dir (hosts --check): they share a tree of their own.
const CheckLog = "0"

// ValidLog says whether log can name a log dir's working trees: hex
// digits, as LogKey makes.
func ValidLog(log string) bool {
	return log != "" && strings.Trim(log, "0123456789abcdef") == ""
}

type shipping struct {
	done chan struct{}
	at   time.Time // when it started
	dir  string
	sent Sent
	err  error
}

// Ensure returns the directory of log dir log's working tree of s on the
// machine (log: hex digits naming the log dir, see ValidLog), once it is
// there: the tree is the log dir's own copy of s, built from the
// machine's content store, so nothing a job does in it reaches the store
// or another log dir's tree. The first call for s and log ships what the
// machine lacks, and every
// call waits for that shipping or for its own ctx (a job cancelled while
// the code travels does not stop it for the others). A failed shipping is
// tried again by the next call, and so is one older than a tenth of the
// keep time: the machine's store then knows the snapshot is still used (a
// long serve keeps it), or builds it again if it went. Only the call that
// started a shipping is told what it sent. An error wraps
// executor.ErrHostDown when the machine could not be reached or the
// connection was lost.
func (st *Store) Ensure(ctx context.Context, s *executor.Code, log string) (dir string, sent Sent, err error) {
	if !ValidLog(log) {
		return "", Sent{}, fmt.Errorf("a log dir's key must be hex digits, not %q", log)
	}
	key := s.ID + " " + log
	st.mu.Lock()
	sh := st.ships[key]
	mine := sh == nil
	if !mine {
		select {
		case <-sh.done:
			mine = time.Since(sh.at) > st.keep/10
		default:
		}
	}
	if mine {
		sh = &shipping{done: make(chan struct{}), at: time.Now()}
		st.ships[key] = sh
	}
	st.mu.Unlock()
	if mine {
		go func() {
			sh.dir, sh.sent, sh.err = st.shipAgain(context.WithoutCancel(ctx), s, log)
			if sh.err != nil {
				st.mu.Lock()
				if st.ships[key] == sh {
					delete(st.ships, key)
				}
				st.mu.Unlock()
			}
			close(sh.done)
		}()
	}
	select {
	case <-sh.done:
		if mine {
			sent = sh.sent
		}
		return sh.dir, sent, sh.err
	case <-ctx.Done():
		return "", Sent{}, context.Cause(ctx)
	}
}

// Warm starts a store shell on the machine, in the background, for the
// next shipping, which then need not wait for a session, bash and the
// code to reach the machine (a run warms the store of a host whose jobs
// need code as it opens the host). A warm shell that died meanwhile is
// replaced by a new one when the shipping comes.
func (st *Store) Warm() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.warm != nil || st.warming != nil || st.closed {
		return
	}
	warming := make(chan struct{})
	st.warming = warming
	st.tails.Add(1)
	go func() {
		defer st.tails.Done()
		defer close(warming)
		sh, err := st.open(context.Background())
		if err == nil {
			err = sh.in.Flush()
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		st.warming = nil
		switch {
		case err == nil && !st.closed:
			st.warm = sh
		case sh != nil:
			sh.close()
		}
	}()
}

// Close waits a while (at most tailWait) for the store shells that
// answered and still make a spare copy or prune on the machine: they need
// no coordinator, but one that exits at once would leave them unwatched.
// A warm shell is let go.
func (st *Store) Close() {
	st.mu.Lock()
	st.closed = true
	if st.warm != nil {
		st.warm.close()
		st.warm = nil
	}
	st.mu.Unlock()
	done := make(chan struct{})
	go func() {
		st.tails.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(tailWait):
	}
}

// tailWait is how long Close waits for the store shells.
const tailWait = 10 * time.Second

// shipAgain ships s, again when another build of its directory on the
// machine replaced the base this one's differences were made against (a
// few times: each try sees the newer base).
func (st *Store) shipAgain(ctx context.Context, s *executor.Code, log string) (dir string, sent Sent, err error) {
	for range 3 {
		var raced bool
		if dir, sent, raced, err = st.ship(ctx, s, log); !raced {
			break
		}
	}
	return dir, sent, err
}

// shell is a store shell on the machine, its code and the store's
// directory written (in: flushed or not): it waits for a snapshot.
type shell struct {
	proc   *spawn.Proc
	in     *bufio.Writer
	out    *bufio.Reader
	outR   *io.PipeReader
	errs   *bytes.Buffer
	waited chan error // its end
}

// open starts a store shell on the machine.
func (st *Store) open(ctx context.Context) (*shell, error) {
	if strings.ContainsRune(st.dir, 0) {
		return nil, fmt.Errorf("the content store's directory %q has a NUL byte", st.dir)
	}
	outR, outW := io.Pipe()
	sh := &shell{outR: outR, out: bufio.NewReader(outR), errs: &bytes.Buffer{}, waited: make(chan error, 1)}
	proc, err := st.start(ctx, spawn.Bootstrap(storeCode, ProcessName), outW, sh.errs)
	if err != nil {
		return nil, err
	}
	sh.proc = proc
	// The answer ends when the shell does.
	go func() {
		err := proc.Wait()
		outW.Close()
		sh.waited <- err
	}()
	sh.in = bufio.NewWriterSize(proc.Stdin, 1<<16)
	sh.in.WriteString(storeCode)
	sh.in.Write(spawn.Record(st.dir))
	return sh, nil
}

// close ends the shell's stdin (one waiting for a snapshot then ends; one
// that answered goes on with what it does after) and drains its output.
func (sh *shell) close() {
	sh.proc.Stdin.Close()
	go io.Copy(io.Discard, sh.outR)
}

// ship builds s's tree on the machine, sending what it lacks, from the
// warm shell if there is one (and a new one if that one is gone). It
// returns once the machine's shell says the tree is there: what the shell
// does after that is Close's.
// raced says the machine's base changed meanwhile (spawn.ExitGone).
func (st *Store) ship(ctx context.Context, s *executor.Code, log string) (dir string, sent Sent, raced bool, err error) {
	st.mu.Lock()
	if warming := st.warming; warming != nil {
		// Started earlier than a new one would be: it is ready sooner,
		// and two would hold two of the host's sessions.
		st.mu.Unlock()
		<-warming
		st.mu.Lock()
	}
	sh := st.warm
	st.warm = nil
	st.mu.Unlock()
	if sh != nil {
		dir, err = talk(sh, s, log, st.keep, &sent)
		if errors.Is(err, errGone) {
			// It ended before it was asked: a new one is.
			sh.close()
			sh = nil
		}
	}
	if sh == nil {
		if sh, err = st.open(ctx); err != nil {
			return "", Sent{}, false, err
		}
		dir, err = talk(sh, s, log, st.keep, &sent)
	}
	sh.close()
	if err == nil {
		st.tails.Add(1)
		go func() {
			<-sh.waited
			st.tails.Done()
		}()
		return dir, sent, false, nil
	}
	werr := <-sh.waited
	if errors.As(err, new(hereError)) {
		// What the machine says of the stream cut short is not why.
		return "", sent, false, fmt.Errorf("cannot put the code (snapshot %s of %s) there: %w", s.ID, s.Dir, err)
	}
	code, said := spawn.ExitStatus(werr)
	if !said {
		return "", sent, false, fmt.Errorf("%w: the connection was lost while the code (snapshot %s of %s) was put there", executor.ErrHostDown, s.ID, s.Dir)
	}
	if last := spawn.LastLine(sh.errs.String()); last != "" {
		err = errors.New(strings.TrimPrefix(last, "gpudispatch: "))
	}
	return "", sent, code == spawn.ExitGone, fmt.Errorf("cannot put the code (snapshot %s of %s) there: %w", s.ID, s.Dir, err)
}

// asking is what store.sh is sent for snapshot s, after the store's
// directory: its ID and key, how long what no run uses is kept (in
// minutes, at least one), and the log dir's key.
func asking(s *executor.Code, keep time.Duration, log string) []byte {
	return spawn.Record(s.ID, s.Key, strconv.Itoa(max(int(keep/time.Minute), 1)), log)
}

// lists is what store.sh is sent once it said it needs files: the base to
// build from ("-": none), the paths gone since it and those changed (a
// line each), and the names of the blobs those need (a line each).
func lists(use, gone, changed, names string) []byte {
	return spawn.Record(use, gone, changed, names)
}

// errGone is talk's error when the shell could not be asked or ended
// before it answered.
var errGone = errors.New("the store's shell ended before it answered")

// talk is the coordinator's side of store.sh's exchange with sh, from the
// snapshot's ID on (open wrote what comes before it).
// The tar stream ends with stdin: tar reads whole records.
func talk(sh *shell, s *executor.Code, log string, keep time.Duration, sent *Sent) (string, error) {
	in, out, end := sh.in, sh.out, sh.proc.Stdin.Close
	in.Write(asking(s, keep, log))
	if err := in.Flush(); err != nil {
		return "", fmt.Errorf("%w: %v", errGone, err)
	}
	// next reads the shell's next answer: a word, then what it says, in
	// want more fields at least; or says it ended before.
	next := func(want int) (string, []string, error) {
		f, err := spawn.ReadRecord(out)
		if err != nil {
			return "", nil, errors.New("the store's shell ended before it answered whole")
		}
		if len(f) < 1+want {
			return "", nil, fmt.Errorf("the store's shell answered %q", f)
		}
		return f[0], f[1:], nil
	}
	// Its warnings, then its word: a shell that ended before its word
	// (one that was warm) may be asked again.
	word, said, err := next(0)
	for err == nil && word == "warn" && len(said) == 1 {
		sent.Warnings = append(sent.Warnings, said[0])
		word, said, err = next(0)
	}
	if err != nil {
		return "", errGone
	}
	switch {
	case word == "have" && len(said) == 1:
		return said[0] + "/work/" + log + "/" + s.ID, nil
	case word != "need" || len(said) != 3:
		return "", fmt.Errorf("the store's shell answered %q %q", word, said)
	}
	store, tmp, base := said[0], said[1], said[2]
	dir := store + "/work/" + log + "/" + s.ID
	// The tar stream's names are the store's (tar runs there): short
	// names travel in one header.
	tmp, ok := strings.CutPrefix(tmp, store+"/")
	if !ok {
		return "", fmt.Errorf("the store's shell answered a temporary directory out of the store: %q", tmp)
	}
	// The tree is made from the machine's base, the last tree of the
	// directory it built, by their differences, when this machine still
	// has that tree's list; else whole.
	files, use, gone, changed := s.Files, "-", "", ""
	if d, ok := s.Since(base); ok && !newline(d) {
		files, use = d.Changed, base
		gone, changed = lines(d.Gone), lines(paths(d.Changed))
	}
	// The blobs, each once.
	var blobs []string
	first := map[string]executor.CodeFile{}
	for _, f := range files {
		if f.Link == "" {
			if _, seen := first[f.Blob()]; !seen {
				first[f.Blob()] = f
				blobs = append(blobs, f.Blob())
			}
		}
	}
	names := strings.Join(blobs, "\n")
	in.Write(lists(use, gone, changed, names))
	if err := in.Flush(); err != nil {
		return "", err
	}
	missing := map[string]bool{}
	var into []string
	var newBase string
	for word != "end" {
		if word, said, err = next(0); err != nil {
			return "", errors.New("the store's shell ended before it listed what it lacks")
		}
		switch word {
		case "lacks":
			for _, name := range strings.Split(strings.Join(said, "\n"), "\n") {
				if name != "" {
					missing[name] = true
				}
			}
		case "into":
			for _, d := range said {
				d, ok := strings.CutPrefix(d, store+"/")
				if !ok {
					return "", fmt.Errorf("the store's shell would build the tree out of the store: %q", said)
				}
				into = append(into, d)
			}
		case "newbase":
			var ok bool
			if len(said) != 1 {
				return "", fmt.Errorf("the store's shell answered newbase %q", said)
			}
			if newBase, ok = strings.CutPrefix(said[0], store+"/"); !ok {
				return "", fmt.Errorf("the store's shell would build the base out of the store: %q", said[0])
			}
		case "end":
		default:
			return "", fmt.Errorf("the store's shell answered %q %q", word, said)
		}
	}
	if len(into) == 0 {
		return "", errors.New("the store's shell named no directory to build the tree in")
	}
	tw := tar.NewWriter(in)
	// Each directory once: tar keeps a list of those it made, which it
	// searches for each one. A directory is written from the top the
	// shell named.
	made := map[string]bool{}
	top := func(d string) error {
		made[d] = true
		return tw.WriteHeader(dirEntry(d))
	}
	if len(missing) > 0 {
		if err := top(tmp); err != nil {
			return "", err
		}
	}
	content := s.Contents()
	defer content.Close()
	for _, b := range blobs {
		if !missing[b] {
			continue
		}
		f := first[b]
		if err := sendBlob(tw, content, f, tmp, made); err != nil {
			return "", err
		}
		sent.Files++
		sent.Bytes += f.Size
	}
	for _, d := range into {
		if err := top(d); err != nil {
			return "", err
		}
		if err := linkTree(tw, d, files, missing, tmp, made); err != nil {
			return "", err
		}
	}
	if newBase != "" {
		if err := sendBase(tw, newBase, s.Files); err != nil {
			return "", err
		}
	}
	// Last: an empty TMP/end, which says the stream is whole (tar takes
	// a stream cut between two entries for a whole one).
	if err := tw.WriteHeader(&tar.Header{Name: tmp + "/end", Mode: 0o600, Typeflag: tar.TypeReg}); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := in.Flush(); err != nil {
		return "", err
	}
	if err := end(); err != nil {
		return "", err
	}
	answer, _, err := next(0)
	if err != nil {
		return "", err
	}
	if answer != "built" {
		return "", fmt.Errorf("the tree was not built: the store's shell answered %q", answer)
	}
	return dir, nil
}

// linkTree writes files into the tree d: links to their blobs (in the
// store, or in tmp/new for those missing), and their symbolic links.
func linkTree(tw *tar.Writer, d string, files []executor.CodeFile, missing map[string]bool, tmp string, made map[string]bool) error {
	for _, f := range files {
		name := d + "/" + f.Path
		if err := dirs(tw, path.Dir(name), made); err != nil {
			return err
		}
		h := &tar.Header{Name: name, Mode: 0o644, Typeflag: tar.TypeLink}
		switch {
		case f.Link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.Link
		case missing[f.Blob()]:
			h.Linkname = blobPath(tmp+"/new", f.Blob())
		default:
			h.Linkname = blobPath("blobs", f.Blob())
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
	}
	return nil
}

// sendBase writes the file d.tar: a tar that makes the directory d of
// files, each a link to its blob in the store's blobs/, which the machine
// extracts once it has answered and put the new blobs there. So the
// tree's new base is written once while the coordinator waits, not twice,
// and never copied from the tree, where jobs may write by then. The tar is
// made twice, first only to count its bytes (its header says how many
// follow), so that it is never held whole (512 bytes a file, for every
// host shipped to at once).
func sendBase(tw *tar.Writer, d string, files []executor.CodeFile) error {
	write := func(w io.Writer) error {
		bw := tar.NewWriter(w)
		if err := bw.WriteHeader(dirEntry(d)); err != nil {
			return err
		}
		// Nothing is missing: every link is to blobs/.
		if err := linkTree(bw, d, files, nil, "", map[string]bool{d: true}); err != nil {
			return err
		}
		return bw.Close()
	}
	var size byteCount
	if err := write(&size); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: d + ".tar", Mode: 0o600, Size: int64(size), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	return write(tw)
}

// byteCount counts the bytes written to it.
type byteCount int64

// Write counts p.
func (c *byteCount) Write(p []byte) (int, error) {
	*c += byteCount(len(p))
	return len(p), nil
}

// blobPath is where the blob b is kept under dir: dir/XX/b.
func blobPath(dir, b string) string { return dir + "/" + b[:2] + "/" + b }

// sendBlob writes f's content as the store's new blob, in tmp/new.
func sendBlob(tw *tar.Writer, content executor.CodeContents, f executor.CodeFile, tmp string, made map[string]bool) error {
	src, err := content.Open(f.Path)
	if err != nil {
		return hereError{fmt.Errorf("the coordinator's copy of %s: %w: run gpudispatch hosts --clean, which removes what is left of it, and take the snapshot again", f.Path, err)}
	}
	mode := int64(0o444)
	if f.Exec {
		mode = 0o555
	}
	name := blobPath(tmp+"/new", f.Blob())
	if err := dirs(tw, path.Dir(name), made); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: f.Size, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	// Checked as it goes: a copy changed since the snapshot was taken (a
	// pack swapped by someone who could write the cache) never becomes a
	// blob. The stream then ends without its mark, and the machine builds
	// nothing of it.
	sum := sha256.New()
	_, err = io.CopyN(io.MultiWriter(tw, sum), src, f.Size)
	if errors.Is(err, io.EOF) {
		return hereError{fmt.Errorf("the coordinator's copy of %s is cut short: run gpudispatch hosts --clean, which removes it, and take the snapshot again", f.Path)}
	}
	if err == nil && hex.EncodeToString(sum.Sum(nil)) != f.Hash {
		return hereError{fmt.Errorf("the coordinator's copy of %s no longer holds the content the snapshot took (changed in the cache since): nothing was built of it; run gpudispatch hosts --clean, which removes the cache, and take the snapshot again", f.Path)}
	}
	return err
}

// hereError is a failure on the coordinator's side of a shipping (its copy
// of a file), which no machine's answer explains.
type hereError struct{ error }

// Unwrap returns the failure.
func (e hereError) Unwrap() error { return e.error }

// dirs writes the directory d and those above it that made lacks (below
// a top made has).
func dirs(tw *tar.Writer, d string, made map[string]bool) error {
	if d == "." || d == "" || d == "/" || made[d] {
		return nil
	}
	if err := dirs(tw, path.Dir(d), made); err != nil {
		return err
	}
	made[d] = true
	return tw.WriteHeader(dirEntry(d))
}

// dirEntry is the tar entry of the directory d. tar gives a directory its
// entry's time: now, not 1970, which the store's prune would take for a
// build left a day ago (see prune.sh).
func dirEntry(d string) *tar.Header {
	return &tar.Header{Name: d + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: time.Now()}
}

// newline says whether a path of d has a newline: the machine reads its
// lists by line (the tree is then made whole).
func newline(d executor.CodeDiff) bool {
	return slices.ContainsFunc(d.Gone, func(p string) bool { return strings.Contains(p, "\n") }) ||
		slices.ContainsFunc(d.Changed, func(f executor.CodeFile) bool { return strings.Contains(f.Path, "\n") })
}

// paths are the files' paths.
func paths(files []executor.CodeFile) []string {
	ps := make([]string, len(files))
	for i, f := range files {
		ps[i] = f.Path
	}
	return ps
}

// lines joins ps, each ended by a newline.
func lines(ps []string) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p)
		b.WriteByte('\n')
	}
	return b.String()
}
