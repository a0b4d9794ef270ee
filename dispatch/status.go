package dispatch

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// JobStatus is where one job stands according to a journal.
type JobStatus struct {
	Job     string           `json:"job"`
	State   JobState         `json:"state"`
	Source  string           `json:"source,omitempty"`
	Command string           `json:"command"`
	Host    string           `json:"host,omitempty"`
	GPUs    []executor.GPUID `json:"gpus,omitempty"`
	// Parts are the other parts of the latest attempt of a job over
	// several hosts (Host and GPUs are part 0's).
	Parts []Part `json:"parts,omitempty"`
	// Snapshot is the ID of the snapshot of the code the latest attempt
	// ran in (a run with sync).
	Snapshot string `json:"snapshot,omitempty"`
	// Attempts counts the job's attempts in every run of the log dir (its
	// logs are ID.out, ID.2.out... up to ID.Attempts.out).
	Attempts int        `json:"attempts"`
	Exit     *int       `json:"exit,omitempty"`
	Start    *time.Time `json:"start,omitempty"`
	End      *time.Time `json:"end,omitempty"`
	// Seconds is End-Start, or the time it has been running.
	Seconds float64 `json:"seconds,omitempty"`
	Stdout  string  `json:"stdout,omitempty"`
	Stderr  string  `json:"stderr,omitempty"`
	Error   string  `json:"error,omitempty"`
	// Hint says what to set, for a job that exited 127 for want of conda,
	// module or python.
	Hint string `json:"hint,omitempty"`
	// Run is the run that wrote the job's latest event.
	Run string `json:"run"`
	// Priority and Why are a waiting job's priority and why it waits, when
	// the live run was asked (Control.Status).
	Priority int    `json:"priority,omitempty"`
	Why      string `json:"why,omitempty"`
	// Earlier is set on a job of an earlier run than the latest one: one
	// before the latest run started without --resume.
	Earlier bool `json:"earlier,omitempty"`
	// before is how many attempts earlier runs made.
	before int
}

// Succeeded reports whether the job finished with exit status 0.
func (s JobStatus) Succeeded() bool { return s.State == EventFinished.State() }

// Status is what a journal says about every job it names, in the order
// they first appear. A job is the same across runs (--resume) when its id,
// line and occurrence are.
type Status struct {
	Jobs []JobStatus
	// Damaged lists the journal's lines that could not be read and were
	// skipped, each with its file and line number.
	Damaged []string
}

