package snapshot

import (
	"io"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// Code is s as a machine's content store takes it (executor.Code): made
// once, shared by every host that ships it.
func (s *Snapshot) Code() *executor.Code {
	s.codeOnce.Do(func() {
		files := make([]executor.CodeFile, len(s.Files))
		for i, f := range s.Files {
			files[i] = f.code()
		}
		s.code = &executor.Code{
			ID: s.ID, Dir: s.Dir, Key: s.Key, Files: files,
			Since: func(id string) (executor.CodeDiff, bool) {
				d, ok := s.Since(id)
				changed := make([]executor.CodeFile, len(d.Changed))
				for i, f := range d.Changed {
					changed[i] = f.code()
				}
				return executor.CodeDiff{Changed: changed, Gone: d.Gone}, ok
			},
			Contents: func() executor.CodeContents { return pathContents{s.Contents(), s.filesByPath()} },
		}
	})
	return s.code
}

// code is f as a host sees it.
func (f File) code() executor.CodeFile {
	return executor.CodeFile{Path: f.Path, Exec: f.Exec, Size: f.Size, Hash: f.Hash, Link: f.Link}
}

// pathContents reads a snapshot's content by its files' paths.
type pathContents struct {
	*Contents
	files map[string]File
}

func (b pathContents) Open(path string) (io.Reader, error) {
	f, ok := b.files[path]
	if !ok || f.Link != "" {
		return nil, &notAFile{path}
	}
	return b.Contents.Open(f)
}

// notAFile is pathContents' error for a path that is no file of the snapshot.
type notAFile struct{ path string }

func (e *notAFile) Error() string { return e.path + " is not a file of the snapshot" }

// filesByPath maps s's paths to its files.
func (s *Snapshot) filesByPath() map[string]File {
	m := make(map[string]File, len(s.Files))
	for _, f := range s.Files {
		m[f.Path] = f
	}
	return m
}
