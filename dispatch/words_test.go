package dispatch

import (
	"testing"
	"time"
)

func TestWords(t *testing.T) {
	t.Parallel()
	sweep := "python train.py --model resnet50 --lr 0.001 --seed 3"
	for _, tc := range []struct{ name, got, want string }{
		{"short enough", ClipMiddle("echo hi", 7), "echo hi"},
		{"one rune", ClipMiddle("echo hi", 1), "…"},
		{"an end cut", Clip("logs/12.out", 6), "logs/…"},
		{"one job", Count(1, "job"), "1 job"},
		{"jobs", Count(0, "job"), "0 jobs"},
		{"milliseconds under a second", RoundDuration(40*time.Millisecond + 300*time.Microsecond).String(), "40ms"},
		{"tenths under a minute", RoundDuration(2345 * time.Millisecond).String(), "2.3s"},
		{"seconds above", RoundDuration(90*time.Second + 400*time.Millisecond).String(), "1m30s"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, tc.got, tc.want)
		}
	}
	// The middle cut: 30 runes, the start and more of the end.
	if got := ClipMiddle(sweep, 30); got != "python trai…-lr 0.001 --seed 3" || len([]rune(got)) != 30 {
		t.Errorf("ClipMiddle(%q, 30) = %q", sweep, got)
	}
}
