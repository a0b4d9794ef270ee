package web

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/gpudispatch/gpudispatch/dispatch"
)

// A filter shows the jobs in its state whose id matches its glob; an
// unknown state or a bad glob shows everything.
func TestFilter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		query string
		id    string
		state dispatch.JobState
		want  bool
	}{
		{"", "7", dispatch.EventFailed.State(), true},
		{"state=failed", "7", dispatch.EventFailed.State(), true},
		{"state=failed", "7", dispatch.EventFinished.State(), false},
		{"state=unsuccessful", "7", dispatch.EventTimeout.State(), true},
		{"state=unsuccessful", "7", dispatch.EventFinished.State(), false},
		{"state=unsuccessful", "7", dispatch.StateWaiting, false},
		{"name=train_*", "train_3", dispatch.StateWaiting, true},
		{"name=train_*", "eval_3", dispatch.StateWaiting, false},
		{"state=failed&name=train_*", "train_3", dispatch.EventFailed.State(), true},
		{"state=nosuch&name=[", "x", dispatch.EventFailed.State(), true},
	}
	for _, tt := range tests {
		v, _ := url.ParseQuery(tt.query)
		if got := filterOf(v).showsJob(tt.id, tt.state); got != tt.want {
			t.Errorf("%q shows %s (%s): %v, want %v", tt.query, tt.id, tt.state, got, tt.want)
		}
	}
}

// The page's filter is kept in its URL and shows only what it names; the
// bulk actions list what they would do and ask, then do exactly that:
// retry every failed job shown, cancel every waiting job shown.
func TestFilterAndBulkActions(t *testing.T) {
	t.Parallel()
	s := serve(t, setup{})
	c := s.browser()
	s.submit("[name=train_1] exit 3\n[name=train_2] exit 4\n[name=eval_1] exit 5\n[name=ok_1] exit 0\n")
	for _, job := range []string{`"ok_1" data-state="finished"`, `"eval_1" data-state="failed"`, `"train_1" data-state="failed"`, `"train_2" data-state="failed"`} {
		s.waitPage(c, "/", `data-id=`+job)
	}
	_, body := s.get(c, "/?state=failed&name=train_*")
	if !strings.Contains(body, `data-id="train_1"`) || !strings.Contains(body, `data-id="train_2"`) || strings.Contains(body, `data-id="eval_1"`) || strings.Contains(body, `data-id="ok_1"`) {
		t.Errorf("the filtered page:\n%s", body)
	}
	// Asked first: the jobs it would retry, and nothing done yet.
	resp, err := c.PostForm(s.url("/bulk/retry"), url.Values{"state": {"failed"}, "name": {"train_*"}})
	if err != nil {
		t.Fatal(err)
	}
	page := readBody(t, resp)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "Run these 2 jobs again?") || !strings.Contains(page, `name="id" value="train_1"`) || strings.Contains(page, "eval_1") {
		t.Errorf("the confirmation (%d):\n%s", resp.StatusCode, page)
	}
	// Confirmed: those two run again, the other failed job does not.
	resp = s.post(c, "/bulk/retry", url.Values{"confirm": {"yes"}, "state": {"failed"}, "name": {"train_*"}, "id": {"train_1", "train_2"}})
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.Contains(loc, "/?name=train_%2A&state=failed&note=") {
		t.Errorf("after the retry: %d to %q, want back to the filtered page", resp.StatusCode, resp.Header.Get("Location"))
	}
	s.waitPage(c, "/?note=1", "train_1: queued again")
	// Cancel every waiting job shown: a job held at the back of the queue.
	s.submit("[name=hold_1] hold\n[name=hold_2] hold\n[name=late_1] exit 0\n[name=late_2] exit 0\n")
	s.waitPage(c, "/", `data-id="late_2" data-state="waiting"`)
	resp, err = c.PostForm(s.url("/bulk/cancel"), url.Values{"name": {"late_*"}})
	if err != nil {
		t.Fatal(err)
	}
	page = readBody(t, resp)
	if !strings.Contains(page, "Cancel these 2 waiting jobs?") {
		t.Errorf("the cancel confirmation:\n%s", page)
	}
	s.post(c, "/bulk/cancel", url.Values{"confirm": {"yes"}, "name": {"late_*"}, "id": {"late_1", "late_2"}})
	s.waitPage(c, "/?state=cancelled", `data-id="late_2"`)
}

// readBody reads and closes resp's body.
func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
