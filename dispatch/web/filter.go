package web

import (
	"context"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch"
)

// filter is what the page shows of the jobs: those in a state (State; ""
// for any, "unsuccessful" for any that ended without success) whose id
// matches the glob Name ("" for any). It is kept in the page's URL
// (?state=failed&name=train_*); the page's script applies it to each
// update, and the bulk actions act on what it shows.
type filter struct {
	State dispatch.JobState
	Name  string
}

// unsuccessful is the filter's state of every job that ended without
// success.
const unsuccessful dispatch.JobState = "unsuccessful"

// filterState is a state a filter may name, and its words.
type filterState struct {
	state dispatch.JobState
	words string
}

// filterStates are the states a filter may name.
var filterStates = []filterState{
	{"", "any state"}, {dispatch.StateWaiting, "waiting"}, {dispatch.StateRunning, "running"},
	{dispatch.EventFinished.State(), "succeeded"}, {unsuccessful, "not succeeded"}, {dispatch.EventFailed.State(), "failed"},
	{dispatch.EventTimeout.State(), "timed out"}, {dispatch.EventLost.State(), "lost"}, {dispatch.EventCancelled.State(), "cancelled"},
}

// filterOf reads a filter from the values of a request: an unknown state
// or a bad glob is none.
func filterOf(v url.Values) filter {
	f := filter{State: dispatch.JobState(v.Get("state")), Name: strings.TrimSpace(v.Get("name"))}
	if !slices.ContainsFunc(filterStates, func(s filterState) bool { return s.state == f.State }) {
		f.State = ""
	}
	if _, err := path.Match(f.Name, ""); err != nil {
		f.Name = ""
	}
	return f
}

// shows reports whether j is shown.
func (f filter) shows(j *jobInfo) bool { return f.showsJob(j.ID, j.State) }

// showsJob reports whether the job id, in state, is shown.
func (f filter) showsJob(id string, state dispatch.JobState) bool {
	switch {
	case f.State == unsuccessful && (!dispatch.Ended(state) || state == dispatch.EventFinished.State()):
		return false
	case f.State != "" && f.State != unsuccessful && f.State != state:
		return false
	}
	ok, _ := path.Match(f.Name, id)
	return f.Name == "" || ok
}

// Query is f as a URL query: "?state=failed&name=train_%2A", or "".
func (f filter) Query() string {
	v := url.Values{}
	if f.State != "" {
		v.Set("state", string(f.State))
	}
	if f.Name != "" {
		v.Set("name", f.Name)
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}

// Choices are the filter's states, for its form.
func (f filter) Choices() []stateChoice {
	out := make([]stateChoice, len(filterStates))
	for i, s := range filterStates {
		out[i] = stateChoice{Value: string(s.state), Word: s.words, Selected: s.state == f.State}
	}
	return out
}

type stateChoice struct {
	Value, Word string
	Selected    bool
}

// confirmPage asks before a bulk action: what it does to which jobs.
type confirmPage struct {
	Page   *page
	Action string // "retry" or "cancel"
	IDs    []string
	Filter filter
}

// bulk answers the two bulk actions: retry every job the filter shows
// that may be retried, cancel every waiting job it shows. The first post
// lists the jobs and asks; the confirmation acts on exactly those.
func (s *Server) bulk(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f := filterOf(r.PostForm)
		if r.PostFormValue("confirm") != "yes" {
			p := &page{Base: s.base, Now: time.Now()}
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			render(w, "confirm", confirmPage{Page: p, Action: action, IDs: s.bulkIDs(action, f), Filter: f})
			return
		}
		ids := r.PostForm["id"]
		var as []dispatch.Answer
		var err error
		ctx, cancel := context.WithTimeout(r.Context(), overviewWait)
		defer cancel()
		if action == "retry" {
			as, err = s.o.Control.Retry(ctx, ids)
		} else {
			as, err = s.o.Control.Cancel(ctx, ids)
		}
		n := note{}
		if err != nil {
			n.Bad, n.Lines = true, []string{err.Error()}
		}
		for i, a := range as {
			switch {
			case a.Err != "":
				n.Bad = true
				n.Lines = append(n.Lines, "job "+ids[i]+": "+a.Err)
			default:
				n.Lines = append(n.Lines, "job "+ids[i]+": "+a.Message)
			}
		}
		if len(n.Lines) == 0 {
			n.Lines = []string{"no job to " + action}
		}
		s.redirect(w, r, "/"+f.Query(), n)
	}
}

// bulkIDs are the jobs the filter shows that action applies to, in id
// order.
func (s *Server) bulkIDs(action string, f filter) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, j := range s.jobs {
		applies := j.Retryable()
		if action == "cancel" {
			applies = j.State == dispatch.StateWaiting
		}
		if applies && f.shows(j) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
