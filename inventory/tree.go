package inventory

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"

	toml "github.com/pelletier/go-toml/v2"
	yaml "go.yaml.in/yaml/v3"
)

// node is a decoded value with where it stood. Exactly one of the kinds is
// set: a mapping (keys/vals), a sequence (items) or a scalar.
type node struct {
	line int // 0 when the format gives no lines (TOML)

	isMap bool
	keys  []string
	kline []int
	vals  []*node

	isSeq bool
	items []*node

	// scalar: text as written, and its type
	text string
	typ  scalarType
}

type scalarType int

const (
	tNull scalarType = iota
	tString
	tInt
	tFloat
	tBool
)

func (n *node) describe() string {
	switch {
	case n.isMap:
		return "a mapping"
	case n.isSeq:
		return "a list"
	}
	switch n.typ {
	case tString:
		return fmt.Sprintf("the string %q", n.text)
	case tInt, tFloat:
		return "the number " + n.text
	case tBool:
		return n.text
	}
	return "nothing"
}

// decode turns a file's bytes into a tree. format is "yaml", "json" or "toml".
func decode(data []byte, format string) (*node, error) {
	switch format {
	case "yaml", "json":
		if format == "json" {
			// Report JSON syntax errors as JSON does, with a line.
			var v any
			if err := json.Unmarshal(data, &v); err != nil {
				return nil, jsonError(data, err)
			}
		}
		var doc yaml.Node
		if err := yaml.Unmarshal(data, &doc); err != nil {
			return nil, err
		}
		if len(doc.Content) == 0 {
			return &node{isMap: true}, nil
		}
		budget := maxNodes
		return fromYAML(doc.Content[0], &budget)
	case "toml":
		var v map[string]any
		if err := toml.Unmarshal(data, &v); err != nil {
			var de *toml.DecodeError
			if errors.As(err, &de) {
				row, _ := de.Position()
				return nil, &lineError{line: row, err: err}
			}
			return nil, err
		}
		return fromValue(v), nil
	}
	return nil, fmt.Errorf("unknown format %q", format)
}

// lineError is a syntax error that knows its line.
type lineError struct {
	line int
	err  error
}

func (e *lineError) Error() string { return e.err.Error() }
func (e *lineError) Unwrap() error { return e.err }

func jsonError(data []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return &lineError{line: 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte{'\n'}), err: err}
	}
	return err
}

// maxNodes bounds the values a file may expand to: YAML aliases can make a
// small file mean billions of values.
const maxNodes = 100_000

func fromYAML(y *yaml.Node, budget *int) (*node, error) {
	if *budget--; *budget < 0 {
		return nil, &lineError{line: y.Line, err: fmt.Errorf("more than %d values (YAML aliases expand too far)", maxNodes)}
	}
	n := &node{line: y.Line}
	switch y.Kind {
	case yaml.AliasNode:
		return fromYAML(y.Alias, budget)
	case yaml.MappingNode:
		n.isMap = true
		for i := 0; i+1 < len(y.Content); i += 2 {
			k, v := y.Content[i], y.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return nil, &lineError{line: k.Line, err: fmt.Errorf("a key must be a plain word")}
			}
			if k.Tag == "!!merge" {
				return nil, &lineError{line: k.Line, err: fmt.Errorf("merge keys (<<) are not supported")}
			}
			val, err := fromYAML(v, budget)
			if err != nil {
				return nil, err
			}
			n.keys = append(n.keys, k.Value)
			n.kline = append(n.kline, k.Line)
			n.vals = append(n.vals, val)
		}
	case yaml.SequenceNode:
		n.isSeq = true
		for _, c := range y.Content {
			item, err := fromYAML(c, budget)
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, item)
		}
	case yaml.ScalarNode:
		n.text = y.Value
		switch y.ShortTag() {
		case "!!null":
			n.typ = tNull
		case "!!int":
			n.typ = tInt
		case "!!float":
			n.typ = tFloat
		case "!!bool":
			n.typ = tBool
		default:
			n.typ = tString
		}
	default:
		return nil, &lineError{line: y.Line, err: fmt.Errorf("unsupported YAML node")}
	}
	return n, nil
}

func fromValue(v any) *node {
	switch v := v.(type) {
	case map[string]any:
		n := &node{isMap: true}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys) // TOML tables are unordered once decoded
		for _, k := range keys {
			n.keys = append(n.keys, k)
			n.kline = append(n.kline, 0)
			n.vals = append(n.vals, fromValue(v[k]))
		}
		return n
	case []any:
		n := &node{isSeq: true}
		for _, item := range v {
			n.items = append(n.items, fromValue(item))
		}
		return n
	case string:
		return &node{typ: tString, text: v}
	case int64:
		return &node{typ: tInt, text: strconv.FormatInt(v, 10)}
	case float64:
		return &node{typ: tFloat, text: strconv.FormatFloat(v, 'g', -1, 64)}
	case bool:
		return &node{typ: tBool, text: strconv.FormatBool(v)}
	case nil:
		return &node{typ: tNull}
	}
	// Dates and times: TOML has them, the inventory has no use for them.
	return &node{typ: tString, text: fmt.Sprint(v)}
}
