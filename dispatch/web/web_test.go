package web

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch"
)

// Every request needs the token in its path, and a change must come from
// the page itself: a forged cross-site POST changes nothing. No cookie
// stands for the token (a browser would send a loopback host's cookies to
// every port of it), and a request for another host name (DNS rebinding)
// is refused.
func TestTokenAndForgery(t *testing.T) {
	s := serve(t, setup{})
	ids := s.submit("hold")
	b := s.browser()
	s.waitPage(b, "/", "job "+ids[0])

	wrong := s.http.URL + "/t/" + strings.Repeat("A", len(s.srv.Token()))
	for _, tc := range []struct {
		name string
		url  string
		host string
		want int
	}{
		{"no token", s.http.URL + "/", "", http.StatusForbidden},
		{"no token, a job's log", s.http.URL + "/jobs/" + ids[0] + "/stdout", "", http.StatusForbidden},
		{"no token, the updates", s.http.URL + "/events", "", http.StatusForbidden},
		{"no token, the script", s.http.URL + "/static/app.js", "", http.StatusForbidden},
		{"the token as a query", s.http.URL + "/?token=" + s.srv.Token(), "", http.StatusForbidden},
		{"wrong token", wrong + "/", "", http.StatusForbidden},
		{"wrong token, a job's log", wrong + "/jobs/" + ids[0] + "/stdout", "", http.StatusForbidden},
		{"a token's prefix", s.http.URL + "/t/" + s.srv.Token()[:10] + "/", "", http.StatusForbidden},
		{"the token", s.url("/"), "", http.StatusOK},
		{"the token, a job's log", s.url("/jobs/" + ids[0] + "/stdout"), "", http.StatusOK},
		{"the token, the script", s.url("/static/app.js"), "", http.StatusOK},
		{"the token, as localhost", s.url("/"), "localhost", http.StatusOK},
		{"the token, a name of localhost", s.url("/"), "gpd-x.localhost", http.StatusOK},
		{"the token, IPv6 loopback", s.url("/"), "[::1]", http.StatusOK},
		{"the token, another host name (DNS rebinding)", s.url("/"), "evil.example", http.StatusForbidden},
		{"the token, another address", s.url("/"), "10.1.2.3", http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", tc.url, nil)
			if tc.host != "" {
				req.Host = tc.host + ":8420"
			}
			resp, err := b.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("GET %s (Host %s): %d, want %d\n%s", tc.url, req.Host, resp.StatusCode, tc.want, body)
			}
			if c := resp.Header.Values("Set-Cookie"); len(c) > 0 {
				t.Errorf("GET %s set a cookie: %q", tc.url, c)
			}
			if tc.want == http.StatusForbidden && !resp.Close {
				t.Errorf("GET %s: refused, but the connection was kept open", tc.url)
			}
		})
	}

	cancel := "/jobs/" + ids[0] + "/cancel"
	for _, tc := range []struct {
		name   string
		url    string
		origin string
	}{
		{"no token", s.http.URL + cancel, ""},
		{"no token, the page's origin", s.http.URL + cancel, s.http.URL},
		{"the token, from another origin", s.url(cancel), "http://evil.example"},
		{"the token, from another port of this host", s.url(cancel), "http://127.0.0.1:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", tc.url, strings.NewReader(""))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			resp, err := b.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("forged POST: %s, want 403", resp.Status)
			}
		})
	}
	st, err := s.ctl.Status(context.Background(), s.logDir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Jobs[0].State != dispatch.StateRunning {
		t.Fatalf("after forged cancels the job is %s, want running", st.Jobs[0].State)
	}
	// The page's own form does it.
	req, _ := http.NewRequest("POST", s.url(cancel), strings.NewReader(""))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", s.http.URL)
	resp, err := b.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), s.srv.Path()) {
		t.Fatalf("cancel from the page: %s to %q, want 303 to the page", resp.Status, resp.Header.Get("Location"))
	}
	s.waitPage(b, "/", "cancelled")
}

