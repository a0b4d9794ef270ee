// Package control is how gpudispatch commands talk to a run that is going
// on: `serve` (and every run) listens on a Unix socket in its log dir, and
// `submit`, `cancel`, `retry`, `priority`, `stop` and `status` connect to
// it. The log dir names the server, so -o is all a client needs.
//
// # The socket
//
// LOGDIR/gpudispatch.sock, mode 0600, in a log dir that no other user may
// write in (nor any directory above it: see dispatch.CheckLogDir). It is bound in a private directory and renamed into
// place, so it is never open to others even for a moment, and the server
// also refuses a connection from any other user (SO_PEERCRED, on Linux).
// A client checks, before it sends anything, that the log dir is one no
// other user may write in (dispatch.CheckLogDir), that the socket is its
// user's, and (Linux) that the server behind it runs as its user: job lines
// hold secrets, and a socket planted by someone else gets none of them
// (ErrNotYours). Header and body deadlines, an idle timeout and a cap on
// connections (connlimit) keep a stuck client from holding the server.
// A run holds the log dir's claim (gpudispatch.lock) for as long as it
// lives, so a socket found there by a new run is stale and is replaced.
// A path longer than a socket address can hold is reached through
// /proc/self/fd on Linux.
//
// # The protocol
//
// HTTP/1.1 over the socket, JSON bodies, so that the web page and other
// clients (curl --unix-socket) can share it. Errors are a non-2xx status
// with {"error": "..."}: 400 for a bad request, 409 when the run cannot do
// it (it is not serving, it is stopping, it has ended).
//
//	GET  /v1/status                      → {"jobs": [JobStatus...], "damaged": [...]}
//	POST /v1/submit   {"text", "source", "name", "host", "gpus", "priority", "timeout_seconds"}
//	                                     → {"ids": [...], "errors": ["submit:3: ..."]}
//	POST /v1/cancel   {"ids": [...]}     → {"answers": [{"id", "message", "error"}...]}
//	POST /v1/retry    {"ids": [...]}     → {"answers": [...]}
//	POST /v1/priority {"id", "priority"} → {"id", "message", "error"}
//	POST /v1/wait     {"ids": [...]}     → {"events": [Event...]}, once they all ended
//	POST /v1/stop     {"now": bool}      → {}
//
// A submit is answered once its jobs are in the journal: a server killed
// right after loses none of them (serve --resume queues them again).
package control
