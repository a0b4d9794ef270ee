package dispatch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// logFiles are one attempt's stdout and stderr files.
type logFiles struct {
	out, err *os.File
}

// openLogs creates dir/ID.out and dir/ID.err, or ID.2.*, ID.3.*... when an
// earlier attempt (of this run or of a run resumed) has them: output is
// never overwritten.
func openLogs(dir, id string) (logFiles, error) {
	for n := 1; ; n++ {
		base := id
		if n > 1 {
			base += "." + strconv.Itoa(n)
		}
		out, err := create(filepath.Join(dir, base+".out"))
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return logFiles{}, err
		}
		errf, err := create(filepath.Join(dir, base+".err"))
		if err != nil {
			out.Close()
			os.Remove(out.Name())
			if errors.Is(err, os.ErrExist) {
				continue
			}
			return logFiles{}, err
		}
		return logFiles{out: out, err: errf}, nil
	}
}

func create(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("log file: %w", err)
	}
	return f, nil
}

func (l logFiles) close() error {
	return errors.Join(l.out.Close(), l.err.Close())
}

// remove deletes both files, for an attempt that never ran.
func (l logFiles) remove() {
	if l.out == nil {
		return
	}
	os.Remove(l.out.Name())
	os.Remove(l.err.Name())
}
