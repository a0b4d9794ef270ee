// Package web is a run's web page (--listen): a live view of the hosts,
// their GPUs and slots, the waiting queue and the finished jobs, a page per
// job that follows its stdout and stderr, and forms that add, cancel, retry
// and reorder jobs. It is a client of the run like the control socket:
// it reads the run's events (it is a dispatch.Reporter), asks the run's
// loop for its queue and hosts (dispatch.Control.Overview), and changes
// the run only through Control.
//
// # Security model
//
// Anyone who can reach the address may connect, so every request needs the
// random token printed with the URL at start. The first visit
// (?token=...) trades it for an HttpOnly, SameSite=Strict cookie and is
// redirected to a URL without it. A request that changes anything is a
// POST that carries the token in its form as well (a forged cross-site
// form has the cookie at most, never the token), and an Origin header, when
// sent, must be the page's own. Logs are sent as text/plain and the
// page's Content-Security-Policy allows only its own script and style, so
// a job's output cannot run in the browser.
//
// # Cost
//
// A page costs the coordinator no SSH of its own. One goroutine samples
// each host's nvidia-smi every few seconds (Options.SampleEvery) through
// the Executor, and only while a page is open; all viewers share the
// sample. Updates go out as server-sent events, one per part of the page
// (progress, hosts, queue, finished) and only for a part that changed,
// at most twice a second, compressed on one gzip stream per viewer. The
// queue and finished lists show their head only (Options.ListLimit). A
// viewer that falls behind is dropped; its browser reconnects and gets
// the page whole.
//
// The page is server-rendered HTML (html/template) and reads without
// JavaScript; app.js only applies the updates, ticks elapsed times and
// follows a job's logs. Everything is embedded (go:embed): no build step,
// nothing fetched from elsewhere.
package web
