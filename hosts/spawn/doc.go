// Package spawn starts bash on a machine with its script on stdin: the way
// job shells and GPU lock holders are started, here (Local) or over an SSH
// session (a Func that the hosts package gives).
//
// The command line is always a constant (Bootstrap) plus names of safe
// characters, so that nothing job-specific is ever quoted: the script and
// everything it reads come on the process's stdin.
//
// What the scripts and the coordinator must agree on is said once on each
// side: for the scripts in prelude.sh (Prelude, sent before each script),
// for Go in exits.go (the exit statuses that mean something), layout.go
// (where gpudispatch keeps its files on a machine) and record.go (the one
// framing of what a script is sent, and of what it hands back that may
// hold any byte: Record, read in bash by _g_record); tests check that the
// two sides agree, and that no script spells a status as a bare number.
// Package spawntest pins what each script is sent in golden files.
package spawn
