package sweep

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"

	"al.essio.dev/pkg/shellescape"
)

// Param is one -p NAME V1 V2 ...
type Param struct {
	Name   string
	Values []string
}

// Options choose which configurations are printed, and in what order.
type Options struct {
	// Samples is how many distinct configurations to print, drawn
	// uniformly; 0 (or more than the grid has) means all of them.
	Samples int
	// Ordered prints in grid order (the last parameter varies fastest)
	// instead of a random order.
	Ordered bool
	// Seed fixes the random order and draw when Seeded is set.
	Seed   uint64
	Seeded bool
}

// MaxShuffled is the largest grid printed whole in random order: its
// permutation is held in memory. Larger grids need Samples or Ordered.
const MaxShuffled = 1 << 26

// placeholderRE finds {NAME}; ${NAME} is the shell's and is left alone.
var placeholderRE = regexp.MustCompile(`\$?\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// Template is a command with {NAME} placeholders, checked against the
// parameters it is expanded with.
type Template struct {
	// parts alternates literal text and parameter indexes: literal[i] comes
	// before the value of param[i]; the last literal ends the line.
	literal []string
	param   []int
	params  []Param
}

// Compile checks that every placeholder of text has a parameter and that the
// parameters have names that differ and at least one value each. Unused
// lists the parameters the template does not mention (each of their values
// repeats every command).
func Compile(text string, params []Param) (t *Template, unused []string, err error) {
	if strings.ContainsAny(text, "\n\x00") {
		return nil, nil, errors.New("template: a job is one line: no newline or NUL")
	}
	if strings.HasSuffix(text, "\\") {
		return nil, nil, errors.New("template: a line that ends in a backslash continues on the next one")
	}
	index := map[string]int{}
	for i, p := range params {
		if _, dup := index[p.Name]; dup {
			return nil, nil, fmt.Errorf("-p %s given twice", p.Name)
		}
		if !placeholderRE.MatchString("{" + p.Name + "}") {
			return nil, nil, fmt.Errorf("-p %q: a name is letters, digits and _, not starting with a digit", p.Name)
		}
		if len(p.Values) == 0 {
			return nil, nil, fmt.Errorf("-p %s has no values", p.Name)
		}
		for _, v := range p.Values {
			if strings.ContainsAny(v, "\n\r\x00") {
				return nil, nil, fmt.Errorf("-p %s: value %q: a job is one line: no newline or NUL", p.Name, v)
			}
		}
		index[p.Name] = i
	}
	t = &Template{params: params}
	used := make([]bool, len(params))
	last := 0
	for _, m := range placeholderRE.FindAllStringSubmatchIndex(text, -1) {
		if text[m[0]] == '$' {
			continue
		}
		name := text[m[2]:m[3]]
		i, ok := index[name]
		if !ok {
			return nil, nil, fmt.Errorf("template: {%s} has no -p %s", name, name)
		}
		used[i] = true
		t.literal = append(t.literal, text[last:m[0]])
		t.param = append(t.param, i)
		last = m[1]
	}
	t.literal = append(t.literal, text[last:])
	for i, u := range used {
		if !u {
			unused = append(unused, params[i].Name)
		}
	}
	return t, unused, nil
}

// Size is the number of configurations in the grid, or an error when it
// does not fit in an int.
func (t *Template) Size() (int, error) {
	n := 1
	for _, p := range t.params {
		if n > math.MaxInt/len(p.Values) {
			return 0, fmt.Errorf("the grid has more than %d configurations", math.MaxInt)
		}
		n *= len(p.Values)
	}
	return n, nil
}

// Line is the command for configuration k of the grid (0 ≤ k < Size).
func (t *Template) Line(k int) string {
	choice := make([]int, len(t.params))
	for i := len(t.params) - 1; i >= 0; i-- {
		n := len(t.params[i].Values)
		choice[i] = k % n
		k /= n
	}
	var b strings.Builder
	for i, lit := range t.literal[:len(t.param)] {
		b.WriteString(lit)
		p := t.params[t.param[i]]
		b.WriteString(shellescape.Quote(p.Values[choice[t.param[i]]]))
	}
	b.WriteString(t.literal[len(t.literal)-1])
	return b.String()
}

// Order yields the grid indexes of the configurations to print, in the
// order to print them.
func (t *Template) Order(o Options) (iter.Seq[int], error) {
	size, err := t.Size()
	if err != nil {
		return nil, err
	}
	if o.Samples < 0 {
		return nil, fmt.Errorf("--samples %d: want a positive number", o.Samples)
	}
	seed := o.Seed
	if !o.Seeded {
		seed = rand.Uint64()
	}
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	n := size
	if o.Samples > 0 && o.Samples < size {
		n = o.Samples
	}
	var order []int
	switch {
	case n == size && o.Ordered:
		return func(yield func(int) bool) {
			for k := 0; k < size && yield(k); k++ {
			}
		}, nil
	case n == size && size > MaxShuffled:
		return nil, fmt.Errorf("the grid has %d configurations, too many to print in random order: use --samples N or --ordered", size)
	case n == size:
		order = rng.Perm(size)
	default:
		// Floyd: n distinct numbers below size, each subset equally likely.
		chosen := make(map[int]bool, n)
		for j := size - n; j < size; j++ {
			k := rng.IntN(j + 1)
			if chosen[k] {
				k = j
			}
			chosen[k] = true
			order = append(order, k)
		}
		if o.Ordered {
			slices.Sort(order)
		} else {
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
	}
	return slices.Values(order), nil
}

// Write prints the chosen configurations, one command per line.
func (t *Template) Write(w io.Writer, o Options) error {
	order, err := t.Order(o)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	for k := range order {
		bw.WriteString(t.Line(k))
		if err := bw.WriteByte('\n'); err != nil {
			return err
		}
	}
	return bw.Flush()
}
