package web

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch"
	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// fakeExec runs the jobs of the page's tests without a shell:
//
//	print TEXT    writes TEXT to stdout and TEXT to stderr, exits 0
//	exit N        exits N
//	hold          prints "held", then runs until cancelled or released
//	spam N        writes N bytes of "x" to stdout
type fakeExec struct {
	release chan struct{} // closed: every hold ends (exit 0)
	// back, when set, holds WaitUp until it is closed.
	back chan struct{}
	mu   sync.Mutex
	// pageProbes counts the page's looks at the GPUs.
	pageProbes int
}

func (f *fakeExec) Run(ctx context.Context, host string, c executor.Command, stdout, stderr io.Writer) (int, error) {
	verb, arg, _ := strings.Cut(c.Script, " ")
	switch verb {
	case "print":
		fmt.Fprint(stdout, arg)
		fmt.Fprint(stderr, arg)
	case "exit":
		n, _ := strconv.Atoi(arg)
		return n, nil
	case "hold":
		fmt.Fprintln(stdout, "held")
		select {
		case <-ctx.Done():
			return -1, context.Cause(ctx)
		case <-f.release:
		}
	case "spam":
		n, _ := strconv.Atoi(arg)
		stdout.Write([]byte(strings.Repeat("x", n)))
	}
	return 0, nil
}

func (f *fakeExec) Fetch(context.Context, string, executor.Return, string) (executor.Returned, error) {
	return executor.Returned{}, nil
}

