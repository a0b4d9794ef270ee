package dispatch

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"slices"
)

// A job's number is its id (unless name= gives one) for the life of its log
// dir, so that ID.out, ID.2.out... always mean the attempts of one job: a
// run numbers its jobs in input order after the highest number any earlier
// run of the log dir gave, and with Resume a job the journal knows keeps
// the number it had, whatever lines were added or moved around it.

// numbers gives the jobs of a run their numbers.
type numbers struct {
	last int
	// had is the number each job had in the latest run that saw it; only
	// read with Resume.
	had map[jobKey]int
}

// readNumbers reads the numbers the journal at path gave. A missing
// journal gave none.
func readNumbers(path string) (*numbers, error) {
	n := &numbers{had: map[jobKey]int{}}
	// A job's first event in a run is queued or rejected (or pending, for
	// a Slurm job adopted by a resumed run): its number is there.
	marks := [][]byte{[]byte(`"event":"queued"`), []byte(`"event":"rejected"`), []byte(`"event":"pending"`), []byte(`"event":"started"`)}
	_, err := scanJournal(path, func(line []byte) error {
		if !slices.ContainsFunc(marks, func(m []byte) bool { return bytes.Contains(line, m) }) {
			return nil
		}
		var e Event
		if err := json.Unmarshal(line, &e); err != nil {
			return nil // said by the scan that reads the journal for the run
		}
		if e.TextBytes != nil {
			e.Text = string(e.TextBytes)
		}
		n.last = max(n.last, e.Seq)
		if e.Seq > 0 {
			n.had[jobKey{e.Text, e.Occurrence}] = e.Seq
		}
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	return n, err
}

// number gives j its number: the one it had when resume is set and the
// journal knows it, else the next one never given in the log dir.
func (n *numbers) number(j *Job, resume bool) {
	if had, ok := n.had[jobKey{j.Text, j.Occurrence}]; ok && resume {
		j.Seq = had
		return
	}
	n.last++
	j.Seq = n.last
}
