package web

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// client is one viewer's stream of updates. fresh is set until it has been
// sent every part of the page.
type client struct {
	ch    chan []byte
	fresh bool
}

// clientBacklog is how many updates a viewer may be behind before it is
// dropped (its browser reconnects and gets the whole page).
const clientBacklog = 16

// minGap is the least time between two updates: changes in between are
// sent together.
const minGap = 500 * time.Millisecond

// timelineGap is how often live updates draw the timeline again at most.
const timelineGap = 5 * time.Second

// heartbeat is how often an idle stream says it is alive, so that a
// viewer gone without a word is noticed.
const heartbeat = 30 * time.Second

// events streams the main page's updates (server-sent events), each part
// as an event named after it whose data is its HTML.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	if !s.admit(w) {
		return
	}
	defer s.leave()
	st, ok := openStream(w, r)
	if !ok {
		return
	}
	defer st.close()
	c := &client{ch: make(chan []byte, clientBacklog), fresh: true}
	s.mu.Lock()
	s.clients[c] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.clients, c)
		s.mu.Unlock()
	}()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	s.poke()
	st.send(fmt.Appendf(nil, "retry: 2000\nevent: clock\ndata: %d\n\n", time.Now().UnixMilli()))
	beat := time.NewTicker(heartbeat)
	defer beat.Stop()
	for {
		select {
		case msg, ok := <-c.ch:
			if !ok {
				return // fell behind
			}
			if !st.send(msg) {
				return
			}
		case <-beat.C:
			if !st.send([]byte(": alive\n\n")) {
				return
			}
		case <-r.Context().Done():
			return
		case <-s.closed:
			return
		}
	}
}

// update sends each viewer the parts of the page that changed, whenever the
// run or a GPU sample changed something, at most every minGap.
func (s *Server) update(ctx context.Context) {
	var last map[string]string
	var drawn time.Time // when the timeline was last drawn
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.changed:
		}
		s.mu.Lock()
		watched := len(s.clients) > 0
		s.mu.Unlock()
		if !watched {
			last = nil
			continue
		}
		// The timeline, the largest part, is drawn again at most every
		// timelineGap: a busy run's updates would otherwise cost its
		// viewers a drawing of every bar twice a second.
		timeline := last == nil || time.Since(drawn) >= timelineGap
		if p, err := s.snapshot(ctx, true, timeline); err == nil {
			if now, err := renderParts(p, timeline); err == nil {
				if timeline {
					drawn = time.Now()
				} else {
					now["timeline"] = last["timeline"]
				}
				s.broadcast(last, now)
				last = now
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(minGap):
		}
	}
}

// broadcast sends the parts of now that differ from last to the viewers,
// and every part to new ones.
func (s *Server) broadcast(last, now map[string]string) {
	var diff, whole []byte
	for _, name := range parts {
		msg := event(name, "", now[name])
		whole = append(whole, msg...)
		if last == nil || last[name] != now[name] {
			diff = append(diff, msg...)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.clients {
		msg := diff
		if c.fresh {
			msg, c.fresh = whole, false
		}
		if len(msg) == 0 {
			continue
		}
		select {
		case c.ch <- msg:
		default:
			delete(s.clients, c)
			close(c.ch)
		}
	}
}

// event is one server-sent event: its name, its id (when not ""), and
// data over as many lines as it has. A CR ends a line in an event stream,
// so it is sent as a line break (data is HTML, where both are white space,
// or JSON, which has none): a job's command cannot add fields of its own.
func event(name, id, data string) []byte {
	data = strings.ReplaceAll(data, "\r", "\n")
	var b bytes.Buffer
	fmt.Fprintf(&b, "event: %s\n", name)
	if id != "" {
		fmt.Fprintf(&b, "id: %s\n", id)
	}
	for line := range strings.SplitSeq(data, "\n") {
		b.WriteString("data: ")
		b.WriteString(line)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	return b.Bytes()
}

// admit takes a place for a live stream, or answers 503 when every place
// is taken (Options.MaxViewers): the browser tries again by itself.
func (s *Server) admit(w http.ResponseWriter) bool {
	select {
	case s.viewers <- struct{}{}:
		return true
	default:
		http.Error(w, "too many pages of this run are open: close one", http.StatusServiceUnavailable)
		return false
	}
}

// leave gives a live stream's place back.
func (s *Server) leave() { <-s.viewers }

// stream is a response of server-sent events, gzipped when the browser
// takes it: one compressor for the whole stream, so that a part sent again
// costs little more than what changed in it.
type stream struct {
	w  io.Writer
	gz *gzip.Writer
	f  http.Flusher
}

func openStream(w http.ResponseWriter, r *http.Request) (*stream, bool) {
	f, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported here", http.StatusInternalServerError)
		return nil, false
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	st := &stream{w: w, f: f}
	if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		h.Set("Content-Encoding", "gzip")
		h.Add("Vary", "Accept-Encoding")
		st.gz = gzipWriters.Get().(*gzip.Writer)
		st.gz.Reset(w)
		st.w = st.gz
	}
	w.WriteHeader(http.StatusOK)
	f.Flush() // the browser knows at once that the stream is open
	return st, true
}

var gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(io.Discard) }}

// send writes msg and pushes it to the browser; false once it cannot.
func (st *stream) send(msg []byte) bool {
	if _, err := st.w.Write(msg); err != nil {
		return false
	}
	if st.gz != nil && st.gz.Flush() != nil {
		return false
	}
	st.f.Flush()
	return true
}

func (st *stream) close() {
	if st.gz != nil {
		st.gz.Close()
		gzipWriters.Put(st.gz)
	}
}
