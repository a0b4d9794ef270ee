package dispatch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// logFiles are one attempt's stdout and stderr files; parts are those of
// its parts 1.. when it runs over several hosts.
type logFiles struct {
	out, err *logWriter
	parts    []logFiles
}

// logWriter writes a job's output to its log file. A write that fails (a
// full disk) is remembered and the rest of the output is dropped, so a job
// is never blocked on its output; the attempt then fails with the reason.
type logWriter struct {
	f      *os.File
	failed error
}

func (w *logWriter) Write(p []byte) (int, error) {
	if w.failed == nil {
		if _, err := w.f.Write(p); err != nil {
			w.failed = fmt.Errorf("its output could not be saved: %w", err)
		}
	}
	return len(p), nil
}

// Name is the file's path.
func (w *logWriter) Name() string { return w.f.Name() }

// openLogs creates dir/ID.out and dir/ID.err, or ID.2.*, ID.3.*... when an
// earlier attempt (of this run or of a run resumed) has them: output is
// never overwritten.
func openLogs(dir, id string, mode fs.FileMode) (logFiles, error) {
	for n := 1; ; n++ {
		base := id
		if n > 1 {
			base += "." + strconv.Itoa(n)
		}
		out, err := create(filepath.Join(dir, base+".out"), mode)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return logFiles{}, err
		}
		errf, err := create(filepath.Join(dir, base+".err"), mode)
		if err != nil {
			out.Close()
			os.Remove(out.Name())
			if errors.Is(err, os.ErrExist) {
				continue
			}
			return logFiles{}, err
		}
		return logFiles{out: &logWriter{f: out}, err: &logWriter{f: errf}}, nil
	}
}

func create(path string, mode fs.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return nil, fmt.Errorf("log file: %w", err)
	}
	return f, nil
}

// close closes both files and reports the first write that failed.
func (l logFiles) close() error {
	errs := []error{l.out.failed, l.err.failed, l.out.f.Close(), l.err.f.Close()}
	for _, p := range l.parts {
		errs = append(errs, p.close())
	}
	return errors.Join(errs...)
}

// remove deletes both files, for an attempt that never ran.
func (l logFiles) remove() {
	if l.out == nil {
		return
	}
	os.Remove(l.out.Name())
	os.Remove(l.err.Name())
	for _, p := range l.parts {
		p.remove()
	}
}
