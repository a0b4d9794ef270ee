package dispatch

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// A job's life does not hang on its coordinator: an attempt that an
// earlier run of the log dir started on a host (kept there by its job
// shell, see hosts/jobshell) or handed to a cluster, and journaled no
// outcome for, may still run there. A run with Resume (and serve
// --resume) follows such an attempt as its own (adopts it) rather than run
// the job again: it takes the attempt's slot, completes its logs from the
// byte they had reached, and records its outcome, real exit status and end
// time as this run's. The journal thus gets exactly one outcome per
// attempt. An attempt of which its host keeps nothing (the host was
// started again) is lost, and its job queued again.

// history is what the log dir's journal says of its earlier runs, read as
// the run begins (prepare), and what becomes of it. done are the jobs that
// succeeded then (Resume: skipped); open are the attempts started then
// with no outcome journaled, by job, until the job arrives and its attempt
// is followed (adopt) or it runs again: no attempt is both followed and
// run. adoptions are the running jobs an earlier server left (serve
// --resume), followed as the run starts; adoptLater those on hosts still
// being opened, followed once they are. failures counts, by job, the
// attempts that failed or timed out then (they use up its retries=);
// damaged are the journal lines --resume skipped, for warnings. numbers
// numbers the jobs read from the inputs after the earlier runs' (nil for a
// served run, whose jobs are numbered as they are submitted).
type history struct {
	done       map[jobKey]bool
	open       map[jobKey]Event
	adoptions  []adoption
	adoptLater []adoption
	failures   map[jobKey]int
	damaged    []string
	numbers    *numbers
}

