package dispatch

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// TextReporter writes one line per job start and end, for a log or a
// terminal: "job 3 started on node1:2: python train.py --lr 0.1".
type TextReporter struct {
	W io.Writer
	// Quiet keeps only what went wrong; Verbose adds queued and skipped jobs.
	Quiet, Verbose bool
	// locksSaid holds the hosts and holders whose locks were said: another
	// run's locks are said once per host, not once per GPU.
	locksSaid map[string]bool
}

// Report implements Reporter.
func (t *TextReporter) Report(e Event) {
	if line, ok := t.Line(e); ok {
		fmt.Fprintln(t.W, line)
	}
}

// Line is what Report prints for e, and whether it prints anything. It
// remembers the lock waits it said, so that each host and holder is said
// once: call it once per event.
func (t *TextReporter) Line(e Event) (string, bool) {
	where := Where(e.Places())
	var line string
	switch e.Event {
	case EventQueued:
		if !t.Verbose {
			return "", false
		}
		line = fmt.Sprintf("job %s queued (%s): %s", e.Job, e.Source, OneLine(e.Command))
	case EventStarted:
		if t.Quiet {
			return "", false
		}
		line = fmt.Sprintf("job %s started on %s: %s", e.Job, where, OneLine(e.Command))
		if e.Attempt > 1 {
			line += fmt.Sprintf(" (attempt %d)", e.Attempt)
		}
	case EventFinished:
		if t.Quiet {
			return "", false
		}
		line = fmt.Sprintf("job %s finished on %s in %s", e.Job, where, elapsed(e))
	case EventFailed:
		if e.Exit != nil && e.Error == "" {
			line = fmt.Sprintf("job %s failed on %s with exit status %d after %s: see %s", e.Job, where, *e.Exit, elapsed(e), e.Stderr)
			if e.Hint != "" {
				line += "; " + e.Hint
			}
		} else if e.Host == "" {
			// It never had a place: it failed before it could start.
			line = fmt.Sprintf("job %s failed: %s", e.Job, e.Error)
		} else {
			line = fmt.Sprintf("job %s failed on %s: %s", e.Job, where, e.Error)
		}
	case EventTimeout:
		line = fmt.Sprintf("job %s timed out on %s after %s: its processes were killed", e.Job, where, elapsed(e))
	case EventLost:
		line = fmt.Sprintf("job %s lost on %s: %s", e.Job, where, e.Error)
		if e.Unstopped {
			line += "; its processes are stopped there once the host answers"
		}
	case EventRetried:
		if e.NotStarted {
			// Its host said why, once, in a warning.
			return "", false
		}
		switch {
		case e.ByUser:
			line = fmt.Sprintf("job %s queued again on request (retry)", e.Job)
		case e.Message != "":
			line = fmt.Sprintf("job %s queued again: %s", e.Job, e.Message)
		default:
			line = fmt.Sprintf("job %s queued again (attempt %d failed with its host)", e.Job, e.Attempt)
		}
	case EventPriority:
		if !t.Verbose {
			return "", false
		}
		line = fmt.Sprintf("job %s: %s", e.Job, e.Message)
	case EventCancelled:
		if e.Unstopped {
			line = fmt.Sprintf("job %s cancelled, but %s did not answer: it may run on there until gpudispatch reaches the host and stops it (this run, or the next run on this log dir)", e.Job, e.Host)
		} else if e.Host != "" {
			line = fmt.Sprintf("job %s cancelled on %s: its processes were killed", e.Job, where)
		} else if depCancelled(e) {
			line = fmt.Sprintf("job %s cancelled: %s", e.Job, e.Error)
		} else if t.Verbose {
			line = fmt.Sprintf("job %s cancelled before it started", e.Job)
		} else {
			return "", false
		}
	case EventStopped:
		line = fmt.Sprintf("job %s: attempt %d stopped on %s, now that it answers", e.Job, e.Attempt, e.Host)
	case EventRejected:
		line = fmt.Sprintf("%s: job %s rejected: %s", e.Source, e.Job, e.Error)
	case EventHostDown:
		line = fmt.Sprintf("host %s down: %s; its jobs wait for it or run elsewhere while gpudispatch reconnects", e.Host, e.Error)
	case EventHostUp:
		switch {
		case e.Message == "":
			line = fmt.Sprintf("host %s is back", e.Host)
		case !t.Verbose:
			return "", false
		default:
			line = fmt.Sprintf("host %s is up (it answered after the run started)", e.Host)
		}
	case EventBusy:
		if e.Job == "" {
			// Found busy by a look at the host, before any job went there.
			line = fmt.Sprintf("host %s: %s; --skip-busy keeps jobs off it until a look finds it free", e.Host, e.Error)
			break
		}
		if e.Message == "" {
			line = fmt.Sprintf("job %s waits: %s; the GPU is tried again later, its other slots are used meanwhile", e.Job, e.Error)
			break
		}
		key := e.Host + "\x00" + e.Message
		if t.locksSaid[key] {
			return "", false
		}
		if t.locksSaid == nil {
			t.locksSaid = map[string]bool{}
		}
		t.locksSaid[key] = true
		line = fmt.Sprintf("job %s waits: %s; the GPUs of %s that it holds are each tried again later (said once), other slots are used meanwhile", e.Job, e.Error, e.Host)
	case EventWarning:
		if e.Host != "" {
			line = fmt.Sprintf("gpudispatch: warning: host %s: %s", e.Host, e.Error)
		} else {
			line = "gpudispatch: warning: " + e.Error
		}
	case EventReloaded:
		line = "inventory reloaded: " + e.Message
	case EventReturned:
		return returnedLine(e, t.Quiet)
	default:
		return "", false
	}
	return line, true
}

