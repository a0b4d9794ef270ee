package web

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/connlimit"
)

// maxForm bounds a form: a batch of job lines.
const maxForm = 8 << 20

// bodyTimeout bounds how long a form may take to arrive: a connection that
// trickles one in is closed.
const bodyTimeout = 30 * time.Second

// guard lets through only requests under the page's path (/t/TOKEN/...),
// addressed to a host name the page answers to, and changes only from the
// page itself. Requests are passed on with the /t/TOKEN prefix taken off.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin") // "no-referrer" would make a form's Origin "null"
		h.Set("Cache-Control", "no-store")
		if !s.answersTo(r.Host) {
			s.refuse(w, "this page answers to its own address only (localhost or 127.0.0.1): open the URL gpudispatch printed when it started")
			return
		}
		rest, ok := s.strip(r.URL.Path)
		if !ok {
			s.refuse(w, "this page needs its token: open the URL gpudispatch printed when it started (…/t/…/)")
			return
		}
		connlimit.Trust(r.Context())
		if r.Method == http.MethodPost {
			if !sameOrigin(r) {
				s.refuse(w, "refused: a change must come from the page itself")
				return
			}
			// The whole form is read now, within bodyTimeout; the handler
			// finds it parsed.
			rc := http.NewResponseController(w)
			rc.SetReadDeadline(time.Now().Add(bodyTimeout))
			r.Body = http.MaxBytesReader(w, r.Body, maxForm)
			err := r.ParseForm()
			rc.SetReadDeadline(time.Time{})
			if err != nil {
				why := "the form did not arrive whole: try again"
				if errors.As(err, new(*http.MaxBytesError)) {
					why = fmt.Sprintf("the form is larger than %d MiB: add fewer job lines at once, or use gpudispatch submit", maxForm>>20)
				}
				http.Error(w, why, http.StatusBadRequest)
				return
			}
		}
		r2 := new(http.Request)
		*r2 = *r
		u := *r.URL
		u.Path, u.RawPath = rest, ""
		r2.URL = &u
		next.ServeHTTP(w, r2)
	})
}

// strip returns path without the page's /t/TOKEN prefix, comparing the
// token in constant time; ok is false when path does not carry it.
func (s *Server) strip(path string) (rest string, ok bool) {
	after, found := strings.CutPrefix(path, "/t/")
	if !found {
		return "", false
	}
	tok, rest, found := strings.Cut(after, "/")
	if !found || subtle.ConstantTimeCompare([]byte(tok), []byte(s.o.Token)) != 1 {
		return "", false
	}
	return "/" + rest, true
}

// answersTo reports whether host (a request's Host) is a name the page
// answers to. A page on a loopback address answers to loopback names only
// (127.0.0.1, [::1], localhost, *.localhost: what a browser or an ssh -L
// tunnel uses), so that a site whose name was made to resolve to
// 127.0.0.1 (DNS rebinding) is refused. A page listening on another address
// is meant to be reached by whatever name its users have for the machine;
// the token alone guards it.
func (s *Server) answersTo(host string) bool {
	if !s.loopback {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// sameOrigin reports whether r, when its browser names its origin, comes
// from the page's own.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// refuse answers 403 with why, and closes the connection: whoever has not
// the token holds none of the page's connections.
func (s *Server) refuse(w http.ResponseWriter, why string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Connection", "close")
	w.WriteHeader(http.StatusForbidden)
	render(w, "refused", why)
}
