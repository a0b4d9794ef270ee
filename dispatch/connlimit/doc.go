// Package connlimit caps the connections a server holds open, so that
// whoever can connect (any local user, for a page on 127.0.0.1) cannot take
// every file descriptor of the process and, with them, the control socket,
// the job logs and the journal.
//
// A connection is trusted once a request on it has shown its credentials
// (the page's token, the control socket's owner): the handler says so with
// Trust. At the cap, a new connection makes room by closing the oldest
// connection that is not trusted; when every open one is trusted, the new
// one is closed. A flood of idle or slow connections from someone without
// the token thus never holds out the page's own viewers: theirs is always
// the newest, and the flood's are closed first.
package connlimit
