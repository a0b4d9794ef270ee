package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// tailCap bounds what one response or one update sends of a log: a job
// that prints faster than a browser should read is skipped over, and the
// whole file stays one link away.
const tailCap = 64 << 10

// followEvery is how often a followed job's logs are looked at.
const followEvery = 500 * time.Millisecond

// tail is a piece of a log: Text, which ends at offset End, after Skipped
// bytes not sent.
type tail struct {
	Text    string `json:"text"`
	Skipped int64  `json:"skipped,omitempty"`
	End     int64  `json:"-"`
}

// readTail reads path from offset from (from < 0: its last tailCap bytes).
// At most tailCap bytes are read; when more than that is new, the start is
// skipped. A character cut at the end is left for the next read.
func readTail(path string, from int64) tail {
	t := tail{End: max(from, 0)}
	if path == "" {
		return t
	}
	f, err := os.Open(path)
	if err != nil {
		return t
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() <= from {
		return t
	}
	size := st.Size()
	start := max(from, 0)
	if from < 0 || size-start > tailCap {
		start = max(size-tailCap, start)
	}
	t.Skipped = start - max(from, 0)
	b := make([]byte, size-start)
	n, err := f.ReadAt(b, start)
	if err != nil && err != io.EOF {
		return t
	}
	b = b[:n]
	if t.Skipped > 0 {
		// Start at a character's start, after a skip.
		for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
			b, start, t.Skipped = b[1:], start+1, t.Skipped+1
		}
	}
	b = b[:completeRunes(b)]
	t.Text, t.End = strings.ToValidUTF8(string(b), "\uFFFD"), start+int64(len(b))
	return t
}

// completeRunes is how much of b ends with a whole character: a UTF-8
// sequence cut at the end waits for its last bytes.
func completeRunes(b []byte) int {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		c := b[len(b)-i]
		if !utf8.RuneStart(c) {
			continue
		}
		if utf8.FullRune(b[len(b)-i:]) {
			return len(b)
		}
		return len(b) - i
	}
	return len(b)
}

// follow streams a job's new stdout and stderr bytes, and its state when it
// changes, from the offsets the page was drawn with (or the stream's last
// event id when the browser reconnects).
func (s *Server) follow(w http.ResponseWriter, r *http.Request) {
	j := s.jobOf(w, r)
	if j == nil {
		return
	}
	out, _ := strconv.ParseInt(r.URL.Query().Get("out"), 10, 64)
	errOff, _ := strconv.ParseInt(r.URL.Query().Get("err"), 10, 64)
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		fmt.Sscanf(id, "%d,%d", &out, &errOff)
	}
	if !s.admit(w) {
		return
	}
	defer s.leave()
	st, ok := openStream(w, r)
	if !ok {
		return
	}
	defer st.close()
	version, logs := j.version, j.Stdout
	tick := time.NewTicker(followEvery)
	defer tick.Stop()
	idle := time.Now()
	for {
		var msg []byte
		s.mu.Lock()
		now := s.jobs[j.ID].copy()
		s.mu.Unlock()
		if now.Stdout != logs {
			// A new attempt, with logs of its own.
			logs, out, errOff = now.Stdout, 0, 0
			msg = append(msg, event("attempt", "0,0", "")...)
		}
		for _, f := range []struct {
			name, path string
			off        *int64
		}{{"stdout", now.Stdout, &out}, {"stderr", now.Stderr, &errOff}} {
			t := readTail(f.path, *f.off)
			if t.Text == "" && t.Skipped == 0 {
				continue
			}
			*f.off = t.End
			data, _ := json.Marshal(t)
			msg = append(msg, event(f.name, fmt.Sprintf("%d,%d", out, errOff), string(data))...)
		}
		if now.version != version {
			version = now.version
			var b bytes.Buffer
			p := &page{Base: s.base, Live: true, Now: time.Now()}
			render(&b, "jobhead", jobView{Page: p, Job: now, Back: "/jobs/" + now.ID})
			msg = append(msg, event("job", "", b.String())...)
		}
		if len(msg) == 0 && time.Since(idle) > heartbeat {
			msg = []byte(": alive\n\n")
		}
		if len(msg) > 0 {
			idle = time.Now()
			if !st.send(msg) {
				return
			}
		}
		select {
		case <-tick.C:
		case <-r.Context().Done():
			return
		case <-s.closed:
			return
		}
	}
}
