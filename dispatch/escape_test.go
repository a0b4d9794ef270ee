package dispatch

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestPrintable(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"python train.py --lr 0.1", "python train.py --lr 0.1"},
		{"échelle 日本 🚀", "échelle 日本 🚀"},
		{"echo \x1b]2;pwned\x07\x1b[2J", `echo \x1b]2;pwned\a\x1b[2J`},
		{"\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07", `\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\a`},
		{"a\tb\r\nc", `a\tb\r\nc`},
		{"del\x7f", `del\x7f`},
		{"c1 csi \u009b31m", `c1 csi \u009b31m`},
		{"raw \x9b31m", `raw \x9b31m`},
		{"bidi \u202egnp.exe", `bidi \u202egnp.exe`},
		{"", ""},
	} {
		if got := Printable(tt.in); got != tt.want {
			t.Errorf("Printable(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// What Printable returns holds nothing a terminal acts on, and text
// without such characters comes back unchanged.
func FuzzPrintable(f *testing.F) {
	for _, s := range []string{"plain", "\x1b[2J", "\xff\xfe", "a\nb", "\u202e", "日本"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p := Printable(s)
		if !utf8.ValidString(p) || strings.IndexFunc(p, needsEscape) >= 0 {
			t.Fatalf("Printable(%q) = %q: still holds controls", s, p)
		}
		if utf8.ValidString(s) && strings.IndexFunc(s, needsEscape) < 0 && !strings.Contains(s, `\`) && p != s {
			t.Fatalf("Printable(%q) = %q: changed plain text", s, p)
		}
	})
}

func TestEscapeWriter(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	w := EscapeWriter{W: &b}
	in := []byte("job 1 started on a:0: echo \x1b[2J\nsecond line\n")
	n, err := w.Write(in)
	if err != nil || n != len(in) {
		t.Fatalf("Write: %d, %v", n, err)
	}
	if want := "job 1 started on a:0: echo \\x1b[2J\nsecond line\n"; b.String() != want {
		t.Errorf("wrote %q, want %q", b.String(), want)
	}
}
