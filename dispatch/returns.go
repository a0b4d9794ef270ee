package dispatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/dispatch/snapshot"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// A job's files come back: an attempt that ran, on success or failure,
// has the paths it names for return (its [return=...], else its host's
// return:) fetched from its workdir into ReturnDir, beside its logs. Its
// final event is journaled first, with the paths, then an EventReturned
// says what came; only then is its end told (summary, hooks, waiters), so
// that a hook finds the files. The slot is free meanwhile. A fetch whose
// host does not answer waits for it (at most the host-down timeout, up to
// three times); one that the coordinator did not finish (cut off, or the
// coordinator killed) is taken up by the next run of the log dir with
// Resume or Serve, from the bytes that came (see hosts/results).

// returns keeps the fetches of returned files: pending counts those under
// way, whose results come on fetched (the run ends only once it is 0);
// unreturned are the attempts of earlier runs whose files never came
// (Resume, Serve), fetched as the run starts.
type returns struct {
	pending    int
	fetched    chan fetched
	unreturned []Event
}

// fetched is what came back of an attempt's files.
type fetched struct {
	ended Event
	got   executor.Returned
	err   error
	then  func()
}

// returnsOf are the paths j brings back from host h.
func returnsOf(j *Job, h []string) []string {
	if j.Return != nil {
		return j.Return
	}
	return h
}

// jobWorkdir is where h's jobs start, as Fetch takes it: its workdir, and
// on this machine, where none is set, the coordinator's own directory (a
// local job starts there; a remote one in its home).
func jobWorkdir(h inventory.Host) string {
	if h.Workdir == "" && h.Local {
		if wd, err := os.Getwd(); err == nil {
			return wd
		}
	}
	return h.Workdir
}

// fetchReturns fetches the files attempt ended names for return, from
// workdir on its host, then runs then on the loop's goroutine.
func (r *run) fetchReturns(ended Event, workdir string, then func()) {
	r.returns.pending++
	from := executor.Return{Paths: ended.Return, Workdir: workdir, Snapshot: ended.Snapshot, Tree: ended.Tree, Limit: r.opts.ReturnLimit}
	go func() {
		dst := ReturnDir(ended)
		got, err := r.fetch(ended.Host, from, dst)
		os.Remove(dst) // when nothing came

		select {
		case r.returns.fetched <- fetched{ended: ended, got: got, err: err, then: then}:
		case <-r.bg.Done():
		}
	}()
}

// fetch brings the files back into dst, waiting for a host that does not
// answer.
func (r *run) fetch(host string, from executor.Return, dst string) (executor.Returned, error) {
	if err := os.Mkdir(dst, dirMode(r.fileMode)); err != nil && !errors.Is(err, fs.ErrExist) {
		return executor.Returned{}, fmt.Errorf("cannot make the directory for its results: %w", err)
	}
	for tries := 1; ; tries++ {
		got, err := r.opts.Executor.Fetch(r.bg, host, from, dst)
		if !errors.Is(err, executor.ErrHostDown) || tries == 3 {
			return got, err
		}
		ctx, cancel := context.WithTimeout(r.bg, r.opts.HostDownTimeout)
		werr := r.opts.Executor.WaitUp(ctx, host)
		cancel()
		if werr != nil {
			return got, err
		}
	}
}

// dirMode is the mode of a directory whose files get mode: searchable by
// those who may read them.
func dirMode(mode fs.FileMode) fs.FileMode {
	return mode | (mode&0o444)>>2
}

// onFetched records what came back of an attempt's files, then goes on.
func (r *run) onFetched(f fetched) {
	r.returns.pending--
	e := Event{Time: time.Now(), Event: EventReturned, Run: r.id,
		Job: f.ended.Job, Seq: f.ended.Seq, Source: f.ended.Source,
		Text: f.ended.Text, TextBytes: f.ended.TextBytes, Occurrence: f.ended.Occurrence,
		Attempt: f.ended.Attempt, Host: f.ended.Host, Stdout: f.ended.Stdout,
		Returned: f.got.Files, Missing: f.got.Missing,
	}
	var notes []string
	if len(f.got.Links) > 0 {
		notes = append(notes, "links that lead to no file, not followed: "+strings.Join(f.got.Links, ", "))
	}
	if len(f.got.Changed) > 0 {
		notes = append(notes, "changed while they came, not kept: "+strings.Join(f.got.Changed, ", "))
	}
	if len(f.got.Over) > 0 {
		notes = append(notes, fmt.Sprintf("over --return-limit (%s), left on %s: %s", snapshot.Size(r.opts.ReturnLimit), f.ended.Host, strings.Join(f.got.Over, ", ")))
	}
	e.Message = strings.Join(notes, "; ")
	if f.err != nil {
		e.Error = f.err.Error()
	}
	r.record(e)
	f.then()
}

// fetchUnreturned fetches the files of the earlier runs' attempts that
// never came, from the hosts still in the run.
func (r *run) fetchUnreturned() {
	for _, e := range r.returns.unreturned {
		if h := r.sched.table.byName[e.Host]; h != nil && !h.removed {
			r.fetchReturns(e, jobWorkdir(h.host), func() {})
		}
	}
}

// unreturnedAttempts reads the journal at path for the attempts whose files
// never came back: final events that name paths to return, with no
// EventReturned after them that fetched them.
func unreturnedAttempts(path string) ([]Event, error) {
	pending := map[string]Event{}
	var order []string
	marks := [][]byte{[]byte(`"return":[`), []byte(`"event":"returned"`)}
	_, err := scanJournal(path, func(line []byte) error {
		if !bytes.Contains(line, marks[0]) && !bytes.Contains(line, marks[1]) {
			return nil
		}
		var e Event
		if err := json.Unmarshal(line, &e); err != nil {
			return nil // damaged: openAttempts says so
		}
		switch {
		case e.Event == EventReturned && e.Error == "":
			delete(pending, e.Stdout)
		case e.Event != EventReturned && len(e.Return) > 0 && e.Stdout != "":
			if _, ok := pending[e.Stdout]; !ok {
				order = append(order, e.Stdout)
			}
			pending[e.Stdout] = e
		}
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var out []Event
	for _, k := range order {
		if e, ok := pending[k]; ok {
			out = append(out, e)
			delete(pending, k)
		}
	}
	return out, err
}

// returnedLine is what the terminal says of an EventReturned: nothing
// when all came back and quiet is set.
func returnedLine(e Event, quiet bool) (string, bool) {
	if e.Error != "" {
		return fmt.Sprintf("job %s: its results could not be fetched from %s: %s; the job's outcome stands, and --resume on this log dir fetches them again", e.Job, e.Host, e.Error), true
	}
	if quiet && len(e.Missing) == 0 && e.Message == "" {
		return "", false
	}
	var size int64
	for _, f := range e.Returned {
		size += f.Size
	}
	var parts []string
	if len(e.Returned) > 0 {
		parts = append(parts, fmt.Sprintf("%s (%s) back in %s/", Count(len(e.Returned), "file"), snapshot.Size(size), ReturnDir(e)))
	}
	if len(e.Missing) > 0 {
		parts = append(parts, fmt.Sprintf("return: %s named nothing on %s (the job's outcome stands)", strings.Join(e.Missing, ", "), e.Host))
	}
	if e.Message != "" {
		parts = append(parts, e.Message)
	}
	if len(parts) == 0 {
		parts = append(parts, "no file came back from "+e.Host)
	}
	return fmt.Sprintf("job %s: %s", e.Job, strings.Join(parts, "; ")), true
}
