package web

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch"
	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// Handler answers the page's requests, each guarded by the token.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", s.index)
	mux.HandleFunc("GET /events", s.events)
	mux.HandleFunc("GET /jobs/{id}", s.job)
	mux.HandleFunc("GET /jobs/{id}/follow", s.follow)
	mux.HandleFunc("GET /jobs/{id}/stdout", s.log(func(j *jobInfo) string { return j.Stdout }))
	mux.HandleFunc("GET /jobs/{id}/stderr", s.log(func(j *jobInfo) string { return j.Stderr }))
	mux.HandleFunc("GET /jobs/{id}/returned/{path...}", s.returned)
	mux.HandleFunc("POST /add", s.add)
	ctl := s.o.Control
	mux.HandleFunc("POST /jobs/{id}/cancel", s.act(func(ctx context.Context, id string, _ *http.Request) (dispatch.Answer, error) {
		return one(ctl.Cancel(ctx, []string{id}))
	}))
	mux.HandleFunc("POST /jobs/{id}/retry", s.act(func(ctx context.Context, id string, _ *http.Request) (dispatch.Answer, error) {
		return one(ctl.Retry(ctx, []string{id}))
	}))
	mux.HandleFunc("POST /bulk/retry", s.bulk("retry"))
	mux.HandleFunc("POST /bulk/cancel", s.bulk("cancel"))
	mux.HandleFunc("POST /jobs/{id}/priority", s.act(func(ctx context.Context, id string, r *http.Request) (dispatch.Answer, error) {
		prio, err := formInt(r, "priority")
		if err != nil {
			return dispatch.Answer{}, err
		}
		return ctl.SetPriority(ctx, id, prio)
	}))
	return s.guard(mux)
}

// overviewWait bounds how long the page waits for the run's loop.
const overviewWait = 5 * time.Second

// snapshot draws the page as it is now; live leaves elapsed times to the
// script; timeline says whether to draw the timeline.
func (s *Server) snapshot(ctx context.Context, live, timeline bool) (*page, error) {
	ctx, cancel := context.WithTimeout(ctx, overviewWait)
	defer cancel()
	o, err := s.o.Control.Overview(ctx, s.o.ListLimit)
	ended := errors.Is(err, dispatch.ErrRunEnded)
	if err != nil && !ended {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ended {
		o = s.lastOverview
	} else {
		s.lastOverview = o
	}
	return s.build(o, ended, time.Now(), live, timeline), nil
}

func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	s.viewed()
	p, err := s.snapshot(r.Context(), false, true)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	p.Note = s.note(r)
	p.Filter = filterOf(r.URL.Query())
	p.Finished = slices.DeleteFunc(p.Finished, func(j *jobInfo) bool { return !p.Filter.shows(j) })
	p.Waiting = slices.DeleteFunc(p.Waiting, func(j dispatch.WaitingJob) bool { return !p.Filter.showsJob(j.ID, dispatch.StateWaiting) })
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	render(w, "index", p)
}

