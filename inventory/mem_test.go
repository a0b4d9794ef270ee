package inventory

import (
	"strings"
	"testing"
)

func TestParseMem(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"20G", 20480}, {"20GB", 20480}, {"20GiB", 20480}, {"512M", 512}, {"512mb", 512},
		{"1.5G", 1536}, {"1T", 1 << 20}, {" 6g ", 6144}, {"0.1M", 1},
		{"20", -1}, {"G", -1}, {"-1G", -1}, {"0G", -1}, {"20X", -1}, {"1e3G", -1}, {"2000T", -1}, {"", -1},
	} {
		got, err := ParseMem(tc.in)
		if tc.want < 0 {
			if err == nil {
				t.Errorf("ParseMem(%q) = %d; want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseMem(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParseMem(f *testing.F) {
	for _, s := range []string{"20G", "512M", "1.5T", "0G", "x", "99999999999G", "1.G", ".5G"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		mb, err := ParseMem(s)
		if err == nil && (mb <= 0 || mb > 1<<30) {
			t.Errorf("ParseMem(%q) = %d: out of range", s, mb)
		}
		if err != nil && !strings.Contains(err.Error(), "want a size") {
			t.Errorf("ParseMem(%q): %v", s, err)
		}
	})
}
