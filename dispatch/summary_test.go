package dispatch

import (
	"bytes"
	"testing"
	"testing/synctest"
)

// The summary counts jobs by outcome, then lists those that did not
// succeed with where to look, in input order.
func TestSummaryWrite(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		code := func(c int) *int { return &c }
		s := newSummary()
		for _, e := range []Event{
			{Event: EventFinished, Job: "1", Seq: 1},
			{Event: EventLost, Job: "3", Seq: 3, Source: "jobs.txt:3", Command: "python b.py", Host: "n2", Stdout: "logs/3.out", Stderr: "logs/3.err", Error: "n2: connection lost"},
			{Event: EventFailed, Job: "train", Seq: 2, Source: "jobs.txt:2", Command: "python a.py \\\n  --lr 1", Exit: code(2), Stdout: "logs/train.out", Stderr: "logs/train.err"},
			{Event: EventTimeout, Job: "4", Seq: 4, Source: "jobs.txt:4", Command: "sleep 99", Stdout: "logs/4.out", Stderr: "logs/4.err"},
			{Event: EventRejected, Job: "5", Seq: 5, Source: "jobs.txt:5", Error: "unknown host x"},
			{Event: EventCancelled, Job: "6", Seq: 6, Source: "jobs.txt:6"},
		} {
			s.add(e)
		}
		s.Skipped = 2
		s.InputErrors = []string{"more.txt: read: input/output error"}
		var b bytes.Buffer
		s.Write(&b)
		golden(t, "summary.golden", b.String())
		if s.Succeeded() {
			t.Error("a summary with failures succeeded")
		}
	})
}
