package dispatch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/gpudispatch/gpudispatch/dispatch/snapshot"
)

// JournalName is the journal's file name in the log dir.
const JournalName = "journal.jsonl"

// journal appends events to journal.jsonl. Each event is one write(2) of a
// whole line, made before the next job starts, to a file opened for
// appending; a failed write is cut off again, so the file is always whole
// lines.
type journal struct {
	f    *os.File
	size int64
}

func openJournal(path string, mode fs.FileMode) (*journal, error) {
	if err := regular(path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE|noFollow, mode)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	if err := checkOwnFile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("journal: %w", err)
	}
	size, err := cutTornTail(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	return &journal{f: f, size: size}, nil
}

// cutTornTail drops a last line without its newline (a crash in the middle
// of a write) and returns the size that is left.
func cutTornTail(f *os.File) (int64, error) {
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil || size == 0 {
		return size, err
	}
	buf := make([]byte, min(size, 64*1024))
	for end := size; end > 0; {
		start := max(0, end-int64(len(buf)))
		chunk := buf[:end-start]
		if _, err := f.ReadAt(chunk, start); err != nil {
			return 0, err
		}
		if i := bytes.LastIndexByte(chunk, '\n'); i >= 0 {
			keep := start + int64(i) + 1
			if keep == size {
				return size, nil
			}
			return keep, f.Truncate(keep)
		}
		end = start
	}
	return 0, f.Truncate(0)
}

func (j *journal) append(e Event) error {
	line, err := json.Marshal(e)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	n, err := j.f.Write(line)
	if err != nil || n != len(line) {
		if terr := j.f.Truncate(j.size); terr != nil {
			return errors.Join(fmt.Errorf("journal: %w", err), terr)
		}
		return fmt.Errorf("journal %s: %w", j.f.Name(), err)
	}
	j.size += int64(n)
	return nil
}

func (j *journal) close() error { return j.f.Close() }

// jobKey identifies a job across runs: its text as written and the
// how-many-th time that text occurs in the input.
type jobKey struct {
	text       string
	occurrence int
}

// scanJournal calls f with each whole line of the journal at path. A last
// line without its newline is being written (or was torn by a crash) and is
// left out. A line that f cannot read (two writers tore it, a disk that
// failed) is skipped and said in damaged with its file and line number:
// one bad line does not cost the rest of the journal. err is for a journal
// that cannot be read at all.
func scanJournal(path string, f func(line []byte) error) (damaged []string, err error) {
	if err := regular(path); err != nil {
		return nil, err
	}
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	r := bufio.NewReaderSize(file, 64*1024)
	for n := 1; ; n++ {
		line, err := readLine(r)
		switch {
		case err == io.EOF:
			return damaged, nil
		case errors.Is(err, errLongLine):
			damaged = append(damaged, fmt.Sprintf("%s:%d: %v", path, n, err))
			continue
		case err != nil:
			return damaged, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if err := f(line); err != nil {
			damaged = append(damaged, fmt.Sprintf("%s:%d: %v", path, n, err))
		}
	}
}

// errLongLine is a journal line too long to be one of ours.
var errLongLine = fmt.Errorf("line longer than %d bytes", maxJournalLine)

// maxJournalLine bounds a journal line: it holds the job twice (text and
// command), and JSON may spell a byte in six ("\u0001").
const maxJournalLine = 16 * MaxJobBytes

// readLine returns the next line without its newline, or io.EOF when none is
// whole.
func readLine(r *bufio.Reader) ([]byte, error) {
	var long []byte
	for {
		chunk, err := r.ReadSlice('\n')
		switch {
		case err == nil:
			if long == nil {
				return chunk[:len(chunk)-1], nil
			}
			long = append(long, chunk...)
			return long[:len(long)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			long = append(long, chunk...)
			if len(long) > maxJournalLine {
				// Skip to the end of the line, so that the next one reads.
				for errors.Is(err, bufio.ErrBufferFull) {
					_, err = r.ReadSlice('\n')
				}
				if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
					return nil, err
				}
				return nil, errLongLine
			}
		case errors.Is(err, io.EOF):
			return nil, io.EOF // a torn or unfinished last line
		default:
			return nil, err
		}
	}
}

// regular fails, naming the journal at path and what it is, when it is
// there and not a regular file: a reader of a FIFO waits for ever.
func regular(path string) error {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().IsRegular() {
		return nil
	}
	return fmt.Errorf("journal %s is %s, not a file gpudispatch wrote: move it away, or use another log dir (-o)", path, snapshot.FileKind(fi.Mode()))
}