// ReadStatus reads the journal in logDir. It only reads, so it can be used
// while a run appends to the journal; a line being written is left out, and
// a damaged one is skipped and named in Status.Damaged.
// now dates the running jobs' elapsed time.
func ReadStatus(logDir string, now time.Time) (*Status, error) {
	path := filepath.Join(logDir, JournalName)
	st := &Status{}
	type key struct {
		id string
		jobKey
	}
	index := map[key]int{}
	// The runs of the latest run's story: from the latest that started
	// afresh on. nil when no run said how it started (an older journal):
	// then every run.
	var latest map[string]bool
	// down holds why each host is down, as far as the journal goes.
	down := map[string]string{}
	var err error
	st.Damaged, err = scanJournal(path, func(line []byte) error {
		var e Event
		if err := json.Unmarshal(line, &e); err != nil {
			return err
		}
		switch e.Event {
		case EventHostDown:
			down[e.Host] = e.Error
		case EventHostUp:
			delete(down, e.Host)
		case EventRun:
			clear(down) // a new run looks at its hosts anew
		}
		if e.Event == EventRun {
			if !e.Resume || latest == nil {
				latest = map[string]bool{}
			}
			latest[e.Run] = true
			return nil
		}
		if e.JobState() == "" {
			return nil // a host event, or one that moves no job
		}
		if e.TextBytes != nil {
			e.Text = string(e.TextBytes)
		}
		k := key{e.Job, jobKey{e.Text, e.Occurrence}}
		i, ok := index[k]
		if !ok {
			i = len(st.Jobs)
			index[k] = i
			st.Jobs = append(st.Jobs, JobStatus{})
		}
		st.Jobs[i].apply(e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i := range st.Jobs {
		j := &st.Jobs[i]
		j.Earlier = latest != nil && !latest[j.Run]
		switch {
		case j.Start != nil && j.End != nil:
			j.Seconds = j.End.Sub(*j.Start).Seconds()
		case j.State == StateRunning && j.Start != nil:
			j.Seconds = now.Sub(*j.Start).Seconds()
		}
		if why, ok := down[j.Host]; ok && j.State == StateRunning {
			// Its host went silent: it runs there, as far as anyone knows.
			j.Why = fmt.Sprintf("presumed running: host %s is down (%s)", j.Host, why)
		}
	}
	return st, nil
}

// apply moves the job's status on by one of its events.
func (s *JobStatus) apply(e Event) {
	if e.Run != s.Run {
		// A later run (--resume) starts the job's story again; its
		// attempts come after the earlier ones.
		*s = JobStatus{Run: e.Run, Attempts: s.Attempts, before: s.Attempts}
	}
	s.Job, s.Source, s.Command = e.Job, e.Source, e.Command
	s.Attempts = max(s.Attempts, s.before+e.Attempt)
	s.State = e.JobState()
	switch s.State {
	case StateWaiting:
		s.Why = ""
		if len(e.After) > 0 {
			s.Why = "after " + strings.Join(e.After, ", ")
		}
		if e.Event == EventRetried && e.Message != "" {
			s.Why = e.Message // attempt N failed: …; retry N of M
		}
		if e.NotStarted {
			s.Attempts = s.before + e.Attempt
			s.Host, s.GPUs, s.Parts, s.Start, s.Stdout, s.Stderr = "", nil, nil, nil, "", ""
		}
		if e.Event == EventPending {
			// Submitted to a Slurm cluster, where it waits.
			s.Host, s.GPUs = e.Host, nil
			s.Why = "pending in Slurm (job " + e.SlurmJobID + "): " + e.Message
		}
		return
	case StateRunning:
		s.Exit, s.End, s.Error, s.Hint, s.Why = nil, nil, "", "", ""
		if e.SettingUp {
			s.Why = e.Message
		}
	default:
		// Ended: why it waited is over; its outcome's reason is Error.
		s.Exit, s.End, s.Error, s.Hint, s.Why = e.Exit, e.End, e.Error, e.Hint, ""
	}
	if e.Host != "" {
		s.Host, s.GPUs, s.Parts = e.Host, e.GPUs, e.Parts
	}
	if e.Start != nil {
		s.Start = e.Start
	}
	if e.Snapshot != "" {
		s.Snapshot = e.Snapshot
	}
	if e.Stdout != "" {
		s.Stdout, s.Stderr = e.Stdout, e.Stderr
	}
}

// Latest is st with only the jobs of the latest run (and of the runs it
// resumed), and how many jobs of earlier runs it leaves out.
func (st *Status) Latest() (latest *Status, earlier int) {
	latest = &Status{Damaged: st.Damaged}
	for _, j := range st.Jobs {
		if j.Earlier {
			earlier++
			continue
		}
		latest.Jobs = append(latest.Jobs, j)
	}
	return latest, earlier
}

// Counts holds the number of jobs in each state.
func (st *Status) Counts() map[JobState]int {
	c := map[JobState]int{}
	for _, j := range st.Jobs {
		c[j.State]++
	}
	return c
}

// WriteTable prints a line per job (id, state, host:gpu, attempts, exit,
// duration, command, log), then the totals. With width 0 every value is
// printed whole, for a pipe or a file (a script or grep sees every
// command); with a terminal's width, commands are cut so that lines fit.
func (st *Status) WriteTable(w io.Writer, jobs []JobStatus, width int) error {
	rows := [][]string{{"JOB", "STATE", "WHERE", "TRIES", "EXIT", "TIME", "COMMAND", "LOG"}}
	for _, j := range jobs {
		where, exit, took := "-", "-", "-"
		if j.Host != "" {
			where = Where(places(j.Host, j.GPUs, j.Parts))
		}
		if j.Exit != nil {
			exit = fmt.Sprint(*j.Exit)
		}
		if j.Seconds > 0 {
			took = RoundDuration(time.Duration(j.Seconds * float64(time.Second))).String()
		}
		// The log to look at: stdout while it runs or once it succeeded,
		// stderr when it failed or wrote only there.
		log := j.Stdout
		if j.Stderr != "" && (j.Unsuccessful() || emptyFile(j.Stdout) && !emptyFile(j.Stderr)) {
			log = j.Stderr
		}
		if log == "" {
			log = cmp.Or(j.Why, j.Error)
		}
		cmd := strings.ReplaceAll(j.Command, "\n", " ") // whole, on one line
		if width > 0 {
			cmd = OneLine(j.Command)
		}
		state := StateWord(j.State)
		if strings.HasPrefix(j.Why, "presumed running") {
			state, log = "presumed running", j.Why
		}
		row := []string{j.Job, state, where, strconv.Itoa(j.Attempts), exit, took, cmd, log}
		if width > 0 {
			for i := range row {
				row[i] = Printable(row[i]) // a terminal shows job text, never obeys it
			}
		}
		rows = append(rows, row)
	}
	if width > 0 {
		fitCommands(rows, width)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if _, err := fmt.Fprintln(w, st.Totals()); err != nil {
		return err
	}
	for _, j := range st.Jobs {
		if j.Hint != "" {
			if _, err := fmt.Fprintf(w, "job %s: %s\n", j.Job, j.Hint); err != nil {
				return err
			}
		}
	}
	return nil
}

// emptyFile reports whether the file at path is there and empty.
func emptyFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Size() == 0
}

// commandColumn is where WriteTable's rows hold the command.
const commandColumn = 6

// fitCommands cuts the commands of rows in their middle so that a row, laid
// out with two spaces between columns, fits in width; a command keeps at
// least 20 characters. The last column (the log, or why a job waits) is
// cut at its end to a third of the width at most, so that it never wraps
// and breaks the table; the other columns stay whole.
func fitCommands(rows [][]string, width int) {
	last := len(rows[0]) - 1
	for _, r := range rows[1:] {
		r[last] = Clip(r[last], max(24, width/3))
	}
	widths := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, v := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(v))
		}
	}
	total := 0
	for _, w := range widths {
		total += w + 2
	}
	room := max(20, width-(total-widths[commandColumn]))
	for _, r := range rows[1:] {
		r[commandColumn] = ClipMiddle(r[commandColumn], room)
	}
}

