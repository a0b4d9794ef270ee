package sweep

import (
	"bytes"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

func compile(t *testing.T, template string, params ...Param) *Template {
	t.Helper()
	tpl, _, err := Compile(template, params)
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}

func lines(t *testing.T, tpl *Template, o Options) []string {
	t.Helper()
	var b bytes.Buffer
	if err := tpl.Write(&b, o); err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
}

var lrBS = []Param{{"lr", []string{"1e-3", "1e-4", "1e-5"}}, {"bs", []string{"32", "64", "128", "256"}}}

func TestCompileErrors(t *testing.T) {
	for _, tc := range []struct {
		template string
		params   []Param
		want     string
	}{
		{"train {lr}", nil, "{lr} has no -p lr"},
		{"train {lr}", []Param{{"lr", nil}}, "-p lr has no values"},
		{"train {lr}", []Param{{"lr", []string{"1"}}, {"lr", []string{"2"}}}, "-p lr given twice"},
		{"train", []Param{{"1x", []string{"1"}}}, `-p "1x"`},
		{"train\n{lr}", []Param{{"lr", []string{"1"}}}, "no newline"},
		{"train {lr}", []Param{{"lr", []string{"1\n2"}}}, `value "1\n2"`},
		{"train {lr} \\", []Param{{"lr", []string{"1"}}}, "ends in a backslash"},
	} {
		_, _, err := Compile(tc.template, tc.params)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Compile(%q, %v) = %v, want an error with %q", tc.template, tc.params, err, tc.want)
		}
	}
}

func TestUnusedParameter(t *testing.T) {
	_, unused, err := Compile("train {lr}", []Param{{"lr", []string{"1"}}, {"rep", []string{"1", "2"}}})
	if err != nil || !slices.Equal(unused, []string{"rep"}) {
		t.Errorf("unused = %v, %v; want [rep]", unused, err)
	}
}

// Values reach the job as one word each, byte for byte, whatever they hold;
// the shell's own ${VAR} is left for the shell.
func TestLineQuoting(t *testing.T) {
	values := []string{"plain", "a b", "it's", `"dq"`, "$HOME", "", "x;rm -rf y", "ünï", `back\slash`, "*"}
	tpl := compile(t, `printf '<%s>' {v} "${HOME}" {v}`, Param{"v", values})
	for k, v := range values {
		line := tpl.Line(k)
		out, err := exec.Command("sh", "-c", line).Output()
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		// HOME comes from the test's environment; compare only our value.
		got := strings.Split(strings.TrimSuffix(strings.TrimPrefix(string(out), "<"), ">"), "><")
		if len(got) != 3 || got[0] != v || got[2] != v {
			t.Errorf("value %q: line %s printed %q", v, line, out)
		}
	}
	if got := tpl.Line(0); got != `printf '<%s>' plain "${HOME}" plain` {
		t.Errorf("a plain word is not quoted: %s", got)
	}
}

func TestGridCountsAndOrder(t *testing.T) {
	tpl := compile(t, "train --lr {lr} --bs {bs}", lrBS...)
	for _, tc := range []struct {
		name string
		o    Options
		want int
	}{
		{"all shuffled", Options{}, 12},
		{"all ordered", Options{Ordered: true}, 12},
		{"sample", Options{Samples: 5}, 5},
		{"sample ordered", Options{Samples: 5, Ordered: true}, 5},
		{"sample more than the grid", Options{Samples: 100}, 12},
		{"sample all", Options{Samples: 12, Seed: 3, Seeded: true}, 12},
	} {
		got := lines(t, tpl, tc.o)
		distinct := map[string]bool{}
		for _, l := range got {
			distinct[l] = true
		}
		if len(got) != tc.want || len(distinct) != tc.want {
			t.Errorf("%s: %d lines, %d distinct; want %d", tc.name, len(got), len(distinct), tc.want)
		}
		if tc.o.Ordered {
			sorted := slices.Clone(got)
			slices.SortFunc(sorted, func(a, b string) int { return gridIndex(a) - gridIndex(b) })
			if !slices.Equal(got, sorted) {
				t.Errorf("%s: not in grid order: %q", tc.name, got)
			}
		}
	}
	ordered := lines(t, tpl, Options{Ordered: true})
	if ordered[0] != "train --lr 1e-3 --bs 32" || ordered[1] != "train --lr 1e-3 --bs 64" || ordered[4] != "train --lr 1e-4 --bs 32" {
		t.Errorf("the last -p must vary fastest: %q", ordered[:5])
	}
}

// gridIndex reads back a line of the lr×bs grid's position.
func gridIndex(line string) int {
	var lr, bs string
	fmt.Sscanf(line, "train --lr %s --bs %s", &lr, &bs)
	return slices.Index(lrBS[0].Values, lr)*4 + slices.Index(lrBS[1].Values, bs)
}

func TestSeedReproducible(t *testing.T) {
	tpl := compile(t, "train --lr {lr} --bs {bs}", lrBS...)
	for _, o := range []Options{{Seed: 7, Seeded: true}, {Seed: 7, Seeded: true, Samples: 4}} {
		a, b := lines(t, tpl, o), lines(t, tpl, o)
		if !slices.Equal(a, b) {
			t.Errorf("%+v: two runs differ:\n%q\n%q", o, a, b)
		}
		o.Seed = 8
		if c := lines(t, tpl, o); slices.Equal(a, c) {
			t.Errorf("seeds 7 and 8 give the same order %q", a)
		}
	}
}

