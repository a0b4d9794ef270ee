package web

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch"
	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// jobInfo is what the page knows of a job, from its events.
type jobInfo struct {
	ID, Command, Source string
	// State is dispatch's job state (waiting, running, or an outcome);
	// Pending says that a Slurm cluster holds it, for Reason.
	State   dispatch.JobState
	Pending bool
	Reason  string
	Host    string
	GPUs    []executor.GPUID
	// Parts are the other parts of a job over several hosts.
	Parts   []dispatch.Part
	Attempt int
	Start   time.Time
	End     time.Time
	Exit    *int
	Error   string
	// Stdout and Stderr are the log files of its latest attempt;
	// Returned are the files it brought back, beside them
	// (dispatch.ReturnDir).
	Stdout, Stderr string
	Returned       []executor.ReturnedFile
	SlurmID        string
	// version counts its events, so a job page knows when to redraw.
	version int
}

// apply learns e. The caller holds s.mu.
func (s *Server) apply(e dispatch.Event) {
	s.tally.Apply(e)
	if j := s.jobs[e.Job]; e.Event == dispatch.EventReturned && j != nil && len(e.Returned) > 0 {
		// What came back, beside the attempt's logs.
		j.version++
		j.Returned = e.Returned
		return
	}
	state := e.JobState()
	if state == "" {
		return
	}
	j := s.jobs[e.Job]
	if j == nil {
		j = &jobInfo{ID: e.Job}
		s.jobs[e.Job] = j
	}
	j.version++
	j.Command = firstNonEmpty(e.Command, j.Command)
	j.Source = firstNonEmpty(e.Source, j.Source)
	if e.Event == dispatch.EventQueued || e.Event == dispatch.EventRetried {
		// A new attempt: nothing of the last one holds.
		j.Host, j.GPUs, j.Parts, j.Start, j.End, j.Exit, j.Error, j.SlurmID = "", nil, nil, time.Time{}, time.Time{}, nil, "", ""
		j.Returned = nil
	}
	j.State, j.Pending, j.Reason = state, e.Event == dispatch.EventPending && !e.SettingUp, ""
	if e.Event == dispatch.EventPending {
		j.Reason = e.Message
	}
	if e.Host != "" {
		j.Host, j.GPUs, j.Parts = e.Host, e.GPUs, e.Parts
	}
	j.Attempt = max(j.Attempt, e.Attempt)
	j.Stdout, j.Stderr = firstNonEmpty(e.Stdout, j.Stdout), firstNonEmpty(e.Stderr, j.Stderr)
	j.SlurmID = firstNonEmpty(e.SlurmJobID, j.SlurmID)
	if e.Start != nil {
		j.Start = *e.Start
	}
	if e.Event == dispatch.EventStarted && s.first.IsZero() {
		s.first = j.Start
	}
	if dispatch.Ended(state) {
		j.Exit, j.Error = e.Exit, cmp.Or(e.Error, e.Hint)
		j.End = e.Time
		if e.End != nil {
			j.End = *e.End
		}
		s.ended = slices.DeleteFunc(s.ended, func(id string) bool { return id == e.Job })
		s.ended = append(s.ended, e.Job)
		if over := len(s.ended) - s.o.ListLimit; over > 0 {
			s.ended = slices.Delete(s.ended, 0, over)
		}
	}
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// copy is j as it is now, for drawing once s.mu is let go (events change
// j; they replace its slices, never write into them).
func (j *jobInfo) copy() *jobInfo {
	c := *j
	return &c
}

// Places are where its latest attempt runs: its host and GPUs, and its
// other parts' for a job over several hosts.
func (j *jobInfo) Places() []dispatch.Place {
	return (dispatch.Event{Host: j.Host, GPUs: j.GPUs, Parts: j.Parts}).Places()
}

// gpusOn are the GPUs of host that its latest attempt holds (a part's,
// for a job over several hosts).
func (j *jobInfo) gpusOn(host string) []executor.GPUID {
	for _, pl := range j.Places() {
		if pl.Host == host {
			return pl.GPUs
		}
	}
	return nil
}

// Where says where its latest attempt runs: "node1:0,1", or
// "node1:0,1+node2:0,1" for a job over several hosts.
func (j *jobInfo) Where() string { return dispatch.Where(j.Places()) }

// Duration is how long the job ran, or has run by now.
func (j *jobInfo) Duration(now time.Time) time.Duration {
	switch {
	case j.Start.IsZero():
		return 0
	case j.End.IsZero():
		return dispatch.RoundDuration(now.Sub(j.Start))
	}
	return dispatch.RoundDuration(j.End.Sub(j.Start))
}

// Word is the job's state for people.
func (j *jobInfo) Word() string {
	if j.Pending {
		return "held by Slurm"
	}
	return dispatch.StateWord(j.State)
}

// Ended reports whether the job's story has ended.
func (j *jobInfo) Ended() bool { return dispatch.Ended(j.State) }

// Retryable reports whether retry would queue the job again.
func (j *jobInfo) Retryable() bool { return dispatch.Retryable(j.State) }