// viewed notes a page view: GPUs are sampled while someone looks.
func (s *Server) viewed() {
	s.mu.Lock()
	first := time.Since(s.lastSeen) > s.o.SampleEvery && len(s.clients) == 0
	s.lastSeen = time.Now()
	s.mu.Unlock()
	if first {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// jobOf is the job named in r's path, or nil after a 404.
func (s *Server) jobOf(w http.ResponseWriter, r *http.Request) *jobInfo {
	id := r.PathValue("id")
	s.mu.Lock()
	var c *jobInfo
	if j := s.jobs[id]; j != nil {
		c = j.copy()
	}
	s.mu.Unlock()
	if c == nil {
		http.Error(w, fmt.Sprintf("no job %q in this run", id), http.StatusNotFound)
	}
	return c
}

func (s *Server) job(w http.ResponseWriter, r *http.Request) {
	s.viewed()
	j := s.jobOf(w, r)
	if j == nil {
		return
	}
	p := &page{Base: s.base, Now: time.Now(), Note: s.note(r)}
	jp := jobPage{jobView: jobView{Page: p, Job: j, Back: "/jobs/" + j.ID}}
	jp.Out, jp.Err = readTail(j.Stdout, -1), readTail(j.Stderr, -1)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	render(w, "job", jp)
}

// log sends the whole of a job's log that which names, as plain text.
func (s *Server) log(which func(*jobInfo) string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		j := s.jobOf(w, r)
		if j != nil {
			serveLog(w, r, j.ID, which(j))
		}
	}
}

func serveLog(w http.ResponseWriter, r *http.Request, id, path string) {
	if path == "" {
		http.Error(w, "job "+id+" has not started: it has no log yet", http.StatusNotFound)
		return
	}
	f, err := os.Open(path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	http.ServeContent(w, r, "", st.ModTime(), f)
}

// returned sends a file a job brought back, read-only, from inside the
// job's return directory in the log dir (os.Root: no path or link leads
// out of it), and only one the run said came back.
func (s *Server) returned(w http.ResponseWriter, r *http.Request) {
	j := s.jobOf(w, r)
	if j == nil {
		return
	}
	name := r.PathValue("path")
	dir := dispatch.ReturnDir(dispatch.Event{Stdout: j.Stdout})
	if dir == "" || !slices.ContainsFunc(j.Returned, func(f executor.ReturnedFile) bool { return f.Path == name }) {
		http.Error(w, fmt.Sprintf("job %s brought back no file %q", j.ID, name), http.StatusNotFound)
		return
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	defer root.Close()
	f, err := root.Open(name)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		http.Error(w, fmt.Sprintf("%s is not a file", name), http.StatusNotFound)
		return
	}
	// Served as bytes to save, never as a page of this origin.
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", "attachment")
	http.ServeContent(w, r, "", st.ModTime(), f)
}

// add queues the job lines of the form.
func (s *Server) add(w http.ResponseWriter, r *http.Request) {
	prio, err := formInt(r, "priority")
	if err != nil {
		s.redirect(w, r, "/", note{Bad: true, Lines: []string{err.Error()}})
		return
	}
	out, err := s.o.Control.Submit(r.Context(), dispatch.Batch{
		Source: "web", Text: r.PostFormValue("text"), Defaults: dispatch.Defaults{Priority: prio},
	})
	n := note{Bad: err != nil || len(out.Errors) > 0}
	switch {
	case err != nil:
		n.Lines = append(n.Lines, err.Error())
	case len(out.IDs) > 0:
		n.Lines = append(n.Lines, "queued: job "+strings.Join(out.IDs, ", "))
	case len(out.Errors) == 0:
		n.Lines = append(n.Lines, "no job line: nothing was queued")
	}
	n.Lines = append(n.Lines, out.Errors...)
	s.redirect(w, r, "/", n)
}

// act answers a form that does one thing to the job of the path, and
// returns to the page it came from with the answer.
func (s *Server) act(do func(ctx context.Context, id string, r *http.Request) (dispatch.Answer, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		back := r.PostFormValue("back")
		if back != "/jobs/"+id {
			back = "/"
		}
		a, err := do(r.Context(), id, r)
		switch {
		case err != nil:
			s.redirect(w, r, back, note{Bad: true, Lines: []string{err.Error()}})
		case a.Err != "":
			s.redirect(w, r, back, note{Bad: true, Lines: []string{a.Err}})
		default:
			s.redirect(w, r, back, note{Lines: []string{"job " + id + ": " + a.Message}})
		}
	}
}

// one is the answer about the one job a request named.
func one(as []dispatch.Answer, err error) (dispatch.Answer, error) {
	if err != nil || len(as) == 0 {
		return dispatch.Answer{}, err
	}
	return as[0], nil
}

// formInt reads a whole number from the form; "" is 0.
func formInt(r *http.Request, name string) (int, error) {
	v := strings.TrimSpace(r.PostFormValue(name))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s %q: want a whole number", name, v)
	}
	return n, nil
}

// redirect answers a form with the page it came from, showing n on it.
func (s *Server) redirect(w http.ResponseWriter, r *http.Request, back string, n note) {
	s.mu.Lock()
	id := s.notes.add(n)
	s.mu.Unlock()
	sep := "?"
	if strings.Contains(back, "?") {
		sep = "&"
	}
	http.Redirect(w, r, s.base+back+sep+"note="+strconv.Itoa(id), http.StatusSeeOther)
}

// note is the page's answer to a form, shown on the page it returns to.
type note struct {
	Bad   bool
	Lines []string
}

// notes keeps the latest answers, for the page a form returns to.
type notes struct {
	next int
	kept map[int]note
}

// keptNotes is how many answers are kept.
const keptNotes = 64

func (n *notes) add(x note) int {
	if n.kept == nil {
		n.kept = map[int]note{}
	}
	n.next++
	n.kept[n.next] = x
	delete(n.kept, n.next-keptNotes)
	return n.next
}

// note is the answer r's URL names, if any.
func (s *Server) note(r *http.Request) *note {
	id, err := strconv.Atoi(r.URL.Query().Get("note"))
	if err != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.notes.kept[id]; ok {
		return &n
	}
	return nil
}
