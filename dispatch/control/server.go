package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch"
	"github.com/gpudispatch/gpudispatch/dispatch/connlimit"
)

// SocketName is the control socket's name in the log dir.
const SocketName = "gpudispatch.sock"

// Listener is the control socket of a log dir.
type Listener struct {
	net.Listener
	path string
	info fs.FileInfo // the socket as bound, to remove only our own
}

// Listen makes the control socket in logDir, replacing a stale one. The
// caller must hold the log dir's claim (dispatch.Run does, which is why a
// socket found there is stale).
func Listen(logDir string) (*Listener, error) {
	if err := dispatch.CheckLogDir(logDir); err != nil {
		return nil, err
	}
	path := filepath.Join(logDir, SocketName)
	if old, err := os.Lstat(path); err == nil {
		if old.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s is in the way of the control socket (not a socket): remove it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("replacing the stale control socket: %w", err)
		}
	}
	// Bound in a directory only we can enter, made 0600, then moved into
	// place: at no moment can another user connect.
	private, err := os.MkdirTemp(logDir, ".gpudispatch-sock-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(private)
	addr, done, err := socketAddr(private, "s")
	if err != nil {
		return nil, err
	}
	defer done()
	ln, err := net.Listen("unix", addr)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	bound := filepath.Join(private, "s")
	if err := os.Chmod(bound, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	if err := os.Rename(bound, path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	info, err := os.Lstat(path)
	if err != nil {
		ln.Close()
		return nil, err
	}
	return &Listener{Listener: ownUser{ln}, path: path, info: info}, nil
}

// Close stops listening and removes the socket, if it is still ours.
func (l *Listener) Close() error {
	err := l.Listener.Close()
	if now, serr := os.Lstat(l.path); serr == nil && os.SameFile(now, l.info) {
		os.Remove(l.path)
	}
	return err
}

// ownUser accepts only connections from this process's user.
type ownUser struct{ net.Listener }

func (o ownUser) Accept() (net.Conn, error) {
	for {
		c, err := o.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if sameUser(c) {
			return c, nil
		}
		c.Close()
	}
}

// Server answers requests on a listener for one run.
type Server struct {
	srv  *http.Server
	done chan struct{}
}

// Serve starts answering requests on l for the run c steers, whose log dir
// is logDir.
func Serve(l net.Listener, c *dispatch.Control, logDir string) *Server {
	h := Handler(c, logDir)
	s := &Server{srv: &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			connlimit.Trust(r.Context()) // a client that asks is kept
			h.ServeHTTP(w, r)
		}),
		ConnContext:       connlimit.Context,
		ReadHeaderTimeout: headerTimeout, IdleTimeout: idleTimeout,
	}, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.srv.Serve(connlimit.New(l, connlimit.Budget(maxConns)))
	}()
	return s
}

// The socket's limits: a request's header must come within headerTimeout
// and its body within bodyTimeout; an idle connection is closed after
// idleTimeout; at most maxConns are open (see connlimit). A long request
// (wait) is not idle.
const (
	headerTimeout = 10 * time.Second
	bodyTimeout   = 30 * time.Second
	idleTimeout   = 60 * time.Second
	maxConns      = 256
)

// Close stops listening, answers the requests under way (a stop that ended
// the run is one) for up to a few seconds, then closes the connections.
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if s.srv.Shutdown(ctx) != nil {
		s.srv.Close()
	}
	<-s.done
}

// shutdownGrace is how long requests under way have to be answered once
// the run has ended.
const shutdownGrace = 5 * time.Second

