package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/gpudispatch/gpudispatch/dispatch"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// The checked-in command reference (docs/cli) is what the commands say
// now: a flag or help text changed without it fails here.
func TestCLIReferenceIsCurrent(t *testing.T) {
	dir := t.TempDir()
	var out, errs bytes.Buffer
	if err := writeDocs(newRootCommand(streams{in: &bytes.Buffer{}, out: &out, err: &errs}), dir, false); err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.Glob(filepath.Join(dir, "*.md"))
	have, _ := filepath.Glob(filepath.Join("..", "..", "docs", "cli", "*.md"))
	names := func(paths []string) []string {
		var n []string
		for _, p := range paths {
			n = append(n, filepath.Base(p))
		}
		return n
	}
	if !slices.Equal(names(want), names(have)) {
		t.Fatalf("docs/cli has %v; the commands make %v: run go run ./cmd/gpudispatch docs docs/cli", names(have), names(want))
	}
	for _, p := range want {
		a, _ := os.ReadFile(p)
		b, _ := os.ReadFile(filepath.Join("..", "..", "docs", "cli", filepath.Base(p)))
		if !bytes.Equal(a, b) {
			t.Errorf("docs/cli/%s is stale: run go run ./cmd/gpudispatch docs docs/cli", filepath.Base(p))
		}
	}
}

// markdownFiles are the README and the manual.
func markdownFiles(t *testing.T) []string {
	files := []string{filepath.Join("..", "..", "README.md")}
	for _, pattern := range []string{"*.md", "cli/*.md"} {
		more, err := filepath.Glob(filepath.Join("..", "..", "docs", pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, more...)
	}
	if len(files) < 10 {
		t.Fatalf("only %v: where is the manual?", files)
	}
	return files
}

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	fenceRE   = regexp.MustCompile("(?ms)^```([^\n]*)\n(.*?)^```")
)

// anchors are the anchors GitHub makes of a Markdown file's headings.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range headingRE.FindAllStringSubmatch(text, -1) {
		h := strings.ToLower(strings.TrimSpace(m[1]))
		var b strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out[b.String()] = true
	}
	return out
}

// Every relative link of the README and the manual leads to a file that
// is there, and to a heading it has.
func TestDocLinks(t *testing.T) {
	for _, f := range markdownFiles(t) {
		text := readFile(t, f)
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), path)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %s: %v", f, target, err)
					continue
				}
			}
			if anchor != "" && !anchors(readFile(t, dest))[anchor] {
				t.Errorf("%s: link %s: %s has no heading #%s", f, target, dest, anchor)
			}
		}
	}
}

// The README's and the manual's examples marked runnable still are: a
// ```jobs block parses as job lines, a ```yaml inventory block loads as an
// inventory.
func TestDocExamples(t *testing.T) {
	jobs, invs := 0, 0
	for _, f := range markdownFiles(t) {
		for i, m := range fenceRE.FindAllStringSubmatch(readFile(t, f), -1) {
			name := fmt.Sprintf("%s, block %d", f, i+1)
			switch strings.TrimSpace(m[1]) {
			case "jobs":
				jobs++
				bad, err := dispatch.Rejections(strings.NewReader(m[2]), name)
				if err != nil || len(bad) > 0 {
					t.Errorf("%s: %v %v", name, bad, err)
				}
			case "yaml inventory":
				invs++
				path := filepath.Join(t.TempDir(), "lab.yaml")
				os.WriteFile(path, []byte("ssh_config: none\n"+m[2]), 0o644)
				if _, err := inventory.Load(path); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
		}
	}
	if jobs < 3 || invs < 2 {
		t.Errorf("%d job blocks and %d inventory blocks checked: the README has more", jobs, invs)
	}
}

// Every option a job line knows is in run's help and in the job-line
// reference, so that a new one cannot go unlisted.
func TestEveryJobOptionListed(t *testing.T) {
	t.Parallel()
	cmd := newRunCommand(streams{in: &bytes.Buffer{}, out: &bytes.Buffer{}, err: &bytes.Buffer{}}, nil)
	ref, err := os.ReadFile(filepath.Join("..", "..", "docs", "job-lines.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range dispatch.OptionNames() {
		if !regexp.MustCompile(`(^|[\s\[])` + name + `=`).MatchString(cmd.Long) {
			t.Errorf("run --help does not list %s=", name)
		}
		if !strings.Contains(string(ref), "`"+name+"=") {
			t.Errorf("docs/job-lines.md does not list `%s=`", name)
		}
	}
}
