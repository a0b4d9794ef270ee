package dispatch

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
)

// loadServed reads the journal of the log dir for a standing queue
// (Options.Serve): the numbers and names its jobs took, so that new jobs
// get others; every job, so that one that ended can be retried; and the
// jobs left unfinished by a server that was stopped or killed, which
// Resume queues again with their priority. A job left unfinished is one
// still waiting or running, or cancelled by a stop rather than by its user.
func (r *run) loadServed() error {
	type record struct {
		queued Event    // its latest queued event
		spec   *JobSpec // its latest spec
		last   Event    // its latest event that moved it
	}
	recs := map[jobKey]*record{}
	var order []jobKey
	path := filepath.Join(r.opts.LogDir, JournalName)
	unstopped := fences{}
	damaged, err := scanJournal(path, func(line []byte) error {
		var e Event
		if err := json.Unmarshal(line, &e); err != nil {
			return err
		}
		unstopped.see(e)
		if e.Job == "" {
			return nil
		}
		if e.TextBytes != nil {
			e.Text = string(e.TextBytes)
		}
		r.serving.seq = max(r.serving.seq, e.Seq)
		r.serving.seen[e.Text] = max(r.serving.seen[e.Text], e.Occurrence)
		k := jobKey{e.Text, e.Occurrence}
		rec := recs[k]
		if rec == nil {
			rec = &record{}
			recs[k] = rec
			order = append(order, k)
		}
		if e.Spec != nil {
			rec.spec = e.Spec
		}
		if e.Event == EventQueued {
			rec.queued = e
		}
		if e.JobState() != "" {
			rec.last = e
		}
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	r.past.damaged = damaged
	r.fencing.unstopped = unstopped
	for _, k := range order {
		rec := recs[k]
		if rec.queued.Job == "" {
			continue // never queued: a rejected line
		}
		j, err := rebuild(rec.queued, rec.spec)
		if err != nil {
			continue // a line the parser now rejects: nothing to run again
		}
		var envErr error // the environment a submit gave it, kept apart
		if rec.spec != nil && rec.spec.EnvFile != "" {
			j.CallerEnv, envErr = readEnv(r.opts.LogDir, rec.spec.EnvFile)
		}
		var codeErr error
		if rec.spec != nil && rec.spec.Snapshot != "" {
			if r.opts.OpenSnapshot == nil {
				codeErr = errors.New("this server takes no snapshot of code")
			} else {
				j.Code, codeErr = r.opts.OpenSnapshot(rec.spec.Snapshot, rec.spec.SyncDir)
			}
		}
		if j.Name != "" {
			r.serving.names[j.Name] = j.Where()
		}
		if codeErr == nil {
			codeErr = envErr
		}
		q := &queued{job: j, requeueErr: codeErr}
		r.serving.jobs[j.ID()] = q
		state := rec.last.JobState()
		if Ended(state) {
			last := rec.last
			q.ended = &last
		}
		if !Ended(state) || state == EventCancelled.State() && !rec.last.ByUser {
			switch {
			case !r.opts.Resume:
				r.serving.unfinished++
			case rec.last.Event == EventStarted || rec.last.Event == EventPending:
				// It may run on where it was started: followed, not run again.
				q.ended = nil
				r.past.adoptions = append(r.past.adoptions, adoption{q, rec.last})
			default:
				q.ended = nil
				r.serving.requeue = append(r.serving.requeue, q)
			}
		}
	}
	return nil
}

// adoption is a served job and the attempt an earlier server left running.
type adoption struct {
	q       *queued
	attempt Event
}

// rebuild makes a served job again from its queued event: its line gives
// the placement, and spec (when the job was served) what was given beside
// it (submit's defaults, a changed priority).
func rebuild(e Event, spec *JobSpec) (*Job, error) {
	j := &Job{Seq: e.Seq, Text: e.Text, Occurrence: e.Occurrence, GPU: -1, GPUs: 1, Nodes: 1, PreferGPU: -1, Retries: -1}
	j.File, j.Line = splitSource(e.Source)
	if err := parsePrefix(j); err != nil {
		return nil, err
	}
	if spec != nil {
		j.Name, j.Host, j.GPU, j.GPUs, j.Priority = spec.Name, spec.Host, spec.GPU, max(spec.GPUs, 1), spec.Priority
		j.Timeout = secondsDuration(spec.TimeoutSeconds)
		j.Prefer, j.PreferGPU = spec.Prefer, spec.PreferGPU
		j.CallerEnv = spec.Env
		j.After, j.AfterAny = spec.After, spec.AfterAny
		j.Models, j.VRAMMB, j.Tags = spec.Models, spec.VRAMMB, spec.Tags
	}
	return j, nil
}

// splitSource undoes Job.Where: "cmds.txt:12" or "line 12".
func splitSource(source string) (file string, line int) {
	for i := len(source) - 1; i >= 0; i-- {
		if source[i] == ':' {
			if n, err := strconv.Atoi(source[i+1:]); err == nil {
				return source[:i], n
			}
			break
		}
	}
	if len(source) > 5 && source[:5] == "line " {
		if n, err := strconv.Atoi(source[5:]); err == nil {
			return "", n
		}
	}
	return source, 0
}
