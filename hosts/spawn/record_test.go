package spawn

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// recordCases are fields a record must carry as they are.
var recordCases = [][]string{
	{},
	{""},
	{"", ""},
	{"one"},
	{"a b", "c\nd", "", "  ", "\n"},
	{"héllo wörld ✓", "日本語", "\xff\xfe not UTF-8"},
	{strings.Repeat("x", 70000), "y", strings.Repeat("line\n", 5000)},
	{"00000012", "12 3", "-1"},
}

// What the coordinator frames, bash reads field for field (_g_record), and
// what bash frames (_g_send), the coordinator reads back: every byte but
// NUL, whatever the locale.
func TestRecordThroughBash(t *testing.T) {
	t.Parallel()
	var in bytes.Buffer
	for _, c := range recordCases {
		in.Write(Record(c...))
	}
	// Each record read is sent back as it came, then its count of fields.
	cmd := exec.Command("bash", "-c", Prelude+`
while _g_record; do
  _g_send "${_g_f[@]}"
  _g_send "${#_g_f[@]}"
done`)
	cmd.Env = append(cmd.Environ(), "LC_ALL=C.UTF-8", "LANG=C.UTF-8") // ${#x} would count characters
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bash: %v", err)
	}
	r := bufio.NewReader(bytes.NewReader(out))
	for i, want := range recordCases {
		got, err := ReadRecord(r)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("record %d: bash read %q, want %q", i, clip(got), clip(want))
		}
		n, err := ReadRecord(r)
		if err != nil || len(n) != 1 || n[0] != strconv.Itoa(len(want)) {
			t.Errorf("record %d: bash counted %q fields (%v), want %d", i, n, err, len(want))
		}
	}
	if _, err := ReadRecord(r); !errors.Is(err, io.EOF) {
		t.Errorf("after the records: %v, want EOF", err)
	}
}

// A record that is cut short, or whose lengths are no numbers, is no
// record for bash either: _g_record fails rather than read a wrong field.
func TestRecordBadForBash(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"0000", "0000000x1", "000000011", "00000003a b", "000000011", "00000002-1"} {
		cmd := exec.Command("bash", "-c", Prelude+`_g_record && echo "read ${#_g_f[@]}: ${_g_f[*]}"`)
		cmd.Stdin = strings.NewReader(in)
		out, err := cmd.Output()
		if err == nil {
			t.Errorf("%q: bash read it: %s", in, out)
		}
	}
}

// ReadRecord takes records whatever pieces their bytes come in, and what
// follows a record stays.
func TestRecordDecoderPieces(t *testing.T) {
	t.Parallel()
	for _, c := range recordCases {
		b := append(Record(c...), "after"...)
		for _, size := range []int{1, 2, 7, 9, 4096} {
			var d RecordDecoder
			p, rest := b, []byte(nil)
			done := false
			for !done {
				k := min(size, len(p))
				var err error
				rest, done, err = d.Feed(p[:k])
				if err != nil {
					t.Fatalf("%q in pieces of %d: %v", clip(c), size, err)
				}
				rest = append(rest, p[k:]...)
				p = rest
			}
			if got := d.Fields(); !slices.Equal(got, c) || string(rest) != "after" {
				t.Errorf("in pieces of %d: %q then %q, want %q then after", size, clip(got), rest, clip(c))
			}
		}
	}
}

// FuzzRecordDecoder: any bytes either fail or give fields that frame back
// to the bytes the decoder took.
func FuzzRecordDecoder(f *testing.F) {
	for _, c := range recordCases[:6] {
		f.Add(Record(c...))
	}
	f.Add([]byte("00000003a b"))
	f.Add([]byte("99999999"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var d RecordDecoder
		rest, done, err := d.Feed(b)
		if err != nil || !done {
			return
		}
		took := b[:len(b)-len(rest)]
		if again := Record(d.Fields()...); !bytes.Equal(again, took) && !bytes.HasPrefix(took, []byte("00000000")) {
			// A header may spell a length with leading zeros ("01"): the
			// fields are the same, the bytes need not be.
			var d2 RecordDecoder
			if _, _, err := d2.Feed(again); err != nil || !slices.Equal(d2.Fields(), d.Fields()) {
				t.Errorf("%q decodes to %q, which frames to %q", took, d.Fields(), again)
			}
		}
	})
}

func clip(f []string) []string {
	out := make([]string, len(f))
	for i, s := range f {
		if len(s) > 40 {
			s = s[:40] + "..."
		}
		out[i] = s
	}
	return out
}

// A RecordWriter hands on each record as it is whole, whatever pieces the
// bytes come in, and stops at bytes that are no record while taking them
// all.
func TestRecordWriter(t *testing.T) {
	t.Parallel()
	var all []byte
	for _, c := range recordCases {
		all = append(all, Record(c...)...)
	}
	all = append(all, "no record here"...)
	for _, size := range []int{1, 3, 8, 100, 1 << 20} {
		var got [][]string
		w := &RecordWriter{Each: func(f []string) { got = append(got, f) }}
		for p := all; len(p) > 0; {
			k := min(size, len(p))
			if n, err := w.Write(p[:k]); n != k || err != nil {
				t.Fatalf("write of %d: %d, %v", k, n, err)
			}
			p = p[k:]
		}
		if len(got) != len(recordCases) || w.Err() == nil {
			t.Fatalf("in pieces of %d: %d records, stop %v; want %d, then a stop", size, len(got), w.Err(), len(recordCases))
		}
		for i, want := range recordCases {
			if !slices.Equal(got[i], want) {
				t.Errorf("in pieces of %d, record %d: %q, want %q", size, i, clip(got[i]), clip(want))
			}
		}
	}
}

// A record whose first bytes come before _g_record's wait runs out, and the
// rest after, is read whole, and the next one after it: the wait does not
// cut the stream.
func TestRecordBegunBeforeTheWaitEnds(t *testing.T) {
	t.Parallel()
	pr, pw := io.Pipe()
	cmd := exec.Command("bash", "-c", Prelude+`
_g_record 0.3; echo "$? ${_g_f[*]}"
_g_record 0.3; echo "$? ${_g_f[*]}"`)
	cmd.Stdin = pr
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first := Record("lock", "2")
	pw.Write(first[:3])
	time.Sleep(600 * time.Millisecond)
	pw.Write(first[3:])
	pw.Write(Record("exit"))
	pw.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "0 lock 2\n0 exit\n" {
		t.Errorf("bash read %q, want both records whole", got)
	}
}