// Handler serves the protocol of the package doc for c.
func Handler(c *dispatch.Control, logDir string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		st, err := c.Status(r.Context(), logDir)
		if err != nil {
			fail(w, err)
			return
		}
		reply(w, statusReply{Jobs: st.Jobs, Damaged: st.Damaged})
	})
	mux.HandleFunc("POST /v1/submit", func(w http.ResponseWriter, r *http.Request) {
		var req submitRequest
		if !decode(w, r, &req) {
			return
		}
		out, err := c.Submit(r.Context(), dispatch.Batch{Source: req.Source, Text: req.Text, Defaults: dispatch.Defaults{
			Name: req.Name, Host: req.Host, GPUs: req.GPUs, Priority: req.Priority,
			Timeout: time.Duration(req.TimeoutSeconds * float64(time.Second)), Env: req.Env,
			Snapshot: req.Snapshot, SyncDir: req.SyncDir, After: req.After,
			Kind: dispatch.Kind{Models: req.Models, VRAMMB: req.VRAMMB, Tags: req.Tags},
		}})
		if err != nil {
			fail(w, err)
			return
		}
		reply(w, out)
	})
	each := func(f func(context.Context, []string) ([]dispatch.Answer, error)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			var req idsRequest
			if !decode(w, r, &req) {
				return
			}
			as, err := f(r.Context(), req.IDs)
			if err != nil {
				fail(w, err)
				return
			}
			reply(w, answersReply{Answers: as})
		}
	}
	mux.HandleFunc("POST /v1/cancel", each(c.Cancel))
	mux.HandleFunc("POST /v1/retry", each(c.Retry))
	mux.HandleFunc("POST /v1/priority", func(w http.ResponseWriter, r *http.Request) {
		var req priorityRequest
		if !decode(w, r, &req) {
			return
		}
		a, err := c.SetPriority(r.Context(), req.ID, req.Priority)
		if err != nil {
			fail(w, err)
			return
		}
		reply(w, a)
	})
	mux.HandleFunc("POST /v1/wait", func(w http.ResponseWriter, r *http.Request) {
		var req idsRequest
		if !decode(w, r, &req) {
			return
		}
		evs, err := c.Wait(r.Context(), req.IDs)
		if err != nil {
			fail(w, err)
			return
		}
		reply(w, waitReply{Events: evs})
	})
	mux.HandleFunc("POST /v1/stop", func(w http.ResponseWriter, r *http.Request) {
		var req stopRequest
		if !decode(w, r, &req) {
			return
		}
		stop := func(ctx context.Context) error { return c.Stop(ctx, req.Now) }
		if req.Detach {
			stop = c.Detach
		}
		if err := stop(r.Context()); err != nil {
			fail(w, err)
			return
		}
		reply(w, struct{}{})
	})
	return mux
}

// The requests and replies of the protocol.
type (
	statusReply struct {
		Jobs    []dispatch.JobStatus `json:"jobs"`
		Damaged []string             `json:"damaged,omitempty"`
	}
	submitRequest struct {
		Text           string   `json:"text"`
		Source         string   `json:"source,omitempty"`
		Name           string   `json:"name,omitempty"`
		Host           string   `json:"host,omitempty"`
		GPUs           int      `json:"gpus,omitempty"`
		Priority       int      `json:"priority,omitempty"`
		TimeoutSeconds float64  `json:"timeout_seconds,omitempty"`
		Env            []string `json:"env,omitempty"`
		Snapshot       string   `json:"snapshot,omitempty"`
		SyncDir        string   `json:"sync_dir,omitempty"`
		After          []string `json:"after,omitempty"`
		Models         []string `json:"models,omitempty"`
		VRAMMB         int      `json:"vram_mb,omitempty"`
		Tags           []string `json:"tags,omitempty"`
	}
	idsRequest struct {
		IDs []string `json:"ids"`
	}
	answersReply struct {
		Answers []dispatch.Answer `json:"answers"`
	}
	priorityRequest struct {
		ID       string `json:"id"`
		Priority int    `json:"priority"`
	}
	waitReply struct {
		Events []dispatch.Event `json:"events"`
	}
	stopRequest struct {
		Now    bool `json:"now"`
		Detach bool `json:"detach"`
	}
	errorReply struct {
		Error string `json:"error"`
	}
)

// maxRequest bounds a request body: a submitted batch of jobs of at most
// 128 KiB each, a few thousand of them.
const maxRequest = 64 << 20

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(bodyTimeout))
	err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequest)).Decode(v)
	rc.SetReadDeadline(time.Time{}) // a wait may then take as long as its jobs
	if err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(errorReply{Error: "bad request: " + err.Error()})
		return false
	}
	return true
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, err error) {
	code := http.StatusConflict
	if errors.Is(err, context.Canceled) {
		code = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(errorReply{Error: err.Error()})
}
