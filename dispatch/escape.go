package dispatch

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Printable is s with what a terminal would act on shown as escapes
// instead: C0 and C1 control characters (ESC starts every colour, title
// and clipboard sequence), DEL, Unicode's direction overrides (which
// reorder what is shown), and bytes that are not UTF-8. Job text (commands,
// names, errors, a journal another user wrote) goes through it before it
// reaches a terminal; piped output stays byte-exact.
func Printable(s string) string {
	if strings.IndexFunc(s, needsEscape) < 0 && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case needsEscape(r):
			b.WriteString(escapeRune(r))
		default:
			b.WriteString(s[:size])
		}
		s = s[size:]
	}
	return b.String()
}

// needsEscape reports whether a terminal would act on r rather than show it.
func needsEscape(r rune) bool {
	return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) ||
		(r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// escapeRune is r as Go writes it in a quoted rune (\x1b, \n, \u202e),
// without the quotes.
func escapeRune(r rune) string {
	q := strconv.QuoteRune(r)
	return q[1 : len(q)-1]
}

// EscapeWriter passes whole lines to W with their text made Printable, the
// line ends kept: gpudispatch's lines and summaries on a terminal.
type EscapeWriter struct{ W io.Writer }

func (e EscapeWriter) Write(p []byte) (int, error) {
	lines := strings.SplitAfter(string(p), "\n")
	var b strings.Builder
	for _, l := range lines {
		text, nl := strings.CutSuffix(l, "\n")
		b.WriteString(Printable(text))
		if nl {
			b.WriteByte('\n')
		}
	}
	if _, err := io.WriteString(e.W, b.String()); err != nil {
		return 0, err
	}
	return len(p), nil
}
