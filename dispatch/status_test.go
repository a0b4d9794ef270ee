package dispatch

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

func TestStatus(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	at := func(s int) *time.Time { tm := t0.Add(time.Duration(s) * time.Second); return &tm }
	code := func(c int) *int { return &c }
	ev := func(run string, kind EventKind, job, text string, attempt int) Event {
		return Event{Run: run, Event: kind, Job: job, Text: text, Occurrence: 1, Command: text, Attempt: attempt}
	}
	started := func(e Event, s int) Event {
		e.Host, e.GPUs, e.Start, e.Stdout, e.Stderr = "n1", []executor.GPUID{2}, at(s), "l/"+e.Job+".out", "l/"+e.Job+".err"
		return e
	}
	ended := func(e Event, s, exit int) Event { e = started(e, 0); e.End, e.Exit = at(s), code(exit); return e }
	run := func(id string, resume bool) Event { return Event{Run: id, Event: EventRun, Resume: resume} }
	for _, tc := range []struct {
		name   string
		events []Event
		tail   string
		want   []string // job:state:attempts
		totals string
		// latest and earlier are what Latest keeps (job:state:attempts)
		// and leaves out; latest nil: all of want.
		latest  []string
		earlier int
	}{
		{
			name: "one run",
			events: []Event{
				ev("r1", EventQueued, "1", "a", 0), started(ev("r1", EventStarted, "1", "a", 1), 0),
				ev("r1", EventQueued, "2", "b", 0), started(ev("r1", EventStarted, "2", "b", 1), 0),
				ended(ev("r1", EventFinished, "1", "a", 1), 5, 0),
				{Run: "r1", Event: EventHostDown, Host: "n1", Error: "gone"},
				ev("r1", EventLost, "2", "b", 1), ev("r1", EventRetried, "2", "b", 1),
				started(ev("r1", EventStarted, "2", "b", 2), 9),
				ev("r1", EventRejected, "3", "@x c", 0),
				ev("r1", EventQueued, "4", "d", 0),
			},
			want:   []string{"1:finished:1", "2:running:2", "3:rejected:0", "4:waiting:0"},
			totals: "4 jobs: 1 succeeded, 1 running, 1 waiting, 1 rejected",
		},
		{
			name: "a torn last line is left out",
			events: []Event{
				ev("r1", EventQueued, "1", "a", 0), started(ev("r1", EventStarted, "1", "a", 1), 0),
			},
			tail:   `{"event":"finished","run":"r1","job":"1","te`,
			want:   []string{"1:running:1"},
			totals: "1 job: 1 running",
		},
		{
			name: "a later run tells the latest story of a job",
			events: []Event{
				ended(ev("r1", EventFinished, "1", "a", 1), 1, 0),
				ended(ev("r1", EventFailed, "2", "b", 1), 1, 3),
				ended(ev("r1", EventTimeout, "3", "c", 1), 1, 137),
				// --resume, with the lines in another order: b keeps its id.
				ev("r2", EventQueued, "2", "b", 0), started(ev("r2", EventStarted, "2", "b", 1), 0),
				ended(ev("r2", EventFinished, "2", "b", 1), 4, 0),
				ev("r2", EventCancelled, "3", "c", 0),
			},
			// Attempts count every run's: b ran once in each, c once before.
			want:   []string{"1:finished:1", "2:finished:2", "3:cancelled:1"},
			totals: "3 jobs: 2 succeeded, 1 cancelled",
		},
		{
			name: "the latest run is from the last run started afresh on",
			events: []Event{
				run("r1", false),
				ended(ev("r1", EventFailed, "1", "a", 1), 1, 3),
				ended(ev("r1", EventFinished, "2", "b", 1), 1, 0),
				// A second run of the same file without --resume: new ids.
				run("r2", false),
				ended(ev("r2", EventFinished, "3", "a", 1), 1, 0),
				ended(ev("r2", EventFailed, "4", "b", 1), 1, 1),
				// It resumed: a is skipped, b runs again.
				run("r3", true),
				ev("r3", EventQueued, "4", "b", 0),
				ended(ev("r3", EventFinished, "4", "b", 1), 2, 0),
			},
			want:    []string{"1:failed:1", "2:finished:1", "3:finished:1", "4:finished:2"},
			totals:  "4 jobs: 3 succeeded, 1 failed",
			latest:  []string{"3:finished:1", "4:finished:2"},
			earlier: 2,
		},
		{
			name: "a journal that names no runs is all the latest run",
			events: []Event{
				ended(ev("r1", EventFailed, "1", "a", 1), 1, 3),
				ended(ev("r2", EventFinished, "1", "b", 1), 1, 0),
			},
			want:   []string{"1:failed:1", "1:finished:1"},
			totals: "2 jobs: 1 succeeded, 1 failed",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := ReadStatus(writeJournal(t, tc.events, tc.tail), t0.Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, j := range st.Jobs {
				got = append(got, strings.Join([]string{j.Job, string(j.State), string(rune('0' + j.Attempts))}, ":"))
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("jobs %v, want %v", got, tc.want)
			}
			if st.Totals() != tc.totals {
				t.Errorf("totals %q, want %q", st.Totals(), tc.totals)
			}
			latest, earlier := st.Latest()
			got = nil
			for _, j := range latest.Jobs {
				got = append(got, strings.Join([]string{j.Job, string(j.State), string(rune('0' + j.Attempts))}, ":"))
			}
			want := tc.latest
			if want == nil {
				want = tc.want
			}
			if !slices.Equal(got, want) || earlier != tc.earlier {
				t.Errorf("latest run: jobs %v and %d earlier, want %v and %d", got, earlier, want, tc.earlier)
			}
		})
	}
}

