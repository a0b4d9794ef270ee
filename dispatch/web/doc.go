// Package web is a run's web page (--listen): a live view of the hosts,
// their GPUs (with a chart of their last hour) and slots, a timeline of the
// jobs (timeline.go), the waiting queue and the finished jobs (with the
// files they brought back), a page per job that follows its stdout and
// stderr, and forms that add, cancel, retry and reorder jobs, one by one
// or all that a filter shows (filter.go). It is a client of the run like the control socket:
// it reads the run's events (it is a dispatch.Reporter), asks the run's
// loop for its queue and hosts (dispatch.Control.Overview), and changes
// the run only through Control.
//
// # Security model
//
// Anyone who can reach the address may connect, so every address of the
// page carries the random token printed at start in its path: the page
// lives under /t/TOKEN/ (Server.Path), compared in constant time. The token
// is never put in a cookie: browsers scope cookies by host, not port, so a
// cookie of 127.0.0.1 would go to every other service on it. A request
// that changes anything is a POST, to an address with the token, whose
// Origin (when sent) is the page's own. A page on a loopback address
// answers only to loopback host names (DNS rebinding is refused). Logs are
// sent as text/plain and the page's Content-Security-Policy allows only its
// own script and style, so a job's output cannot run in the browser.
//
// Someone without the token cannot wear the server out: headers and forms
// have deadlines, idle connections are closed, the connections are capped
// (connlimit: at the cap, the oldest one that has not shown the token makes
// room) and so are the live streams (Options.MaxViewers).
//
// # Cost
//
// A page costs the coordinator no SSH of its own. One goroutine samples
// each host's nvidia-smi every few seconds (Options.SampleEvery) through
// the Executor, and only while a page is open; all viewers share the
// sample. Updates go out as server-sent events, one per part of the page
// (progress, timeline, hosts, queue, finished) and only for a part that
// changed, at most twice a second (the timeline, the largest, at most
// every 5 s), compressed on one gzip stream per viewer. The
// queue and finished lists show their head only (Options.ListLimit). A
// viewer that falls behind is dropped; its browser reconnects and gets
// the page whole.
//
// The page is server-rendered HTML (html/template) and reads without
// JavaScript; app.js only applies the updates (and the URL's filter to
// them), ticks elapsed times and the timeline's running bars, and follows
// a job's logs. Everything is embedded (go:embed): no build step,
// nothing fetched from elsewhere.
package web