// Totals is one line: "12 jobs: 9 succeeded, 1 failed, 2 running".
func (st *Status) Totals() string {
	c := st.Counts()
	order := []JobState{EventFinished.State(), StateRunning, StateWaiting}
	for _, k := range Outcomes[1:] {
		order = append(order, k.State())
	}
	var parts []string
	for _, k := range order {
		if c[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c[k], StateWord(k)))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "none")
	}
	return Count(len(st.Jobs), "job") + ": " + strings.Join(parts, ", ")
}

// WriteJSON prints one JSON object per job, its state in the table's words
// ("succeeded", "timed out").
func (st *Status) WriteJSON(w io.Writer, jobs []JobStatus) error {
	enc := json.NewEncoder(w)
	for _, j := range jobs {
		j.State = JobState(StateWord(j.State)) // the table's word, for people's scripts
		if err := enc.Encode(j); err != nil {
			return err
		}
	}
	return nil
}

// Unsuccessful reports whether the job's story ended without success.
func (s JobStatus) Unsuccessful() bool {
	return Ended(s.State) && s.State != EventFinished.State()
}

// Unsuccessful lists the jobs whose story ended without success.
func (st *Status) Unsuccessful() []JobStatus {
	var out []JobStatus
	for _, j := range st.Jobs {
		if j.Unsuccessful() {
			out = append(out, j)
		}
	}
	return out
}
