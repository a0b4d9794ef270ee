package web

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
)

// cookieName is the name of the cookie that holds token: two runs' pages
// on one machine (different ports, same cookie jar) keep theirs apart.
func cookieName(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "gpudispatch_" + hex.EncodeToString(sum[:4])
}

// maxForm bounds a form: a batch of job lines.
const maxForm = 8 << 20

// guard lets through only requests that carry the token (in the URL once,
// then in the cookie), and changes only from the page itself: a POST must
// carry the token in its form too, and come from the page's own origin
// when the browser says where it comes from.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin") // "no-referrer" would make a form's Origin "null"
		h.Set("Cache-Control", "no-store")
		if t := r.URL.Query().Get("token"); t != "" {
			if !s.valid(t) {
				s.refuse(w, "this is not the page's token: open the URL gpudispatch printed when it started")
				return
			}
			http.SetCookie(w, &http.Cookie{
				Name: s.cookie, Value: s.o.Token, Path: "/",
				HttpOnly: true, SameSite: http.SameSiteStrictMode,
			})
			if r.Method == http.MethodGet {
				// The token leaves the address bar and the history.
				u := *r.URL
				q := u.Query()
				q.Del("token")
				u.RawQuery = q.Encode()
				http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
				return
			}
		} else if c, err := r.Cookie(s.cookie); err != nil || !s.valid(c.Value) {
			s.refuse(w, "this page needs its token: open the URL gpudispatch printed when it started (…/?token=…)")
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxForm)
			if !s.valid(r.PostFormValue("csrf")) || !sameOrigin(r) {
				s.refuse(w, "refused: a change must come from the page itself")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// valid reports whether t is the token, in constant time.
func (s *Server) valid(t string) bool {
	return subtle.ConstantTimeCompare([]byte(t), []byte(s.o.Token)) == 1
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

func (s *Server) refuse(w http.ResponseWriter, why string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusForbidden)
	render(w, "refused", why)
}
