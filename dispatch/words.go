package dispatch

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// OneLine shortens a multi-line command to its first line and " ...".
func OneLine(cmd string) string {
	if first, _, more := strings.Cut(cmd, "\n"); more {
		return first + " ..."
	}
	return cmd
}

// RoundDuration keeps milliseconds under a second, a tenth of a second
// under a minute, whole seconds above: how long jobs ran or will run, for
// people, the same in the run's lines, status and the page.
func RoundDuration(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	if d < time.Minute {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// Clip shortens s to at most n runes, marking the cut with "…".
func Clip(s string, n int) string {
	if n < 1 || utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// ClipMiddle shortens s to at most n runes by cutting out a piece of its
// middle, marked "…": a command keeps its start (the program) and more of
// its end, where the jobs of a sweep differ (--lr 0.1, --seed 3).
func ClipMiddle(s string, n int) string {
	if n < 1 || utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	head := (n - 1) * 2 / 5
	tail := n - 1 - head
	return string(r[:head]) + "…" + string(r[len(r)-tail:])
}

// Count says n of a thing for people: "1 job", "3 jobs" (plural adds an
// s; irregular words are not used).
func Count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}