func (f *fakeExec) WaitUp(ctx context.Context, _ string) error {
	if f.back != nil {
		select {
		case <-f.back:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (*fakeExec) Reap(context.Context, string, string) error { return nil }
func (*fakeExec) LockGPU(_ context.Context, _ string, gpu executor.GPUID, _ string) (executor.GPULock, error) {
	return &fakeLock{key: fmt.Sprint("index-", gpu), lost: make(chan struct{})}, nil
}

func (f *fakeExec) ProbeGPUs(_ context.Context, host string) ([]executor.GPU, error) {
	return []executor.GPU{
		{Index: 0, Name: "Fake A100", MemoryTotalMB: 81920, MemoryUsedMB: 1024, Utilization: 37},
		{Index: 1, Name: "Fake A100", MemoryTotalMB: 81920, MemoryUsedMB: 0, Utilization: 0},
	}, nil
}

type fakeLock struct {
	key  string
	lost chan struct{}
	once sync.Once
}

func (l *fakeLock) Key() string           { return l.key }
func (l *fakeLock) UsedMB() int           { return -1 }
func (l *fakeLock) Share() (int, string)  { return -1, "" }
func (l *fakeLock) Lost() <-chan struct{} { return l.lost }
func (l *fakeLock) Release()              { l.once.Do(func() { close(l.lost) }) }

// served is a run on two GPUs of host node1, with its page.
type served struct {
	t *testing.T
	// input is a pipe run's input (nil for a standing queue).
	input  *io.PipeWriter
	ctl    *dispatch.Control
	exec   *fakeExec
	srv    *Server
	http   *httptest.Server
	logDir string
	done   chan struct{}
}

// setup is how a test's run starts: GPUs sampled every sampleEvery (0: an
// hour), down the hosts down at its start (until exec.back is closed), and
// with pipe a run that reads its jobs from served.input rather than a
// standing queue; opening are hosts not opened yet (they never are).
type setup struct {
	sampleEvery time.Duration
	down        []string
	opening     []string
	pipe        bool
}

// serve starts a run and its page as u says; the test's end stops both.
func serve(t *testing.T, u setup) *served {
	t.Helper()
	sampleEvery, down := cmp.Or(u.sampleEvery, time.Hour), u.down
	s := &served{t: t, ctl: dispatch.NewControl(), exec: &fakeExec{release: make(chan struct{})}, logDir: t.TempDir(), done: make(chan struct{})}
	var err error
	// The page's samples are counted apart from the run's own looks.
	probe := func(ctx context.Context, host string) ([]executor.GPU, error) {
		s.exec.mu.Lock()
		s.exec.pageProbes++
		s.exec.mu.Unlock()
		return s.exec.ProbeGPUs(ctx, host)
	}
	s.srv, err = New(Options{Control: s.ctl, Probe: probe, SampleEvery: sampleEvery, ListLimit: 5})
	if err != nil {
		t.Fatal(err)
	}
	downs := map[string]error{}
	if len(down) > 0 {
		s.exec.back = make(chan struct{})
	}
	for _, h := range down {
		downs[h] = fmt.Errorf("dial tcp %s:22: connection refused", h)
	}
	inv := &inventory.Inventory{Hosts: []inventory.Host{{Name: "node1", GPUs: []int{0, 1}, SlotsPerGPU: 1}}}
	ctx, cancel := context.WithCancel(context.Background())
	var inputs []dispatch.Input
	if u.pipe {
		r, w := io.Pipe()
		s.input, inputs = w, []dispatch.Input{{R: r}}
	}
	go s.srv.Run(ctx)
	go func() {
		defer close(s.done)
		_, err := dispatch.Run(ctx, dispatch.Options{
			Inventory: inv, Executor: s.exec, LogDir: s.logDir, Serve: !u.pipe,
			Control: s.ctl, Reporters: []dispatch.Reporter{s.srv}, Down: downs, Opening: u.opening,
		}, inputs)
		if err != nil {
			t.Error(err)
		}
	}()
	s.http = httptest.NewServer(s.srv.Handler())
	t.Cleanup(func() {
		s.srv.close()
		s.http.Close()
		select {
		case <-s.exec.release:
		default:
			close(s.exec.release)
		}
		if s.exec.back != nil {
			select {
			case <-s.exec.back:
			default:
				close(s.exec.back)
			}
		}
		s.ctl.Stop(context.Background(), true)
		if s.input != nil {
			s.input.Close()
		}
		<-s.done
		cancel()
	})
	return s
}

// submit queues lines and returns their ids.
func (s *served) submit(lines string) []string {
	s.t.Helper()
	out, err := s.ctl.Submit(context.Background(), dispatch.Batch{Text: lines})
	if err != nil || len(out.Errors) > 0 {
		s.t.Fatalf("submit: %v %v", err, out.Errors)
	}
	return out.IDs
}

// browser is an HTTP client as a browser that opened the page's URL is:
// it holds no cookie (the page sets none) and follows no redirect by
// itself. Its requests go under the page's path (s.url).
func (s *served) browser() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// url is the address of path on the page, under its /t/TOKEN prefix.
func (s *served) url(path string) string {
	return s.http.URL + strings.TrimSuffix(s.srv.Path(), "/") + path
}

// get fetches path of the page with c and returns its status and body.
func (s *served) get(c *http.Client, path string) (int, string) {
	s.t.Helper()
	return s.getURL(c, s.url(path))
}

// getURL fetches u with c and returns its status and body.
func (s *served) getURL(c *http.Client, u string) (int, string) {
	s.t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// post sends a form to path of the page with c.
func (s *served) post(c *http.Client, path string, form url.Values) *http.Response {
	s.t.Helper()
	resp, err := c.PostForm(s.url(path), form)
	if err != nil {
		s.t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// waitPage fetches path until its body has want, for up to 10 s.
func (s *served) waitPage(c *http.Client, path, want string) string {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body := s.get(c, path)
		if strings.Contains(body, want) {
			return body
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s never showed %q:\n%s", path, want, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Adopt finds nothing to follow: the fake keeps no attempt.
func (*fakeExec) Adopt(context.Context, string, executor.Command, int64, int64, io.Writer, io.Writer) (int, time.Time, error) {
	return -1, time.Now(), executor.ErrJobLost
}
