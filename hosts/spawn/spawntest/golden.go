// Package spawntest helps the tests of what gpudispatch sends the scripts
// it runs on a machine: golden files of those bytes (Golden), shown so
// that a person can read them (Shown, Records).
package spawntest

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpudispatch/gpudispatch/hosts/spawn"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// Shown is what is sent to a script, byte for byte, readable: each NUL is
// shown as <NUL> and ends a line.
func Shown(b []byte) string { return strings.ReplaceAll(string(b), "\x00", "<NUL>\n") }

// Records shows b, records one after the other (spawn.Record), a field a
// line (quoted as Go would: every byte shows); what is no record is shown
// as it is, after "not a record:". The records of a golden file are then
// the fields a script reads.
func Records(b []byte) string {
	var out strings.Builder
	for len(b) > 0 {
		var d spawn.RecordDecoder
		rest, done, err := d.Feed(b)
		if err != nil || !done {
			out.WriteString("not a record: " + Shown(b) + "\n")
			break
		}
		f := d.Fields()
		fmt.Fprintf(&out, "record of %d:\n", len(f))
		for _, x := range f {
			fmt.Fprintf(&out, "  %q\n", x)
		}
		b = rest
	}
	return out.String()
}

// Golden compares got, what is sent to the script named what, with
// testdata/name, or rewrites the file when the test runs with -args
// -update.
func Golden(t *testing.T, what, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run Golden -args -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("what is sent to %s changed (%s); if on purpose, rewrite it with go test -run Golden -args -update:\ngot:\n%s\nwant:\n%s", what, path, got, want)
	}
}
