package jobshell

import (
	"bytes"
	"io"
	"sync"

	"github.com/gpudispatch/gpudispatch/hosts/spawn"
)

// stream is one of a shell's output streams. It passes a job's bytes to the
// job's writer up to the job's end mark (NUL, then the mark), and notices
// bytes that come between jobs: something that left a job's process group
// still writing, which makes the shell unfit for another job.
type stream struct {
	mu         sync.Mutex
	state      int       // between, body or status
	w          io.Writer // the job's
	mark       []byte    // NUL and the job's mark
	wantStatus bool      // a status line follows the mark
	held       []byte    // the end of what came, which may begin the mark
	status     []byte
	end        chan string
	werr       error // the first error writing to w
	stray      bool  // bytes came between jobs
	// total counts every byte that came since the stream files were
	// started: where the next job's output starts in them. passed counts
	// the job's bytes given to w.
	total, passed int64
	// ready, on a new shell's stdout, is closed once the shell said hello:
	// it is set up. heard counts the bytes of hello that came so far; -1
	// once it came, or did not (the shell answered without it). A hello
	// that hands a state on (login "share") has a record after it, taken
	// by handed, then kept in st.
	ready  chan struct{}
	heard  int
	handed spawn.RecordDecoder
	st     *State
}

// hello is what a job shell writes first on its stdout, once, when it is
// set up; a shell that cannot be set up does not (shell.sh). After it, a
// newline, or a space and a record of a State's parts and its PATH.
const hello = "\x00ready"

// maxState bounds the state a shell hands on: a login profile's
// variables and functions are kilobytes.
const maxState = 16 << 20

// newStdout returns the stream of a new shell's stdout, which listens for
// the shell's hello.
func newStdout() *stream { return &stream{ready: make(chan struct{})} }

// The states of a stream.
const (
	between = iota // no job: any byte is stray
	body           // the job's bytes, up to the mark
	status         // after the mark, up to a newline
)

// start directs the stream to w until mark. The returned channel gets what
// follows the mark up to a newline when wantStatus is set (the exit status),
// or "" right after the mark.
func (s *stream) start(w io.Writer, mark string, wantStatus bool) <-chan string {
	end := make(chan string, 1)
	s.startInto(end, w, mark, wantStatus)
	return end
}

// startInto is start with the channel to say the end on (buffered: it is
// sent on once).
func (s *stream) startInto(end chan string, w io.Writer, mark string, wantStatus bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state, s.w, s.mark, s.wantStatus = body, w, append([]byte{0}, mark...), wantStatus
	s.held, s.status, s.werr, s.passed = s.held[:0], s.status[:0], nil, 0
	s.end = end
}

// Write implements io.Writer for the shell's process.
func (s *stream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(p)
	if s.ready != nil && s.heard >= 0 {
		p = s.listen(p)
	}
	s.total += int64(len(p))
	for len(p) > 0 {
		switch s.state {
		case between:
			s.stray = true
			return n, nil
		case status:
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				s.status = append(s.status, p...)
				return n, nil
			}
			s.status = append(s.status, p[:i]...)
			s.finish(string(s.status))
			p = p[i+1:]
		default:
			p = s.scan(p)
		}
	}
	return n, nil
}

// listen takes the shell's hello from the start of p and returns what
// follows it; when p is not the hello, it returns what came of it so far
// and p, to be read as output. The hello is not in the stream files: it
// counts in no offset. s.mu is held.
func (s *stream) listen(p []byte) []byte {
	for len(p) > 0 && s.heard < len(hello) {
		if p[0] != hello[s.heard] {
			rest := append([]byte(hello[:s.heard]), p...)
			s.heard = -1
			return rest
		}
		s.heard, p = s.heard+1, p[1:]
	}
	for len(p) > 0 && s.heard >= len(hello) {
		switch {
		case s.heard == len(hello) && p[0] == '\n':
			s.heard, p = -1, p[1:]
		case s.heard == len(hello) && p[0] == ' ':
			s.heard, p = s.heard+1, p[1:]
		case s.heard == len(hello):
			// Not a hello this shell writes: the rest is output.
			rest := append([]byte(hello), p...)
			s.heard = -1
			return rest
		default:
			rest, done, err := s.handed.Feed(p)
			p = rest
			switch {
			case err != nil:
				// No record a shell writes: no state, the shell is set up.
				s.heard = -1
			case done:
				s.st = stateOf(s.handed.Fields())
				s.heard = -1
			}
		}
	}
	if s.heard == -1 {
		close(s.ready)
	}
	return p
}

// handedState is the state the shell handed on with its hello, or nil.
func (s *stream) handedState() *State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// scan passes p to the job up to the mark and returns what follows the mark
// (nothing when it is not complete yet). s.mu is held.
func (s *stream) scan(p []byte) []byte {
	data := p
	if len(s.held) > 0 {
		data = append(s.held, p...)
	}
	if i := bytes.Index(data, s.mark); i >= 0 {
		s.pass(data[:i])
		rest := data[i+len(s.mark):]
		if s.wantStatus {
			s.state = status
		} else {
			s.finish("")
		}
		return rest
	}
	k := partialMark(data, s.mark)
	s.pass(data[:len(data)-k])
	s.held = append(s.held[:0], data[len(data)-k:]...)
	return nil
}

// partialMark is the length of the longest end of data that begins mark
// (whose first byte is NUL), shorter than mark.
func partialMark(data, mark []byte) int {
	for j := max(0, len(data)-len(mark)+1); j < len(data); j++ {
		if data[j] == 0 && bytes.HasPrefix(mark, data[j:]) {
			return len(data) - j
		}
	}
	return 0
}

// finish ends the job on this stream. s.mu is held.
func (s *stream) finish(tail string) {
	s.state, s.w, s.held = between, nil, s.held[:0]
	s.end <- tail
}

// pass writes b to the job's writer, keeping the first error.
func (s *stream) pass(b []byte) {
	s.passed += int64(len(b))
	if len(b) == 0 || s.werr != nil {
		return
	}
	if _, err := s.w.Write(b); err != nil {
		s.werr = err
	}
}

// abort ends the job on this stream when the shell ended before the mark.
// What was held back (the start of what may be the mark) is not the job's
// yet: it is read again from where the job's output was kept. abort returns
// how many of the job's bytes were given to its writer.
func (s *stream) abort() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state, s.w, s.held = between, nil, nil
	return s.passed
}

// size is how many bytes came since the stream files were started.
func (s *stream) size() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// restart says that the stream files start again from nothing.
func (s *stream) restart() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total = 0
}

// writeErr is the first error writing the job's output.
func (s *stream) writeErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.werr
}

// strayed reports whether bytes came between jobs.
func (s *stream) strayed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stray
}