// The page shows each slot's job, the queue with why each job waits, the
// finished jobs with their outcome and logs, and the GPUs' sample.
func TestPageShowsTheRun(t *testing.T) {
	s := serve(t, setup{sampleEvery: 50 * time.Millisecond})
	b := s.browser()
	s.submit("hold\nhold")
	s.waitPage(b, "/", "2 running · 0 waiting")
	s.submit("exit 3\n[priority=3] print waited")
	// The GPU's name is on the page from its first load; its sample comes
	// with the sampler's first look.
	page := s.waitPage(b, "/", "1024/81920 MiB, 37%")
	for _, want := range []string{
		"<h3>node1", "job 1", "job 2", "<code>hold</code>", // both slots' jobs
		"priority 3", "waits for a free slot; first in line", // the queue, in order, with why
		"Fake A100", "1024/81920 MiB, 37%", // the GPU and its sample
		`action="` + s.srv.base + `/add"`,            // a standing queue takes jobs, under the page's path
		`href="` + s.srv.base + `/static/style.css"`, // so do its files
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if !strings.Contains(page, "2 running · 2 waiting") || strings.Index(page, "print waited") > strings.Index(page, "exit 3") {
		t.Error("queue not in priority order")
	}
	close(s.exec.release)
	page = s.waitPage(b, "/", "4/4 done")
	for _, want := range []string{"succeeded", "failed</b> · exit 3", `href="` + s.srv.base + `/jobs/4/stdout"`, ">retry</button>"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q after the jobs ended", want)
		}
	}
	if code, body := s.get(b, "/jobs/4/stdout"); code != 200 || body != "waited" {
		t.Errorf("job 4's stdout: %d %q, want 200 \"waited\"", code, body)
	}
}

// GPUs are sampled only while someone looks at the page, whatever the
// number of viewers.
func TestSamplesOnlyWhileWatched(t *testing.T) {
	s := serve(t, setup{sampleEvery: 20 * time.Millisecond})
	time.Sleep(200 * time.Millisecond)
	if n := s.probes(); n != 0 {
		t.Fatalf("%d samples with no page open, want 0", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := s.browser()
	for range 5 {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", s.url("/events"), nil)
			if resp, err := b.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	cancel()
	// One host sampled every 20 ms for 300 ms: about 15 samples, shared by
	// the five viewers (not 75).
	if n := s.probes(); n == 0 || n > 30 {
		t.Errorf("%d samples in 300 ms with five viewers, want about 15", n)
	}
}

func (s *served) probes() int {
	s.exec.mu.Lock()
	defer s.exec.mu.Unlock()
	return s.exec.pageProbes
}

// The updates arrive as server-sent events, gzipped, one per part that
// changed: a job appears, then ends, without reloading the page.
func TestUpdatesStream(t *testing.T) {
	s := serve(t, setup{})
	req, _ := http.NewRequest("GET", s.url("/events"), nil)
	req.Header.Set("Accept-Encoding", "gzip")
	tr := &http.Transport{DisableCompression: true}
	c := &http.Client{Transport: tr}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ce := resp.Header.Get("Content-Encoding"); ce != "gzip" {
		t.Fatalf("Content-Encoding %q, want gzip", ce)
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	events := readEvents(zr)
	latest := map[string]string{} // each part as last sent
	next := func(name, want string) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for !strings.Contains(latest[name], want) {
			select {
			case e := <-events:
				latest[e.name] = e.data
			case <-timeout:
				t.Fatalf("no %s event with %q", name, want)
			}
		}
	}
	next("hosts", "node1") // the whole page first
	ids := s.submit("hold")
	next("hosts", "job "+ids[0])
	close(s.exec.release)
	next("finished", "job "+ids[0])
	next("progress", "1/1 done")
}

type sse struct{ name, data string }

// readEvents parses server-sent events from r until it ends.
func readEvents(r io.Reader) <-chan sse {
	ch := make(chan sse, 100)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		var e sse
		var data []string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if e.name != "" {
					e.data = strings.Join(data, "\n")
					ch <- e
				}
				e, data = sse{}, nil
			case strings.HasPrefix(line, "event: "):
				e.name = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				data = append(data, line[len("data: "):])
			}
		}
	}()
	return ch
}

