// Package spawn starts bash on a machine with its script on stdin: the way
// job shells and GPU lock holders are started, here (Local) or over an SSH
// session (a Func that the hosts package gives).
//
// The command line is always a constant (Bootstrap) plus names of safe
// characters, so that nothing job-specific is ever quoted: the script and
// everything it reads come on the process's stdin.
//
// The scripts' exit statuses that mean something to the coordinator are
// named once on each side: the constants of exits.go for Go, exits.sh
// (Exits, sent before each script) for the scripts, which a test checks
// agree; no script spells one as a bare number.
package spawn
