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
	err := scanJournal(filepath.Join(dir, JournalName), func(line []byte) error {
		var e Event
		if err := json.Unmarshal(line, &e); err != nil {
			return fmt.Errorf("%q: %w", line, err)
		}
		events = append(events, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return events
}

func TestJournalCutsTornTail(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), JournalName)
	os.WriteFile(path, []byte(`{"event":"finished","text":"a","occurrence":1}`+"\n"+`{"event":"fini`), 0o644)
	j, err := openJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.append(Event{Event: EventQueued}); err != nil {
		t.Fatal(err)
	}
	j.close()
	done, err := succeeded(path)
	if err != nil || !done[jobKey{"a", 1}] {
		t.Fatalf("succeeded = %v, %v", done, err)
	}
}

// writeJournal writes events as journal lines, then tail as it is.
func writeJournal(t *testing.T, events []Event, tail string) string {
	t.Helper()
	dir := t.TempDir()
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
	return dir
}

func TestStatusBadJournal(t *testing.T) {
	dir := writeJournal(t, nil, "{\"event\":\"queued\"}\nnot json\n")
	if _, err := ReadStatus(dir, time.Now()); err == nil || !strings.Contains(err.Error(), "journal.jsonl:2") {
		t.Errorf("a bad line: %v, want its file and line", err)
	}
	if _, err := ReadStatus(t.TempDir(), time.Now()); !os.IsNotExist(err) {
		t.Errorf("no journal: %v, want not-exist", err)
	}
}

// --resume reads past a finished event torn by a crash instead of failing.
func TestResumeIgnoresTornTail(t *testing.T) {
	dir := writeJournal(t, []Event{{Run: "r", Event: EventFinished, Job: "1", Text: "a", Occurrence: 1}},
		`{"time":"x","event":"finished","run":"r","job":"2","text":"b`)
	done, err := succeeded(filepath.Join(dir, JournalName))
	if err != nil || !done[jobKey{"a", 1}] || len(done) != 1 {
		t.Errorf("succeeded = %v, %v; want only a", done, err)
	}
}
