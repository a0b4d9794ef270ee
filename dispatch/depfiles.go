package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// A job that waited for others finds what they brought back (return=) in
// $GPUDISPATCH_DEPS_DIR/ID/..., one directory per job it waited for, on
// whichever host runs it: on this machine, a directory of the log dir's
// (.deps/JOB.local) whose entries lead to those jobs' own folders; on
// another host, a snapshot of them (.deps/JOB, their files as hard links)
// shipped as code is, content the host lacks only, into a tree of the log
// dir's own there.

// depsDir is the log dir's directory of the files laid out for jobs that
// waited for others (job names never start with a dot).
const depsDir = ".deps"

// depFiles returns the folders of the files that the jobs j waited for
// brought back, by their ids: of the attempt that ended each in this run,
// or of the newest attempt an earlier run left (--resume). Jobs that
// brought nothing back have none.
func (r *run) depFiles(j *Job) map[string]string {
	if len(j.After) == 0 && len(j.AfterAny) == 0 {
		return nil
	}
	need, err := r.resolveDeps(j)
	if err != nil {
		return nil
	}
	dirs := map[string]string{}
	for id := range need {
		dir := ""
		if q := r.serving.jobs[id]; q != nil && q.ended != nil && q.ended.Stdout != "" {
			dir = ReturnDir(*q.ended)
		} else {
			dir = newestAttemptDir(r.opts.LogDir, id)
		}
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			dirs[id] = dir
		}
	}
	return dirs
}

// newestAttemptDir is the folder of id's newest attempt in logDir whose
// files came back: ID.N for the largest N there is, else ID.
func newestAttemptDir(logDir, id string) string {
	newest, n := filepath.Join(logDir, id), 1
	for {
		next := filepath.Join(logDir, id+"."+strconv.Itoa(n+1))
		if _, err := os.Stat(next); err != nil {
			return newest
		}
		newest, n = next, n+1
	}
}

// withDeps gives c the files of deps (depFiles) for its job's attempt on
// host h: the folder of links on this machine, or the snapshot to ship.
func (r *run) withDeps(ctx context.Context, c *executor.Command, local bool, job string, deps map[string]string) error {
	if len(deps) == 0 {
		return nil
	}
	if local {
		dir, err := linkDeps(filepath.Join(r.opts.LogDir, depsDir, job+".local"), deps)
		if err != nil {
			return fmt.Errorf("its dependencies' files: %w", err)
		}
		c.Env = append(c.Env, executor.DepsVar+"="+dir)
		return nil
	}
	if r.opts.TakeDeps == nil {
		return nil
	}
	dir := filepath.Join(r.opts.LogDir, depsDir, job)
	if err := stageDeps(dir, deps); err != nil {
		return fmt.Errorf("its dependencies' files: %w", err)
	}
	s, err := r.opts.TakeDeps(ctx, dir)
	if err != nil {
		return fmt.Errorf("its dependencies' files: %w", err)
	}
	c.Deps = s.Code()
	return nil
}

// linkDeps makes dir anew with a link per dependency to its folder, and
// returns dir, absolute.
func linkDeps(dir string, deps map[string]string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if err := os.RemoveAll(abs); err != nil {
		return "", err
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", err
	}
	for id, from := range deps {
		target, err := filepath.Abs(from)
		if err == nil {
			err = os.Symlink(target, filepath.Join(abs, id))
		}
		if err != nil {
			return "", err
		}
	}
	return abs, nil
}

// stageDeps makes dir anew with the files of each dependency's folder
// under dir/ID, as hard links (copies where a link cannot be made), but
// what a fetch cut off left. The path stays the same for the job's every
// attempt, so that a snapshot taken again reads no unchanged file.
func stageDeps(dir string, deps map[string]string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	for id, from := range deps {
		err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(from, p)
			if err != nil {
				return err
			}
			to := filepath.Join(dir, id, rel)
			switch {
			case d.IsDir() && d.Name() == executor.PartialDir:
				return filepath.SkipDir
			case d.IsDir():
				return os.MkdirAll(to, 0o700)
			case !d.Type().IsRegular():
				return nil
			}
			if os.Link(p, to) == nil {
				return nil
			}
			return copyFile(p, to)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// copyFile copies the regular file from into to, a new file.
func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, src)
	return errors.Join(err, dst.Close())
}
