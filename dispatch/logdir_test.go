package dispatch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// A log dir has one live coordinator: a second run on it fails at the
// start, naming the first, and changes nothing; once the first has ended,
// the log dir is free again.
func TestLogDirClaimed(t *testing.T) {
	t.Parallel()
	inv := lab("a:0")
	dir := t.TempDir()
	w, done := startRun(t, Options{Inventory: inv, Executor: newFakeExec(inv), LogDir: dir})
	fmt.Fprintln(w, "sleep 1ms")
	waitFor(t, func() bool { return countKind(readJournal(t, dir), EventFinished) == 1 })
	before, _ := os.ReadFile(filepath.Join(dir, JournalName))
	host, _ := os.Hostname()
	_, err := Run(context.Background(), Options{Inventory: inv, Executor: newFakeExec(inv), LogDir: dir}, []Input{{R: strings.NewReader("echo second\n")}})
	var se *SetupError
	want := fmt.Sprintf("log dir %s is in use by another gpudispatch (pid %d on %s, started ", dir, os.Getpid(), host)
	if !errors.As(err, &se) || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("second run: %v, want a setup error starting %q", err, want)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, JournalName)); string(after) != string(before) {
		t.Errorf("the second run wrote to the journal:\n%s", after)
	}
	w.Close()
	<-done
	if _, err := Run(context.Background(), Options{Inventory: inv, Executor: newFakeExec(inv), LogDir: dir}, []Input{{R: strings.NewReader("echo third\n")}}); err != nil {
		t.Errorf("after the first ended: %v", err)
	}
}

// A log dir, journal or claim that another user could turn against this
// one is refused before anything is written, and their files stay as they
// were.
func TestLogDirOfAnotherUser(t *testing.T) {
	m := sshtest.NewUser(t, "gpdmallory")
	shared := sshtest.SharedDir(t)
	os.Chmod(shared, 0o777|os.ModeSticky) // as /tmp is
	precious := filepath.Join(t.TempDir(), "precious")
	os.WriteFile(precious, []byte("mine\n"), 0o644)
	// mallory makes the log dir and what is in it; where rootOwns is set,
	// the log dir is then made root's (as /tmp is), so that what is tested
	// is the files mallory left in a shared sticky dir.
	tests := []struct {
		name, script, wantErr string
		rootOwns              bool
	}{
		{"a log dir of mallory's", "mkdir -m 0755 %[1]s/logs", "logs is owned by gpdmallory", false},
		{"a log dir everyone may write to", "mkdir -m 0777 %[1]s/logs", "may be written by every user", true},
		{"a journal linked to the victim's file", "mkdir -m 1777 %[1]s/logs && ln -s %[2]s %[1]s/logs/journal.jsonl", "journal: ", true},
		{"a claim linked to the victim's file", "mkdir -m 1777 %[1]s/logs && ln -s %[2]s %[1]s/logs/gpudispatch.lock", "log dir: ", true},
		{"a journal of mallory's", "mkdir -m 1777 %[1]s/logs && echo '{\"event\":\"finished\"}' > %[1]s/logs/journal.jsonl && chmod 666 %[1]s/logs/journal.jsonl", "journal.jsonl belongs to gpdmallory", true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := filepath.Join(shared, fmt.Sprint(i))
			if out, err := m.Command("/", "bash", "-c", fmt.Sprintf("mkdir -m 0777 %[1]s && "+tt.script, base, precious)).CombinedOutput(); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if tt.rootOwns {
				if err := os.Chown(filepath.Join(base, "logs"), 0, 0); err != nil {
					t.Fatal(err)
				}
			}
			inv := lab("a:0")
			_, err := Run(context.Background(), Options{Inventory: inv, Executor: newFakeExec(inv), LogDir: filepath.Join(base, "logs")}, []Input{{R: strings.NewReader("echo hi\n")}})
			var se *SetupError
			if !errors.As(err, &se) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("run: %v, want a setup error saying %q", err, tt.wantErr)
			}
			if b, _ := os.ReadFile(precious); string(b) != "mine\n" {
				t.Errorf("the victim's file is now %q", b)
			}
		})
	}
}
