package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"syscall"

	"github.com/gpudispatch/gpudispatch/dispatch"
)

// ErrNoServer is returned when no run is listening on the log dir's socket.
var ErrNoServer = errors.New("no gpudispatch is running on the log dir")

// Client talks to the run whose log dir it was given.
type Client struct {
	logDir string
	http   *http.Client
	done   func()
}

// Dial returns a client of the run in logDir. It does not connect yet:
// each request does, and a request finding no run says ErrNoServer.
func Dial(logDir string) (*Client, error) {
	addr, done, err := socketAddr(logDir, SocketName)
	if err != nil {
		return nil, err
	}
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		if err := checkServer(logDir); err != nil {
			return nil, err
		}
		c, err := (&net.Dialer{}).DialContext(ctx, "unix", addr)
		if err != nil {
			return nil, err
		}
		if uid, ok := peerUID(c); ok && uid != os.Getuid() {
			c.Close()
			return nil, fmt.Errorf("%w: the server on %s runs as %s, not as you; nothing was sent", ErrNotYours, filepath.Join(logDir, SocketName), dispatch.UserName(uid))
		}
		return c, nil
	}
	return &Client{
		logDir: logDir,
		http:   &http.Client{Transport: &http.Transport{DialContext: dial, DisableCompression: true}},
		done:   done,
	}, nil
}

// ErrNotYours means the control socket, or the server behind it, is not
// this user's: someone else may pose as gpudispatch to read what would be
// sent (job lines hold secrets), so nothing is.
var ErrNotYours = errors.New("not your gpudispatch")

// checkServer checks, before anything is sent, that the log dir is one no
// other user could have planted a socket in, and that its socket, when
// there is one, is this user's.
func checkServer(logDir string) error {
	if err := dispatch.CheckLogDir(logDir); err != nil {
		return fmt.Errorf("%w: %w", ErrNotYours, err)
	}
	path := filepath.Join(logDir, SocketName)
	fi, err := os.Lstat(path)
	if err != nil {
		return nil // the dial says there is no server
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%w: %s is not a socket (%s); nothing was sent", ErrNotYours, path, fi.Mode())
	}
	if owner := dispatch.ForeignOwner(fi); owner != "" {
		return fmt.Errorf("%w: %s belongs to %s, not to you; nothing was sent", ErrNotYours, path, owner)
	}
	return nil
}

// Close lets go of the client's connections.
func (c *Client) Close() {
	c.http.CloseIdleConnections()
	c.done()
}

// Status is the live run's status of every job of its journal.
func (c *Client) Status(ctx context.Context) (*dispatch.Status, error) {
	var out statusReply
	if err := c.call(ctx, http.MethodGet, "/v1/status", nil, &out); err != nil {
		return nil, err
	}
	return &dispatch.Status{Jobs: out.Jobs, Damaged: out.Damaged}, nil
}

// Submit queues a batch of job lines on a standing queue.
func (c *Client) Submit(ctx context.Context, b dispatch.Batch) (dispatch.Submitted, error) {
	var out dispatch.Submitted
	err := c.call(ctx, http.MethodPost, "/v1/submit", submitRequest{
		Text: b.Text, Source: b.Source, Name: b.Name, Host: b.Host, GPUs: b.GPUs,
		Priority: b.Priority, TimeoutSeconds: b.Timeout.Seconds(), Env: b.Env,
		Snapshot: b.Snapshot, SyncDir: b.SyncDir, After: b.After,
		Models: b.Models, VRAMMB: b.VRAMMB, Tags: b.Tags,
	}, &out)
	return out, err
}

// Cancel cancels jobs (see dispatch.Control.Cancel).
func (c *Client) Cancel(ctx context.Context, ids []string) ([]dispatch.Answer, error) {
	var out answersReply
	err := c.call(ctx, http.MethodPost, "/v1/cancel", idsRequest{IDs: ids}, &out)
	return out.Answers, err
}

// Retry queues jobs again (see dispatch.Control.Retry).
func (c *Client) Retry(ctx context.Context, ids []string) ([]dispatch.Answer, error) {
	var out answersReply
	err := c.call(ctx, http.MethodPost, "/v1/retry", idsRequest{IDs: ids}, &out)
	return out.Answers, err
}

// SetPriority changes a waiting job's priority.
func (c *Client) SetPriority(ctx context.Context, id string, priority int) (dispatch.Answer, error) {
	var out dispatch.Answer
	err := c.call(ctx, http.MethodPost, "/v1/priority", priorityRequest{ID: id, Priority: priority}, &out)
	return out, err
}

// Wait returns the final events of jobs once they have all ended.
func (c *Client) Wait(ctx context.Context, ids []string) ([]dispatch.Event, error) {
	var out waitReply
	err := c.call(ctx, http.MethodPost, "/v1/wait", idsRequest{IDs: ids}, &out)
	return out.Events, err
}

// Stop stops the run: its running jobs finish, or with now are killed.
func (c *Client) Stop(ctx context.Context, now bool) error {
	return c.call(ctx, http.MethodPost, "/v1/stop", stopRequest{Now: now}, &struct{}{})
}

// Detach ends the run at once and leaves its running jobs running (see
// dispatch.Control.Detach).
func (c *Client) Detach(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, "/v1/stop", stopRequest{Detach: true}, &struct{}{})
}

func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body bytes.Buffer
	if in != nil {
		if err := json.NewEncoder(&body).Encode(in); err != nil {
			return err
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://gpudispatch"+path, &body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if errors.Is(err, ErrNotYours) {
			var ue *url.Error
			if errors.As(err, &ue) {
				return ue.Err // not "Post http://gpudispatch/...": the reason
			}
			return err
		}
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("%s: %w (no %s there)", filepath.Clean(c.logDir), ErrNoServer, SocketName)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("the run in %s: %w", c.logDir, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		var e errorReply
		if json.NewDecoder(resp.Body).Decode(&e) != nil || e.Error == "" {
			e.Error = resp.Status
		}
		return &RequestError{Code: resp.StatusCode, Msg: e.Error}
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// RequestError is a request the run refused.
type RequestError struct {
	Code int
	Msg  string
}

func (e *RequestError) Error() string { return e.Msg }
