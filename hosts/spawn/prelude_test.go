package spawn

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The scripts' names for the exit statuses are the coordinator's numbers.
func TestExitsAgree(t *testing.T) {
	t.Parallel()
	want := map[string]int{
		"usage": 2, "gone": ExitGone, "timedout": ExitTimedOut,
		"unread": ExitUnread, "unsafe": ExitUnsafe, "notfound": ExitNotFound,
	}
	got := map[string]int{}
	line := regexp.MustCompile(`^_g_x_([a-z]+)=([0-9]+)\b`)
	sc := bufio.NewScanner(strings.NewReader(Prelude))
	for sc.Scan() {
		if m := line.FindStringSubmatch(sc.Text()); m != nil {
			got[m[1]], _ = strconv.Atoi(m[2])
		}
	}
	if len(got) != len(want) {
		t.Errorf("prelude.sh names %v, exits.go %v", got, want)
	}
	for name, n := range want {
		if got[name] != n {
			t.Errorf("_g_x_%s is %d in prelude.sh, %d in exits.go", name, got[name], n)
		}
	}
}

// The scripts' places for gpudispatch's files are the coordinator's.
func TestLayoutAgrees(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{"code": CodeStore} {
		line := "_g_d_" + name + "=" + strings.Replace(want, "~", "$HOME", 1) + "\n"
		if !strings.Contains(Prelude, line) {
			t.Errorf("prelude.sh has no line %q", line)
		}
	}
}

// No script on a machine spells one of those statuses as a bare number,
// nor the places of gpudispatch's files.
func TestScriptsSayItByName(t *testing.T) {
	t.Parallel()
	bare := regexp.MustCompile(`\b(exit|return) (2|3|12[4-7])\b`)
	n := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".sh") || filepath.Base(path) == "prelude.sh" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		for i, l := range strings.Split(string(b), "\n") {
			code, _, _ := strings.Cut(l, "#")
			if bare.MatchString(code) {
				t.Errorf("%s:%d: %s: name the status ($_g_x_...)", path, i+1, strings.TrimSpace(l))
			}
			if strings.Contains(code, ".gpudispatch/") {
				t.Errorf("%s:%d: %s: name the place ($_g_d_...)", path, i+1, strings.TrimSpace(l))
			}
		}
		return nil
	})
	if err != nil || n < 10 {
		t.Fatalf("looked at %d scripts under hosts/: %v", n, err)
	}
}