// Each configuration is as likely as any other to be drawn: 4000 draws of
// one out of four land on each about 1000 times (σ ≈ 27; the bounds are
// more than 7σ away).
func TestSamplesUniform(t *testing.T) {
	tpl := compile(t, "x {a}", Param{"a", []string{"0", "1", "2", "3"}})
	counts := map[string]int{}
	for seed := range uint64(4000) {
		counts[lines(t, tpl, Options{Samples: 1, Seed: seed, Seeded: true})[0]]++
	}
	for v, n := range counts {
		if n < 800 || n > 1200 {
			t.Errorf("%s drawn %d times of 4000: %v", v, n, counts)
		}
	}
	if len(counts) != 4 {
		t.Errorf("draws: %v", counts)
	}
}

// A sample of a huge grid is drawn without building the grid.
func TestHugeGrid(t *testing.T) {
	var params []Param
	for i := range 12 {
		params = append(params, Param{fmt.Sprintf("p%d", i), strings.Fields("0 1 2 3 4 5 6 7 8 9")})
	}
	tpl := compile(t, "x {p0} {p11}", params...)
	if got := lines(t, tpl, Options{Samples: 3}); len(got) != 3 {
		t.Errorf("3 samples of 10^12: %q", got)
	}
	var b bytes.Buffer
	if err := tpl.Write(&b, Options{}); err == nil || !strings.Contains(err.Error(), "--samples") {
		t.Errorf("shuffling 10^12 configurations: %v, want a hint at --samples", err)
	}
}

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want Args
		err  string
	}{
		{args: strings.Fields("t{a} -p a 1 2 -p b -1 x --seed 3 --ordered"),
			want: Args{Template: "t{a}", Params: []Param{{"a", []string{"1", "2"}}, {"b", []string{"-1", "x"}}},
				Options: Options{Seed: 3, Seeded: true, Ordered: true}}},
		{args: strings.Fields("t --parameter a 1 --n-samples 2 --sampling-mode shuffled_grid"),
			want: Args{Template: "t", Params: []Param{{"a", []string{"1"}}}, Options: Options{Samples: 2}}},
		{args: strings.Fields("t -p a 1 --samples=4 --sampling-mode=grid"),
			want: Args{Template: "t", Params: []Param{{"a", []string{"1"}}}, Options: Options{Samples: 4, Ordered: true}}},
		{args: strings.Fields("t -p a 1 -- --seed -p"),
			want: Args{Template: "t", Params: []Param{{"a", []string{"1", "--seed", "-p"}}}}},
		{args: strings.Fields("-- -t -p a 1"), want: Args{Template: "-t"}, err: `"-p" after --`},
		{args: strings.Fields("--help"), want: Args{Help: true}},
		{args: strings.Fields("-p a 1"), err: "no template"},
		{args: []string{"-p", "lr", "1", "2", "python t.py --lr {lr}"}, err: `no template: -p lr took every word after it, "python t.py --lr {lr}" too`},
		{args: strings.Fields("t 1"), err: "needs a -p NAME"},
		{args: strings.Fields("t -p"), err: "-p needs a value"},
		{args: strings.Fields("t -p a 1 --samples 0"), err: "want a positive number"},
		{args: strings.Fields("t -p a 1 --seed -3"), err: "--seed"},
		{args: strings.Fields("t -p a 1 --sampling-mode random"), err: "grid or shuffled_grid"},
		{args: strings.Fields("--bogus t"), err: "unknown option --bogus"},
	} {
		got, err := ParseArgs(tc.args)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%q:\n got %+v, %v\nwant %+v", tc.args, got, err, tc.want)
		}
	}
}

// Any command line either fails to parse or prints as many distinct lines
// as it asks for.
func FuzzSweep(f *testing.F) {
	for _, seed := range []string{
		"t{a} -p a 1 2 -p b -1 x --seed 3 --ordered",
		"python train.py --lr {lr} -p lr 1e-3 1e-4 --samples 1",
		"{a}{a}${a} -p a '' \" -- -p",
		"x -p a 1 --n-samples 3 --sampling-mode grid",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		a, err := ParseArgs(strings.Split(line, " "))
		if err != nil || a.Help {
			return
		}
		tpl, unused, err := Compile(a.Template, a.Params)
		if err != nil {
			return
		}
		size, err := tpl.Size()
		if err != nil || size > 1000 {
			return
		}
		var b bytes.Buffer
		if err := tpl.Write(&b, a.Options); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		want := size
		if a.Options.Samples > 0 {
			want = min(size, a.Options.Samples)
		}
		got := strings.Count(b.String(), "\n")
		distinct := map[string]bool{}
		for _, l := range strings.SplitAfter(b.String(), "\n") {
			distinct[l] = true
		}
		if got != want {
			t.Fatalf("%q: %d lines, want %d", line, got, want)
		}
		// Lines repeat only through parameters the template does not use.
		if len(unused) == 0 && len(distinct)-1 != want && !duplicateValues(a.Params) {
			t.Fatalf("%q: %d distinct lines of %d", line, len(distinct)-1, want)
		}
	})
}

func duplicateValues(ps []Param) bool {
	for _, p := range ps {
		seen := map[string]bool{}
		for _, v := range p.Values {
			if seen[v] {
				return true
			}
			seen[v] = true
		}
	}
	return false
}