// Jobs are added through the form, errors named by line; cancel, retry and
// priority work from the page.
func TestActions(t *testing.T) {
	s := serve(t, setup{})
	b := s.browser()
	resp := s.post(b, "/add", url.Values{"text": {"hold\nhold\n@nowhere print x\nprint third"}, "priority": {"2"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("add: %s", resp.Status)
	}
	_, page := s.getURL(b, s.http.URL+resp.Header.Get("Location"))
	for _, want := range []string{"queued: job 1, 2, 4", "web:3: ", "nowhere"} {
		if !strings.Contains(page, want) {
			t.Errorf("after add, the page lacks %q", want)
		}
	}
	s.waitPage(b, "/", "priority 2")
	if resp := s.post(b, "/jobs/4/priority", url.Values{"priority": {"9"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("priority: %s", resp.Status)
	}
	s.waitPage(b, "/", "priority 9")
	resp = s.post(b, "/jobs/1/cancel", url.Values{"back": {"/jobs/1"}})
	if loc := resp.Header.Get("Location"); !strings.HasPrefix(loc, s.srv.base+"/jobs/1?note=") {
		t.Errorf("cancel from the job's page went back to %q", loc)
	}
	s.waitPage(b, "/jobs/1", "cancelled")
	s.waitPage(b, "/", "job 4")
	resp = s.post(b, "/jobs/1/retry", url.Values{})
	_, page = s.getURL(b, s.http.URL+resp.Header.Get("Location"))
	if !strings.Contains(page, "job 1: queued again") {
		t.Errorf("retry: the page does not say so:\n%s", page)
	}
	resp = s.post(b, "/jobs/4/retry", url.Values{})
	_, page = s.getURL(b, s.http.URL+resp.Header.Get("Location"))
	if !strings.Contains(page, "has not ended") && !strings.Contains(page, "succeeded") {
		t.Errorf("retry of a job that did not fail: no reason shown:\n%s", page)
	}
}

// A pipe run's page has no form to add jobs.
func TestPipeRunIsReadOnly(t *testing.T) {
	s := serve(t, setup{pipe: true})
	b := s.browser()
	io.WriteString(s.input, "hold\n")
	page := s.waitPage(b, "/", "job 1")
	if strings.Contains(page, `/add"`) {
		t.Error("a pipe run's page shows the add form")
	}
	// Cancel works on any run.
	if resp := s.post(b, "/jobs/1/cancel", url.Values{}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("cancel: %s", resp.Status)
	}
	s.waitPage(b, "/", "cancelled")
	// A form posted anyway is refused with the reason.
	resp := s.post(b, "/add", url.Values{"text": {"print x"}})
	if _, page := s.getURL(b, s.http.URL+resp.Header.Get("Location")); !strings.Contains(page, "jobs can be submitted to gpudispatch serve only") {
		t.Errorf("add to a pipe run: the page does not say why it was refused:\n%s", page)
	}
}

// A standing queue that is stopping takes no job either.
func TestStoppingServerIsReadOnly(t *testing.T) {
	s := serve(t, setup{})
	b := s.browser()
	s.ctl.Stop(context.Background(), false)
	if _, page := s.get(b, "/"); strings.Contains(page, `/add"`) {
		t.Error("a stopping server shows the add form")
	}
}

// A job's page shows the tail of its logs, then follows them.
func TestJobPageFollows(t *testing.T) {
	s := serve(t, setup{})
	b := s.browser()
	ids := s.submit("hold")
	page := s.waitPage(b, "/jobs/"+ids[0], "held")
	if !strings.Contains(page, `<pre id="stdout" data-offset="5">held`) {
		t.Fatalf("job page:\n%s", page)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.url("/jobs/"+ids[0]+"/follow?out=5&err=0"), nil)
	resp, err := b.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := readEvents(resp.Body)
	out := filepath.Join(s.logDir, ids[0]+".out")
	f, err := os.OpenFile(out, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("more é") // "é" cut in two writes, to be sent whole
	f.Write([]byte{0xc3})
	time.Sleep(2 * followEvery)
	f.Write([]byte{0xa9})
	f.Close()
	var got strings.Builder
	timeout := time.After(10 * time.Second)
	for got.String() != "more éé" {
		select {
		case e := <-events:
			if e.name != "stdout" {
				continue
			}
			var tl tail
			if err := json.Unmarshal([]byte(e.data), &tl); err != nil {
				t.Fatal(err)
			}
			got.WriteString(tl.Text)
		case <-timeout:
			t.Fatalf("followed %q, want %q", got.String(), "more éé")
		}
	}
}

// An event's data cannot end the event early or add fields of its own,
// whatever line breaks a job's command holds.
func TestEventFraming(t *testing.T) {
	for _, tc := range []struct{ data, want string }{
		{"<p>a</p>", "event: hosts\ndata: <p>a</p>\n\n"},
		{"a\nb", "event: hosts\ndata: a\ndata: b\n\n"},
		{"x\revent: evil\r\rdata: <img>", "event: hosts\ndata: x\ndata: event: evil\ndata: \ndata: data: <img>\n\n"},
		{"x\r\ny", "event: hosts\ndata: x\ndata: \ndata: y\n\n"},
	} {
		if got := string(event("hosts", "", tc.data)); got != tc.want {
			t.Errorf("event(%q) = %q, want %q", tc.data, got, tc.want)
		}
		got := <-readEvents(strings.NewReader(string(event("hosts", "", tc.data))))
		if got.name != "hosts" {
			t.Errorf("event(%q) read back as %q", tc.data, got.name)
		}
	}
}

// A host that is down says so on its card, with why; the jobs that wait
// for it say so too; it comes back live.
func TestHostDown(t *testing.T) {
	s := serve(t, setup{down: []string{"node1"}})
	b := s.browser()
	s.submit("print x")
	page := s.waitPage(b, "/", "connection refused")
	for _, want := range []string{`<article class="card down">`, "node1 <span class=\"state\">down</span>", "host node1 is down (dial tcp node1:22: connection refused)"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	close(s.exec.back)
	s.waitPage(b, "/", "1/1 done")
	if _, page := s.get(b, "/"); strings.Contains(page, "connection refused") {
		t.Error("the host is back, the page still says it is down")
	}
}

// A host that has not answered yet is connecting, not down, on its card.
func TestHostConnecting(t *testing.T) {
	s := serve(t, setup{opening: []string{"node1"}})
	b := s.browser()
	page := s.waitPage(b, "/", "connecting")
	for _, want := range []string{"node1 <span class=\"state\">connecting</span>", "not answered yet (since "} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, `card down`) {
		t.Error("a host being opened is shown down")
	}
}

// A form over the size limit is refused in words, with what to do instead.
func TestFormTooLarge(t *testing.T) {
	s := serve(t, setup{})
	b := s.browser()
	resp, err := b.PostForm(s.url("/add"), url.Values{"text": {strings.Repeat("x", maxForm+1)}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "larger than 8 MiB") {
		t.Errorf("%s: %s", resp.Status, body)
	}
}

// Before the page's first GPU sample, a GPU is shown with what the run's
// own looks say it is: its name and memory, not bare slots.
func TestHostsBeforeASample(t *testing.T) {
	t.Parallel()
	p := &page{Base: "/t/x", Hosts: []hostCard{{HostView: dispatch.HostView{Name: "node1", GPUs: []dispatch.GPUView{{ID: 0, Slots: 1, MemBudgetMB: -1}}},
		GPUs: []gpuRow{{GPUView: dispatch.GPUView{ID: 0, Slots: 1, MemBudgetMB: -1, Model: "NVIDIA H100 80GB HBM3", MemoryMB: 81559}}}}}}
	var b bytes.Buffer
	if err := render(&b, "hosts", p); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "NVIDIA H100 80GB HBM3 · 81559 MiB") {
		t.Errorf("no name and memory before a sample:\n%s", b.String())
	}
}
