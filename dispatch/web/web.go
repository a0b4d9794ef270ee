package web

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch"
	"github.com/gpudispatch/gpudispatch/dispatch/connlimit"
	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// Options say which run a Server shows and how.
type Options struct {
	// Control steers the run; it is also how the page learns its queue.
	Control *dispatch.Control
	// Probe asks a host's nvidia-smi (Executor.ProbeGPUs); nil shows no
	// GPU details.
	Probe func(ctx context.Context, host string) ([]executor.GPU, error)
	// Token is what every request must carry; "" makes a random one.
	Token string
	// SampleEvery is how often GPUs are sampled while a page is open
	// (default 5 s); ListLimit how many waiting and finished jobs the page
	// lists (default 50); MaxViewers how many live streams (pages open)
	// it serves at once (default 64): each holds a gzip writer.
	SampleEvery time.Duration
	ListLimit   int
	MaxViewers  int
}

// Server is a run's web page. Its zero value is not usable: see New.
type Server struct {
	o    Options
	base string // /t/TOKEN: where the page's addresses start
	// loopback is set for a page on a loopback address, which answers to
	// loopback host names only.
	loopback bool
	viewers  chan struct{} // a place per live stream (capacity MaxViewers)
	closed   chan struct{}
	changed  chan struct{} // something to redraw (capacity 1)
	wake     chan struct{} // a first viewer came (capacity 1)

	mu      sync.Mutex
	jobs    map[string]*jobInfo
	ended   []string // ids of the jobs that ended last, oldest first
	tally   dispatch.Tally
	first   time.Time // when the first job started
	samples map[string]sample
	// history is each GPU's samples of the last hour (chart.go).
	history map[gpuPlace][]point
	// lastOverview is the run's, as last seen: the page of a run that
	// ended shows its hosts as they were.
	lastOverview *dispatch.Overview
	clients      map[*client]bool
	lastSeen     time.Time // of the latest page view
	notes        notes
}

// sample is what one host's nvidia-smi said.
type sample struct {
	gpus []executor.GPU
	err  error
	at   time.Time
}

// New returns the page of the run o.Control steers. It shows nothing live
// until Run goes.
func New(o Options) (*Server, error) {
	if o.Token == "" {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		o.Token = base64.RawURLEncoding.EncodeToString(b)
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = 5 * time.Second
	}
	if o.ListLimit <= 0 {
		o.ListLimit = 50
	}
	if o.MaxViewers <= 0 {
		o.MaxViewers = 64
	}
	return &Server{
		o: o, base: "/t/" + o.Token, loopback: true, viewers: make(chan struct{}, o.MaxViewers),
		closed: make(chan struct{}), changed: make(chan struct{}, 1), wake: make(chan struct{}, 1),
		jobs: map[string]*jobInfo{}, samples: map[string]sample{}, history: map[gpuPlace][]point{}, clients: map[*client]bool{},
	}, nil
}

// Token is what every request must carry.
func (s *Server) Token() string { return s.o.Token }

// Path is where the page is, /t/TOKEN/: the token is in the path of every
// address of the page, never in a cookie, since a browser sends a
// loopback host's cookies to every port of it.
func (s *Server) Path() string { return s.base + "/" }

// Report implements dispatch.Reporter: the page learns the run's jobs from
// its events. It never blocks the run.
func (s *Server) Report(e dispatch.Event) {
	s.mu.Lock()
	s.apply(e)
	s.mu.Unlock()
	s.poke()
}

// poke says that the page has something new to show.
func (s *Server) poke() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// Run sends the page's updates to its viewers and samples GPUs while
// someone watches, until ctx ends or Close.
func (s *Server) Run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.sampleGPUs(ctx)
	}()
	s.update(ctx)
	wg.Wait()
}

// Listening is a Server answering on an address.
type Listening struct {
	*Server
	url    string
	srv    *http.Server
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// Listen serves the page of o's run on addr ("127.0.0.1:8420"; port 0
// picks one) until Close.
func Listen(addr string, o Options) (*Listening, error) {
	s, err := New(o)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--listen %s: %w", addr, err)
	}
	s.loopback = IsLoopback(addr)
	ctx, cancel := context.WithCancel(context.Background())
	l := &Listening{
		Server: s, cancel: cancel,
		url: fmt.Sprintf("http://%s%s", hostPort(ln.Addr()), s.Path()),
		srv: &http.Server{
			Handler: s.Handler(), ConnContext: connlimit.Context,
			ReadHeaderTimeout: headerTimeout, IdleTimeout: idleTimeout,
		},
	}
	ln = connlimit.New(ln, connlimit.Budget(maxConns))
	l.done.Add(2)
	go func() {
		defer l.done.Done()
		s.Run(ctx)
	}()
	go func() {
		defer l.done.Done()
		if err := l.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			cancel()
		}
	}()
	return l, nil
}

// The page's connection limits: a request's header must come within
// headerTimeout, an idle connection is closed after idleTimeout, and at
// most maxConns are open (fewer when descriptors are scarce; see
// connlimit). Event streams are not idle: they say they live every
// heartbeat.
const (
	headerTimeout = 5 * time.Second
	idleTimeout   = 60 * time.Second
	maxConns      = 1024
)

// hostPort is where a browser reaches addr: a wildcard address is this
// machine, by its loopback address.
func hostPort(addr net.Addr) string {
	ta, ok := addr.(*net.TCPAddr)
	if !ok || !ta.IP.IsUnspecified() {
		return addr.String()
	}
	return net.JoinHostPort("127.0.0.1", fmt.Sprint(ta.Port))
}

// URL is the page's address with its token, to be given to its users.
func (l *Listening) URL() string { return l.url }

// Close ends the updates and the viewers' streams, and stops listening.
func (l *Listening) Close() {
	l.Server.close()
	l.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if l.srv.Shutdown(ctx) != nil {
		l.srv.Close()
	}
	l.done.Wait()
}

// close ends every viewer's stream.
func (s *Server) close() {
	select {
	case <-s.closed:
	default:
		close(s.closed)
	}
}

// IsLoopback reports whether addr (as --listen takes it) is reachable from
// this machine only.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

var _ dispatch.Reporter = (*Server)(nil)
