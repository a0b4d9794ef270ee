package spawn

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Record frames fields for a script on a machine: the one framing of what
// the coordinator sends the scripts it runs there (their parameters, a
// job, a list of files), and of what a script hands back that may hold
// any byte (a job shell's login state). Eight decimal digits give the
// length of a header; the header is the fields' byte lengths,
// space-separated; then come the fields, with nothing between them. Bash
// reads a pipe a byte per system call up to a delimiter, but a known
// length in one: a record takes three reads whatever its size
// (_g_record in prelude.sh reads one, _g_send writes one). A field may
// hold any byte but NUL, which no bash variable can hold: the caller
// checks.
func Record(fields ...string) []byte {
	var h strings.Builder
	n := 0
	for i, f := range fields {
		if i > 0 {
			h.WriteByte(' ')
		}
		h.WriteString(strconv.Itoa(len(f)))
		n += len(f)
	}
	b := make([]byte, 0, 8+h.Len()+n)
	b = fmt.Appendf(b, "%08d%s", h.Len(), h.String())
	for _, f := range fields {
		b = append(b, f...)
	}
	return b
}

// MaxRecord bounds a record ReadRecord takes: what scripts hand back is
// kilobytes (a login profile's state); a record claiming more is not one.
const MaxRecord = 64 << 20

// ErrNotRecord says that bytes that were to be a Record are not one.
var ErrNotRecord = errors.New("not a record")

// ReadRecord reads one Record from r: its fields.
func ReadRecord(r *bufio.Reader) ([]string, error) {
	var d RecordDecoder
	for {
		b, err := r.Peek(1)
		if err != nil {
			return nil, err
		}
		n := max(1, min(r.Buffered(), d.Wants()))
		b, _ = r.Peek(n)
		rest, done, derr := d.Feed(b)
		if derr != nil {
			return nil, derr
		}
		r.Discard(len(b) - len(rest))
		if done {
			return d.Fields(), nil
		}
	}
}

// A RecordDecoder takes a Record as its bytes come, in pieces of any size
// (a stream that carries other bytes around it). Its zero value is ready
// for one record.
type RecordDecoder struct {
	digits  []byte
	header  []byte
	hlen    int // -1 until the digits came
	lengths []int
	body    []byte
	need    int
	done    bool
}

// Wants is how many more bytes the record needs at least (1 while its
// lengths are not known yet, 0 once it is whole).
func (d *RecordDecoder) Wants() int {
	switch {
	case d.done:
		return 0
	case len(d.digits) < 8:
		return 8 - len(d.digits)
	case len(d.header) < d.hlen:
		return d.hlen - len(d.header)
	}
	return d.need - len(d.body)
}

// Feed takes the record's next bytes from p and returns what follows the
// record in p, and whether it is whole.
func (d *RecordDecoder) Feed(p []byte) (rest []byte, done bool, err error) {
	for len(p) > 0 && !d.done {
		switch {
		case len(d.digits) < 8:
			k := min(len(p), 8-len(d.digits))
			d.digits, p = append(d.digits, p[:k]...), p[k:]
			if len(d.digits) < 8 {
				continue
			}
			n, err := strconv.Atoi(string(d.digits))
			if err != nil || n < 0 || n > MaxRecord {
				return p, false, fmt.Errorf("%w: header length %q", ErrNotRecord, d.digits)
			}
			d.hlen = n
			if n == 0 {
				d.done = true
			}
		case len(d.header) < d.hlen:
			k := min(len(p), d.hlen-len(d.header))
			d.header, p = append(d.header, p[:k]...), p[k:]
			if len(d.header) < d.hlen {
				continue
			}
			for _, x := range strings.Split(string(d.header), " ") {
				n, err := strconv.Atoi(x)
				if err != nil || n < 0 || d.need+n > MaxRecord {
					return p, false, fmt.Errorf("%w: header %q", ErrNotRecord, d.header)
				}
				d.lengths = append(d.lengths, n)
				d.need += n
			}
			d.done = d.need == 0
		default:
			k := min(len(p), d.need-len(d.body))
			d.body, p = append(d.body, p[:k]...), p[k:]
			d.done = len(d.body) == d.need
		}
	}
	return p, d.done, nil
}

// Fields are the record's fields, once it is whole.
func (d *RecordDecoder) Fields() []string {
	f := make([]string, len(d.lengths))
	at := 0
	for i, n := range d.lengths {
		f[i], at = string(d.body[at:at+n]), at+n
	}
	return f
}

// WriteRecord writes fields as one Record to w.
func WriteRecord(w io.Writer, fields ...string) error {
	_, err := w.Write(Record(fields...))
	return err
}

// RecordWriter calls Each with the fields of every record written to it,
// as each is whole: a script's stdout read as it comes. Bytes that are no
// record stop it (Each is not called again; Err says why), but it takes
// every byte, so that the script is never blocked. It has one writer.
type RecordWriter struct {
	Each func(fields []string)
	d    RecordDecoder
	err  error
}

// Write implements io.Writer.
func (w *RecordWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && w.err == nil {
		rest, done, err := w.d.Feed(p)
		switch {
		case err != nil:
			w.err = err
		case done:
			w.Each(w.d.Fields())
			w.d = RecordDecoder{}
		}
		p = rest
	}
	return n, nil
}

// Err is why the writer stopped taking records, if it did.
func (w *RecordWriter) Err() error { return w.err }