func elapsed(e Event) time.Duration {
	if e.Start == nil || e.End == nil {
		return 0
	}
	return RoundDuration(e.End.Sub(*e.Start))
}

// JSONReporter writes every event as one JSON object per line, the same
// objects as the journal's lines.
type JSONReporter struct{ W io.Writer }

// Report implements Reporter.
func (j JSONReporter) Report(e Event) {
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	j.W.Write(append(b, '\n'))
}

// Write prints the summary: counts by outcome, then the jobs that did not
// succeed with where to look.
func (s *Summary) Write(w io.Writer) {
	kinds := make([]EventKind, 0, len(s.Counts))
	total := 0
	for k, n := range s.Counts {
		kinds = append(kinds, k)
		total += n
	}
	sort.Slice(kinds, func(a, b int) bool { return outcomeOrder(kinds[a].State()) < outcomeOrder(kinds[b].State()) })
	parts := make([]string, 0, len(kinds)+1)
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%d %s", s.Counts[k], StateWord(k.State())))
	}
	if s.Skipped > 0 {
		parts = append(parts, fmt.Sprintf("%d skipped (succeeded before)", s.Skipped))
		total += s.Skipped
	}
	if len(parts) == 0 {
		parts = append(parts, "nothing to do")
	}
	fmt.Fprintf(w, "gpudispatch: %s: %s\n", Count(total, "job"), strings.Join(parts, ", "))
	for _, e := range s.Unsuccessful {
		switch {
		case e.Event == EventCancelled && e.Host == "" && !depCancelled(e):
			continue // listed by count; they never ran
		case e.Stderr != "":
			how := StateWord(e.Event.State())
			if e.Exit != nil && e.Event == EventFailed {
				how += fmt.Sprintf(" with exit status %d", *e.Exit)
			}
			fmt.Fprintf(w, "  job %s %s (%s): %s\n    logs: %s %s\n", e.Job, how, e.Source, OneLine(e.Command), e.Stdout, e.Stderr)
			if e.Error != "" && (e.Event == EventFailed || e.Event == EventLost) {
				fmt.Fprintf(w, "    %s\n", e.Error)
			}
			if e.Hint != "" {
				fmt.Fprintf(w, "    %s\n", e.Hint)
			}
		default:
			fmt.Fprintf(w, "  job %s %s (%s): %s\n", e.Job, StateWord(e.Event.State()), e.Source, e.Error)
		}
	}
	for _, msg := range s.InputErrors {
		fmt.Fprintf(w, "  input not read to the end: %s\n", msg)
	}
	if s.JournalError != "" {
		fmt.Fprintf(w, "  stopped: %s\n", s.JournalError)
	}
}
