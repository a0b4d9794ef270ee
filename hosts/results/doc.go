// Package results brings back the files a job names for return, from its
// workdir on a machine, into a local directory under the same relative
// paths. The machine's side is results.sh (bash, find, stat, tar, run
// through a spawn.Func): it lists the files the paths name (bash globs,
// directories whole, links to files followed, other links said, paths
// that name nothing said), the coordinator answers which it lacks and
// from which byte, and the files come in one stream: whole ones as tar,
// those a cut-off fetch began as their remaining bytes. Until a file is
// whole it waits under a name that holds its size and mtime there, so the
// next fetch goes on from its last byte; once whole, a file whose size or
// mtime changed meanwhile is not kept. Nothing the machine says can write
// outside the local directory (os.Root).
package results