// openAttempts reads the journal at path for Resume: the jobs that
// finished with exit status 0, the latest attempt of each job that started
// (or was handed to a batch system) with no outcome after it, the attempts
// still to stop (see fence), how many attempts of each job failed or
// timed out (they use up its retries=), and the lines it had to skip as
// damaged. A missing journal is empty.
func openAttempts(path string) (done map[jobKey]bool, open map[jobKey]Event, unstopped fences, failures map[jobKey]int, damaged []string, err error) {
	done, open, unstopped, failures = map[jobKey]bool{}, map[jobKey]Event{}, fences{}, map[jobKey]int{}
	marks := [][]byte{[]byte(`"event":"finished"`), []byte(`"event":"started"`), []byte(`"event":"pending"`),
		[]byte(`"event":"failed"`), []byte(`"event":"timeout"`), []byte(`"event":"lost"`), []byte(`"event":"cancelled"`),
		[]byte(`"event":"stopped"`)}
	damaged, err = scanJournal(path, func(line []byte) error {
		// Only these events matter: skip the rest without decoding.
		if !slices.ContainsFunc(marks, func(m []byte) bool { return bytes.Contains(line, m) }) {
			return nil
		}
		var e Event
		if err := json.Unmarshal(line, &e); err != nil {
			return err
		}
		if e.TextBytes != nil {
			e.Text = string(e.TextBytes)
		}
		unstopped.see(e)
		k := jobKey{e.Text, e.Occurrence}
		switch e.Event {
		case EventStopped:
		case EventStarted, EventPending:
			open[k] = e
		case EventFinished:
			done[k] = true
			delete(open, k)
		case EventFailed, EventTimeout:
			if e.Event == EventTimeout || e.Exit != nil && *e.Exit > 0 {
				failures[k]++
			}
			delete(open, k)
		default:
			delete(open, k)
		}
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		return done, open, unstopped, failures, nil, nil
	}
	return done, open, unstopped, failures, damaged, err
}

// adoptable reports whether attempt e may be followed where it ran: its
// host is still in the run, with the GPUs it had.
func (r *run) adoptable(e Event) bool {
	_, ok := r.adoptedPlace(e)
	return ok
}

// adoptedPlace is where attempt e runs: a cluster's one slot pool, or the
// GPUs it was given.
func (r *run) adoptedPlace(e Event) (placement, bool) {
	h := r.sched.table.byName[e.Host]
	if h == nil || h.removed || len(h.gpus) == 0 || e.Tag == "" && !h.cluster {
		return placement{}, false
	}
	if h.cluster {
		return placement{host: h, gpus: h.gpus[:1]}, true
	}
	// Every part of a job over several hosts, in rank order.
	var gs []*gpu
	for _, pl := range e.Places() {
		ph := r.sched.table.byName[pl.Host]
		if ph == nil || ph.removed || ph.cluster || len(pl.GPUs) == 0 {
			return placement{}, false
		}
		for _, id := range pl.GPUs {
			g := ph.byID[id]
			if g == nil {
				return placement{}, false
			}
			gs = append(gs, g)
		}
	}
	return placement{host: h, gpus: gs}, len(gs) > 0
}

// adopt follows attempt e of q's job, which an earlier run started, as this
// run's attempt (see above). It reports false, doing nothing, when the
// attempt cannot be followed (adoptable, or its logs cannot be opened):
// then the job is queued as any other.
func (r *run) adopt(q *queued, e Event) bool {
	p, ok := r.adoptedPlace(e)
	if !ok {
		return false
	}
	logs, outOff, errOff, err := appendLogs(e.Stdout, e.Stderr, r.fileMode)
	offs := [][2]int64{{outOff, errOff}}
	for _, pt := range e.Parts {
		if err != nil {
			break
		}
		var pl logFiles
		if pl, outOff, errOff, err = appendLogs(pt.Stdout, pt.Stderr, r.fileMode); err == nil {
			logs.parts = append(logs.parts, pl)
			offs = append(offs, [2]int64{outOff, errOff})
		}
	}
	if err != nil {
		if logs.out != nil {
			logs.close()
		}
		r.record(r.warning("", q.job.ID(), fmt.Sprintf("cannot follow attempt %d, which may still run on %s: %v; it is run again", e.Attempt, Where(e.Places()), err)))
		return false
	}
	p.mem = p.host.memOf(q.job)
	r.sched.table.take(p)
	for _, g := range p.gpus {
		g.vetted = true // its own job is there, not others' work
	}
	q.attempts = e.Attempt
	q.tag = cmp.Or(e.Tag, fmt.Sprintf("%s-%d-%d", e.Run, e.Seq, e.Attempt))
	start := time.Now()
	if e.Start != nil {
		start = *e.Start
	}
	ev := r.event(EventStarted, q.job, q.attempts)
	ev.Host, ev.GPUs, ev.Tag, ev.SlurmJobID, ev.Snapshot, ev.Tree = e.Host, e.GPUs, q.tag, e.SlurmJobID, e.Snapshot, e.Tree
	ev.Parts = e.Parts
	ev.Stdout, ev.Stderr, ev.Start = logs.out.Name(), logs.err.Name(), &start
	ev.Message = "re-adopted: attempt of run " + e.Run + ", followed where it runs"
	q.launched, q.pending, q.ran, q.slurmID = ev, false, &start, e.SlurmJobID
	if e.Event == EventPending && p.host.cluster {
		// Still waiting in Slurm, as far as the journal knows: the
		// cluster says when it starts, as for any submitted job.
		ev.Event, ev.Start, ev.Message = EventPending, nil, "re-adopted: attempt of run "+e.Run+", waiting in Slurm"
		q.pending, q.ran = true, nil
	}
	r.record(ev)
	jctx, kill := context.WithCancelCause(r.attempts.ctx)
	q.kill = kill
	r.attempts.inFlight++
	a := assignment{q: q, p: p}
	// Each part is followed where it runs (a job on one host, or on a
	// Slurm cluster, is part 0 alone: the cluster's job brings its parts'
	// output), and ended with the others as a started job's are.
	hosts := []string{e.Host}
	tags := []string{q.tag}
	parts := []logFiles{logs}
	var partLogs []executor.PartLog
	for k, pt := range e.Parts {
		if p.host.cluster {
			l := logs.parts[k]
			partLogs = append(partLogs, executor.PartLog{Stdout: l.out, Stderr: l.err, OutOff: offs[k+1][0], ErrOff: offs[k+1][1]})
			continue
		}
		hosts, tags = append(hosts, pt.Host), append(tags, cmp.Or(pt.Tag, partTag(q.tag, pt.Rank)))
	}
	if !p.host.cluster {
		parts = append(parts, logs.parts...)
	}
	go func() {
		defer kill(nil)
		progress := r.progressOf(q)
		ends := make([]time.Time, len(hosts))
		follow := func(ctx context.Context, k int) (int, error) {
			c := executor.Command{Tag: tags[k], Progress: func(p executor.Progress) { progress(hosts[k], p) }, PartLogs: partLogs}
			code, end, err := r.opts.Executor.Adopt(ctx, hosts[k], c, offs[k][0], offs[k][1], parts[k].out, parts[k].err)
			ends[k] = end
			return code, err
		}
		var code, rank int
		var err error
		if len(hosts) == 1 {
			code, err = follow(jctx, 0)
		} else {
			if e.Event == EventStarted {
				// Every part was set up, and let go: a part the last
				// coordinator died before it could tell waits for the
				// word. Told while each is followed from the first: a
				// part that ends is read to its end.
				go r.letGo(jctx, hosts, tags, kill)
			}
			code, rank, err = runParts(jctx, hosts, follow)
		}
		if cerr := logs.close(); err == nil && cerr != nil {
			err = cerr
		}
		r.hand(result{a: a, code: code, err: err, rank: rank, start: start, end: ends[rank], logs: logs})
	}()
	return true
}

// appendLogs opens an earlier attempt's logs to complete them, and says
// how far they reached; missing ones are made.
func appendLogs(out, errPath string, mode fs.FileMode) (logFiles, int64, int64, error) {
	if out == "" || errPath == "" {
		return logFiles{}, 0, 0, errors.New("the journal does not name its logs")
	}
	open := func(path string) (*os.File, int64, error) {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|noFollow, mode)
		if err != nil {
			return nil, 0, fmt.Errorf("log file: %w", err)
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, 0, err
		}
		return f, st.Size(), nil
	}
	o, outOff, err := open(out)
	if err != nil {
		return logFiles{}, 0, 0, err
	}
	e, errOff, err := open(errPath)
	if err != nil {
		o.Close()
		return logFiles{}, 0, 0, err
	}
	return logFiles{out: &logWriter{f: o}, err: &logWriter{f: e}}, outOff, errOff, nil
}