// The table prints every value whole for a pipe, and on a terminal cuts
// only the commands, so that lines fit its width.
func TestStatusTable(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	t1 := t0.Add(90 * time.Second)
	exit := 3
	long := "python train.py --lr 0.001 --batch-size 64 --optimizer adam --epochs 300 --data /scratch/imagenet"
	dir := writeJournal(t, []Event{
		{Run: "r", Event: EventFailed, Job: "7", Text: "python train.py", Command: "python train.py", Attempt: 1,
			Host: "node1", GPUs: []executor.GPUID{0, 1}, Start: &t0, End: &t1, Exit: &exit, Stdout: "logs/7.out", Stderr: "logs/7.err"},
		{Run: "r", Event: EventStarted, Job: "8", Text: long, Command: long, Attempt: 1,
			Host: "node2", GPUs: []executor.GPUID{3}, Start: &t0, Stdout: "logs/8.out", Stderr: "logs/8.err"},
		{Run: "r", Event: EventQueued, Job: "9", Text: "echo one \\\nand two", Command: "echo one \\\nand two"},
	}, "")
	st, err := ReadStatus(dir, t0.Add(2500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, width := range []int{0, 80} {
		fmt.Fprintf(&b, "--- width %d\n", width)
		if err := st.WriteTable(&b, st.Jobs, width); err != nil {
			t.Fatal(err)
		}
	}
	golden(t, "status.golden", b.String())
	if !strings.Contains(b.String(), long) {
		t.Error("the whole table cut the long command")
	}
	if f := st.Unsuccessful(); len(f) != 1 || f[0].Job != "7" {
		t.Errorf("unsuccessful: %+v", f)
	}
}

// A job cancelled because a job it waited for was cancelled says so, not
// what it waited for.
func TestStatusSaysWhyAJobEnded(t *testing.T) {
	t.Parallel()
	dir := writeJournal(t, []Event{
		{Run: "r", Event: EventQueued, Job: "q_9", Text: "eval", Command: "eval", After: []string{"q_1", "q_2", "q_8"}},
		{Run: "r", Event: EventCancelled, Job: "q_9", Text: "eval", Command: "eval", Error: "dependency q_8 was cancelled"},
	}, "")
	st, err := ReadStatus(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := st.WriteTable(&b, st.Jobs, 0); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "dependency q_8 was cancelled") || strings.Contains(b.String(), "after q_1") {
		t.Errorf("the cancelled job does not say its dependency was cancelled:\n%s", b.String())
	}
}
