package dispatch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// readJournal reads the journal's whole lines; it may be called while a
// run writes to it.
func readJournal(t *testing.T, dir string) []Event {
	t.Helper()
	var events []Event
	damaged, err := scanJournal(filepath.Join(dir, JournalName), func(line []byte) error {
		var e Event
		if err := json.Unmarshal(line, &e); err != nil {
			return fmt.Errorf("%q: %w", line, err)
		}
		events = append(events, e)
		return nil
	})
	if err != nil || damaged != nil {
		t.Fatal(err, damaged)
	}
	return events
}

// warnings counts the journal's warnings about host ("": any) whose error
// says text.
func warnings(t *testing.T, dir, host, text string) int {
	t.Helper()
	n := 0
	for _, e := range readJournal(t, dir) {
		if e.Event == EventWarning && (host == "" || e.Host == host) && strings.Contains(e.Error, text) {
			n++
		}
	}
	return n
}

func TestJournalCutsTornTail(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), JournalName)
	os.WriteFile(path, []byte(`{"event":"finished","text":"a","occurrence":1}`+"\n"+`{"event":"fini`), 0o644)
	j, err := openJournal(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.append(Event{Event: EventQueued}); err != nil {
		t.Fatal(err)
	}
	j.close()
	done, _, _, _, damaged, err := openAttempts(path)
	if err != nil || !done[jobKey{"a", 1}] || damaged != nil {
		t.Fatalf("succeeded = %v, %v, %v", done, damaged, err)
	}
}

// writeJournal writes events as journal lines, then tail as it is, in a
// new log dir, and returns the dir.
func writeJournal(t *testing.T, events []Event, tail string) string {
	t.Helper()
	dir := t.TempDir()
	writeJournalIn(t, dir, events, tail)
	return dir
}

// writeJournalIn is writeJournal into log dir dir.
func writeJournalIn(t *testing.T, dir string, events []Event, tail string) {
	t.Helper()
	var b bytes.Buffer
	for _, e := range events {
		line, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	b.WriteString(tail)
	if err := os.WriteFile(filepath.Join(dir, JournalName), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A damaged line in the middle of a journal (two writers tore it) is
// skipped and named with its line number; status and --resume read the
// rest.
func TestJournalDamagedLine(t *testing.T) {
	dir := writeJournal(t, nil, `{"event":"finished","run":"r","job":"1","text":"a","occurrence":1}
{"event":"finished","run":"r","job":"2","te{"event":"queued","run":"r","job":"3"}xt":"b","occurrence":1}
`+strings.Repeat("x", maxJournalLine+10)+`
{"event":"finished","run":"r","job":"4","text":"d","occurrence":1}
`)
	want := []string{"journal.jsonl:2: invalid character", "journal.jsonl:3: "}
	st, err := ReadStatus(dir, time.Now())
	if err != nil || len(st.Jobs) != 2 || st.Jobs[1].Job != "4" {
		t.Fatalf("status: %v, %+v; want jobs 1 and 4", err, st)
	}
	done, _, _, _, damaged, err := openAttempts(filepath.Join(dir, JournalName))
	if err != nil || len(done) != 2 || !done[jobKey{"d", 1}] {
		t.Errorf("--resume: %v, %v; want a and d done", done, err)
	}
	// --resume decodes only the lines that may be a finished job: line 2.
	for _, got := range [][]string{st.Damaged, damaged} {
		if len(got) == 0 || len(got) > len(want) {
			t.Fatalf("damaged %q, want lines 2 and 3 (2 for --resume)", got)
		}
		for i := range got {
			if !strings.Contains(got[i], want[i]) {
				t.Errorf("damaged %q, want %q", got[i], want[i])
			}
		}
	}
	if len(st.Damaged) != 2 || len(damaged) != 1 {
		t.Errorf("status skipped %q, --resume %q; want lines 2 and 3, and 2", st.Damaged, damaged)
	}
}

func TestStatusNoJournal(t *testing.T) {
	if _, err := ReadStatus(t.TempDir(), time.Now()); !os.IsNotExist(err) {
		t.Errorf("no journal: %v, want not-exist", err)
	}
}

// --resume reads past a finished event torn by a crash instead of failing.
func TestResumeIgnoresTornTail(t *testing.T) {
	dir := writeJournal(t, []Event{{Run: "r", Event: EventFinished, Job: "1", Text: "a", Occurrence: 1}},
		`{"time":"x","event":"finished","run":"r","job":"2","text":"b`)
	done, _, _, _, _, err := openAttempts(filepath.Join(dir, JournalName))
	if err != nil || !done[jobKey{"a", 1}] || len(done) != 1 {
		t.Errorf("succeeded = %v, %v; want only a", done, err)
	}
}
