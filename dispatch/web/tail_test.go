package web

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestReadTail(t *testing.T) {
	big := strings.Repeat("a", tailCap+10)
	for _, tc := range []struct {
		name    string
		file    string
		from    int64
		text    string
		skipped int64
		end     int64
	}{
		{"whole small file", "hello\n", -1, "hello\n", 0, 6},
		{"from an offset", "hello\n", 2, "llo\n", 0, 6},
		{"nothing new", "hello\n", 6, "", 0, 6},
		{"a character cut at the end waits", "ab\xc3", 0, "ab", 0, 2},
		{"a character whole at the end", "ab\xc3\xa9", 0, "abé", 0, 4},
		{"the tail of a big file", big, -1, big[10:], 10, int64(len(big))},
		{"too much new: skipped to the tail", big, 3, big[10:], 7, int64(len(big))},
		{"a skip lands inside a character", strings.Repeat("é", tailCap/2+3), -1, strings.Repeat("é", tailCap/2), 6, int64(tailCap + 6)},
		{"invalid bytes are shown replaced", "a\xffb", 0, "a\uFFFDb", 0, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "log")
			if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			got := readTail(path, tc.from)
			if got.Text != tc.text || got.Skipped != tc.skipped || got.End != tc.end {
				t.Errorf("readTail(%d) = %q (%d bytes) skipped %d end %d; want %q (%d bytes) skipped %d end %d",
					tc.from, trim(got.Text), len(got.Text), got.Skipped, got.End, trim(tc.text), len(tc.text), tc.skipped, tc.end)
			}
		})
	}
	if got := readTail(filepath.Join(t.TempDir(), "none"), -1); got != (tail{}) {
		t.Errorf("a missing file: %+v, want nothing", got)
	}
}

func trim(s string) string {
	if len(s) > 20 {
		return s[:20] + "…"
	}
	return s
}

// Reading a log piece by piece, as a job's page follows it, gives back its
// bytes: all of them when nothing is skipped, valid UTF-8 always.
func FuzzReadTail(f *testing.F) {
	f.Add([]byte("hello\nworld\n"), uint16(3))
	f.Add([]byte("caf\xc3\xa9 \xe2\x82\xac\xf0\x9f\x98\x80"), uint16(1))
	f.Add([]byte("a\xffb\xc3"), uint16(2))
	f.Fuzz(func(t *testing.T, data []byte, step uint16) {
		path := filepath.Join(t.TempDir(), "log")
		var got strings.Builder
		var off int64
		written := 0
		n := max(int(step), 1)
		for written < len(data) {
			written = min(written+n, len(data))
			if err := os.WriteFile(path, data[:written], 0o600); err != nil {
				t.Fatal(err)
			}
			tl := readTail(path, off)
			if !utf8.ValidString(tl.Text) {
				t.Fatalf("invalid UTF-8 sent: %q", tl.Text)
			}
			if tl.End < off || tl.End > int64(written) {
				t.Fatalf("end %d outside [%d, %d]", tl.End, off, written)
			}
			if tl.Skipped > 0 {
				t.Fatalf("skipped %d bytes of a file smaller than the cap", tl.Skipped)
			}
			got.WriteString(tl.Text)
			off = tl.End
		}
		// What is left is at most a cut character, sent once the file ends.
		if rest := int64(len(data)) - off; rest >= utf8.UTFMax {
			t.Fatalf("%d bytes never sent", rest)
		}
		if want := strings.ToValidUTF8(string(data[:off]), "\uFFFD"); got.String() != want && utf8.Valid(data[:off]) {
			t.Fatalf("followed %q, want %q", got.String(), want)
		}
	})
}
