package sweep

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Args is a sweep command line, parsed.
type Args struct {
	Template string
	Params   []Param
	Options  Options
	// Help is set by -h or --help.
	Help bool
}

// ParseArgs reads the arguments of `gpudispatch sweep`:
//
//	TEMPLATE -p NAME V... [-p NAME V...] [--samples N] [--seed S] [--ordered]
//
// with simple_hypersearch's spellings too: --parameter for -p, --n-samples
// for --samples, --sampling-mode grid|shuffled_grid. A -p takes every
// argument up to the next option as a value, so values may start with '-'
// ("-1") as long as they are not one of the option names; "--" ends the
// options, and what follows are values of the last -p.
func ParseArgs(args []string) (Args, error) {
	var a Args
	var cur *Param
	gotTemplate := false
	for i := 0; i < len(args); i++ {
		arg := args[i]
		name, value, hasValue := strings.Cut(arg, "=")
		if !strings.HasPrefix(arg, "--") {
			name, hasValue = arg, false
		}
		// value returns the option's argument: after "=" or the next word.
		next := func() (string, error) {
			if hasValue {
				return value, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", name)
			}
			i++
			return args[i], nil
		}
		switch name {
		case "--":
			for _, v := range args[i+1:] {
				switch {
				case !gotTemplate:
					a.Template, gotTemplate = v, true
				case cur == nil:
					return a, fmt.Errorf("%q after --: a value needs a -p NAME before it", v)
				default:
					cur.Values = append(cur.Values, v)
				}
			}
			i = len(args)
		case "-h", "--help":
			a.Help = true
		case "-p", "--parameter":
			n, err := next()
			if err != nil {
				return a, err
			}
			a.Params = append(a.Params, Param{Name: n})
			cur = &a.Params[len(a.Params)-1]
		case "--samples", "--n-samples", "-n":
			v, err := next()
			if err != nil {
				return a, err
			}
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return a, fmt.Errorf("%s %q: want a positive number", name, v)
			}
			a.Options.Samples = n
		case "--seed":
			v, err := next()
			if err != nil {
				return a, err
			}
			s, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return a, fmt.Errorf("--seed %q: want a number 0 or more", v)
			}
			a.Options.Seed, a.Options.Seeded = s, true
		case "--ordered":
			a.Options.Ordered = true
		case "--sampling-mode":
			v, err := next()
			if err != nil {
				return a, err
			}
			switch v {
			case "grid":
				a.Options.Ordered = true
			case "shuffled_grid":
				a.Options.Ordered = false
			default:
				return a, fmt.Errorf("--sampling-mode %q: want grid or shuffled_grid", v)
			}
		default:
			switch {
			case cur != nil:
				// After a -p, every other word is one of its values.
				cur.Values = append(cur.Values, arg)
			case !gotTemplate && !strings.HasPrefix(arg, "-"):
				a.Template, gotTemplate = arg, true
			case !gotTemplate:
				return a, fmt.Errorf("unknown option %s", arg)
			default:
				return a, fmt.Errorf("%q: a value needs a -p NAME before it (the template is %q)", arg, a.Template)
			}
		}
	}
	if a.Help {
		return a, nil
	}
	if !gotTemplate {
		// The template may be the last value a -p took.
		for _, p := range a.Params {
			if last := p.Values; len(last) > 0 && strings.ContainsAny(last[len(last)-1], "{ ") {
				return a, fmt.Errorf("no template: -p %s took every word after it, %q too; put the template first (gpudispatch sweep TEMPLATE -p NAME V1 V2 ...), or end the values with --", p.Name, last[len(last)-1])
			}
		}
		return a, errors.New("no template: gpudispatch sweep TEMPLATE -p NAME V1 V2 ...")
	}
	return a, nil
}
