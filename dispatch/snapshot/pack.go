package snapshot

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
)

// A pack is one file of the store holding the content of many files end
// to end: the content a Take found the store lacked. A list says where
// each file's content is (pack and offset), so that a snapshot of 10,000
// new files costs one file created here, not 10,000.

// packDir is the store's directory of packs.
const packDir = "packs"

// packPath is the path of the pack named name in store.
func packPath(store, name string) string {
	return filepath.Join(store, packDir, name)
}

// validPack says whether name may name a pack (as reserve names them).
func validPack(name string) bool {
	_, err := hex.DecodeString(name)
	return len(name) == 16 && err == nil
}

// place is where content is in a store.
type place struct {
	pack string
	off  int64
}

// packer writes the content a Take finds its store lacks into one new
// pack, made at the first such file; each file's content goes to a range
// of its own (reserve), written on any goroutine.
type packer struct {
	store string

	open sync.Once
	f    *os.File
	name string
	err  error
	end  atomic.Int64

	// have is the content this Take can point to, by hash: what the
	// directory's last list names (set up at the first file hashed), and
	// what this Take wrote.
	mu      sync.Mutex
	have    map[string]place
	earlier []File
}

// newPacker returns the packer of a Take into store; earlier is the
// directory's last list (content a file renamed or put back may find).
func newPacker(store string, earlier []File) *packer {
	return &packer{store: store, earlier: earlier}
}

// find returns where the store has the content of hash.
func (p *packer) find(hash string) (place, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.have == nil {
		p.have = make(map[string]place, len(p.earlier))
		for _, f := range p.earlier {
			if f.pack != "" {
				p.have[f.Hash] = place{f.pack, f.off}
			}
		}
	}
	at, ok := p.have[hash]
	return at, ok
}

// wrote says the content of hash is now at.
func (p *packer) wrote(hash string, at place) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.have[hash]; !ok {
		p.have[hash] = at
	}
}

// reserve returns a range of n bytes of the pack for one file's content,
// and the file to write it to.
func (p *packer) reserve(n int64) (*os.File, place, error) {
	p.open.Do(func() {
		if p.err = os.MkdirAll(filepath.Join(p.store, packDir), 0o700); p.err != nil {
			return
		}
		var name [8]byte
		rand.Read(name[:])
		p.name = hex.EncodeToString(name[:])
		p.f, p.err = os.OpenFile(packPath(p.store, p.name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	})
	if p.err != nil {
		return nil, place{}, fmt.Errorf("sync: the coordinator's content store: %w", p.err)
	}
	return p.f, place{p.name, p.end.Add(n) - n}, nil
}

// close closes the pack, if one was made.
func (p *packer) close() error {
	if p.f == nil {
		return nil
	}
	if err := p.f.Close(); err != nil {
		return fmt.Errorf("sync: the coordinator's content store: %w", err)
	}
	return nil
}

// repack copies into p's pack the content s has in packs mostly dead to
// it (less than half of each is content s points to), and points s at the
// copies. A file unchanged since it was packed would otherwise keep its
// whole pack, and every edited file's old content in it, for as long as
// the directory's snapshots are taken; once repacked, an old pack goes
// when the lists that name it are older than the keep time.
func (s *Snapshot) repack(p *packer) error {
	// By file: content two files share counts twice, which only errs
	// towards keeping a pack.
	live := map[string]int64{}
	for _, f := range s.Files {
		if f.Link == "" && f.pack != p.name {
			live[f.pack] += f.Size
		}
	}
	sparse := map[string]bool{}
	for pack, n := range live {
		if fi, err := os.Stat(packPath(s.Store, pack)); err == nil && 2*n < fi.Size() {
			sparse[pack] = true
		}
	}
	if len(sparse) == 0 {
		return nil
	}
	c := s.Contents()
	defer c.Close()
	moved := map[place]place{}
	for i := range s.Files {
		f := &s.Files[i]
		if !sparse[f.pack] {
			continue
		}
		from := place{f.pack, f.off}
		to, ok := moved[from]
		if !ok {
			r, err := c.Open(*f)
			if err != nil {
				return fmt.Errorf("sync: the coordinator's content store: %w", err)
			}
			pf, at, err := p.reserve(f.Size)
			if err != nil {
				return err
			}
			_, err = io.CopyN(io.NewOffsetWriter(pf, at.off), r, f.Size)
			switch {
			case errors.Is(err, io.EOF):
				return fmt.Errorf("sync: the coordinator's copy of %s is cut short: run gpudispatch hosts --clean, which removes it, and take the snapshot again", f.Path)
			case err != nil:
				return fmt.Errorf("sync: repacking %s in the coordinator's content store: %w", f.Path, err)
			}
			to, moved[from] = at, at
		}
		f.pack, f.off = to.pack, to.off
	}
	return nil
}

// discard closes and removes the pack, if one was made: the Take failed.
func (p *packer) discard() {
	if p.f != nil {
		p.f.Close()
		os.Remove(p.f.Name())
	}
}

// Contents reads the content of a snapshot's files, each as it was when
// the snapshot was taken; it keeps the packs it opened open until Close.
// One goroutine uses it.
type Contents struct {
	store string
	open  map[string]*os.File
}

// Contents returns a reader of s's content.
func (s *Snapshot) Contents() *Contents {
	return &Contents{store: s.Store, open: map[string]*os.File{}}
}

// Open returns f's content (a regular file of the snapshot).
func (c *Contents) Open(f File) (io.Reader, error) {
	pf, ok := c.open[f.pack]
	if !ok {
		var err error
		if pf, err = os.Open(packPath(c.store, f.pack)); err != nil {
			return nil, err
		}
		c.open[f.pack] = pf
	}
	return io.NewSectionReader(pf, f.off, f.Size), nil
}

// Close closes the packs c opened.
func (c *Contents) Close() {
	for _, pf := range c.open {
		pf.Close()
	}
	clear(c.open)
}
