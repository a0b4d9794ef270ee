package dispatch

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kballard/go-shellquote"

	"github.com/gpudispatch/gpudispatch/inventory"
)

// MaxJobBytes is the longest job accepted. Linux passes the job to the shell
// as one argument, and one argument can hold at most 128 KiB.
const MaxJobBytes = 128*1024 - 1

// maxGPUsPerJob bounds gpus=N; no host has more.
const maxGPUsPerJob = 1024

// maxNodesPerJob bounds nodes=N.
const maxNodesPerJob = 1024

// LineError is a job line that was rejected; the other lines still run.
type LineError struct {
	// Job has Seq, File, Line and Text set; the rest may be empty.
	Job *Job
	Err error
}

func (e *LineError) Error() string { return e.Job.Where() + ": " + e.Err.Error() }
func (e *LineError) Unwrap() error { return e.Err }

// parser turns an input stream into jobs, one as soon as its last line has
// arrived, so that a job starts while later lines are still being written.
type parser struct {
	r    *bufio.Reader
	file string
	line int // lines read so far
	// seq and seen are shared by all inputs of a run.
	seq   *int
	seen  map[string]int
	names map[string]string // name= -> where it was first used
	// defaults apply to every job, under what its line says.
	defaults Defaults
}

func newParser(r io.Reader, file string, seq *int, seen map[string]int, names map[string]string) *parser {
	return &parser{r: bufio.NewReaderSize(r, 64*1024), file: file, seq: seq, seen: seen, names: names}
}

// readLine returns the next line without its newline (and without a
// trailing \r). A line longer than MaxJobBytes is read to its end but only
// its start is kept; long reports that. eof is set at end of input.
func (p *parser) readLine() (line []byte, long, eof bool, err error) {
	for {
		chunk, err := p.r.ReadSlice('\n')
		if len(line)+len(chunk) <= MaxJobBytes+2 {
			line = append(line, chunk...)
		} else {
			long = true
		}
		switch {
		case err == nil:
			p.line++
			line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
			return line, long, false, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(line) == 0 && !long {
				return nil, false, true, nil
			}
			p.line++
			return bytes.TrimSuffix(line, []byte("\r")), long, false, nil
		default:
			return nil, false, false, err
		}
	}
}

// continues reports whether a line ends in an unescaped backslash.
func continues(line []byte) bool {
	n := 0
	for i := len(line) - 1; i >= 0 && line[i] == '\\'; i-- {
		n++
	}
	return n%2 == 1
}

// NoJobs reports whether r holds no job line at all (only blank lines and
// comments), reading it to its first job line.
func NoJobs(r io.Reader) (bool, error) {
	seq := 0
	_, err := newParser(r, "", &seq, map[string]int{}, map[string]string{}).next()
	var le *LineError
	switch {
	case errors.Is(err, io.EOF):
		return true, nil
	case err == nil || errors.As(err, &le):
		return false, nil // a job, or a line that is one, if a bad one
	}
	return false, err
}

// Rejections parses the job lines r holds (named name in messages) and
// returns what is wrong with each line that no run would take, whatever
// its hosts: "name:N: why".
func Rejections(r io.Reader, name string) ([]string, error) {
	seq := 0
	p := newParser(r, name, &seq, map[string]int{}, map[string]string{})
	var out []string
	for {
		_, err := p.next()
		var le *LineError
		switch {
		case errors.Is(err, io.EOF):
			return out, nil
		case errors.As(err, &le):
			out = append(out, le.Error())
		case err != nil:
			return out, err
		}
	}
}

// next returns the next job, a *LineError for a rejected one, or io.EOF.
// Any other error is the input's own (a read failure).
func (p *parser) next() (*Job, error) {
	var text []byte
	first := 0
	tooLong := false
	for {
		line, long, eof, err := p.readLine()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where(p.file, p.line+1), err)
		}
		if eof {
			if text == nil {
				return nil, io.EOF
			}
			break // a continuation at end of input: run what there is
		}
		if text == nil {
			trimmed := bytes.TrimSpace(line)
			if len(trimmed) == 0 || trimmed[0] == '#' {
				continue
			}
			first = p.line
		} else {
			text = append(text, '\n')
		}
		tooLong = tooLong || long
		text = append(text, line...)
		if !continues(line) {
			break
		}
	}
	*p.seq++
	j := &Job{Seq: *p.seq, File: p.file, Line: first, Text: string(text), GPU: -1, GPUs: 1, Nodes: 1, PreferGPU: -1, Retries: -1}
	p.seen[j.Text]++
	j.Occurrence = p.seen[j.Text]
	if tooLong || len(text) > MaxJobBytes {
		j.Text = j.Text[:min(len(j.Text), 80)] + "..."
		return nil, &LineError{Job: j, Err: fmt.Errorf("job is longer than %d bytes, the most a shell accepts as one argument: put it in a script and run that", MaxJobBytes)}
	}
	if err := parseOptions(j, p.defaults.words()); err != nil {
		return nil, &LineError{Job: j, Err: err}
	}
	if err := parsePrefix(j); err != nil {
		return nil, &LineError{Job: j, Err: err}
	}
	if j.Host == "" {
		j.Host = p.defaults.Host
	}
	j.CallerEnv = p.defaults.Env
	if j.Name != "" {
		if prev, dup := p.names[j.Name]; dup {
			return nil, &LineError{Job: j, Err: fmt.Errorf("name=%s is already used at %s: names must be unique, they name the log files", j.Name, prev)}
		}
		p.names[j.Name] = j.Where()
	}
	return j, nil
}

// words are d as options of a job line, but for the host, which is
// applied after the line's own (a line's @HOST wins over it).
func (d Defaults) words() []string {
	var w []string
	if d.GPUs > 0 {
		w = append(w, "gpus="+strconv.Itoa(d.GPUs))
	}
	if d.Priority != 0 {
		w = append(w, "priority="+strconv.Itoa(d.Priority))
	}
	if d.Timeout > 0 {
		w = append(w, "timeout="+d.Timeout.String())
	}
	if d.Name != "" {
		w = append(w, "name="+d.Name)
	}
	if len(d.After) > 0 {
		w = append(w, "after="+strings.Join(d.After, ","))
	}
	return append(w, d.Kind.words()...)
}

// optionsRE matches a bracket prefix: only key=value words, so that a
// command starting with the test builtin ("[ -f x ] && ...") is no prefix.
// isOptions reports whether a line (after any @HOST) begins with a
// [key=value ...] prefix: a "[" followed by neither a blank nor "[", so
// that the shell's own "[ -f x ]" and "[[ ... ]]" stay commands.
func isOptions(rest string) bool {
	return len(rest) > 1 && rest[0] == '[' && !strings.ContainsRune(" \t\n[", rune(rest[1]))
}

// splitOptions splits the [key=value ...] prefix that begins rest into its
// words, a value quoted as in the shell ('a b', "a b", a\ b), and returns
// what follows it. The prefix ends at the first "]" outside quotes: the
// first one before which the words split whole.
func splitOptions(rest string) (words []string, after string, err error) {
	const hint = "a line that begins with [ starts a [key=value ...] prefix; quote a value as in the shell ([name='a b']), and put a blank after a [ that is the shell's test ([ -f x ])"
	for i := 1; i < len(rest); i++ {
		if rest[i] == '\n' {
			break
		}
		if rest[i] != ']' {
			continue
		}
		words, err := shellquote.Split(rest[1:i])
		if err != nil {
			continue // the ] is quoted or escaped
		}
		for _, w := range words {
			if !optionWordRE.MatchString(w) {
				return nil, "", fmt.Errorf("[%s]: want key=value: %s", w, hint)
			}
		}
		return words, rest[i+1:], nil
	}
	return nil, "", fmt.Errorf("no closing ] on the line (or a quote left open): %s", hint)
}

// optionWordRE is the form of one word of a [key=value ...] prefix.
var optionWordRE = regexp.MustCompile(`^[A-Za-z_]+=`)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]*$`)

// attemptRE matches the names that the logs of numbered jobs and of later
// attempts have: "12", "train.2" (not "lr0.1": a first attempt has no
// number).
var attemptRE = regexp.MustCompile(`^[0-9]+$|\.([2-9]|[1-9][0-9]+)$`)

// rankRE matches the names that the logs of a job's other parts have
// ([nodes=N]: ID.rank1.out, ID.2.rank1.out).
var rankRE = regexp.MustCompile(`\.rank[0-9]+$`)

// logDirSuffixRE matches the names of the files a log dir holds beside
// its jobs' directories (ID.out, ID.err, journal.jsonl, gpudispatch.lock,
// gpudispatch.sock).
var logDirSuffixRE = regexp.MustCompile(`\.(out|err|jsonl|lock|sock)$`)

// parsePrefix splits j.Text into its placement prefix and its command:
// "@HOST cmd", "@HOST:GPU cmd", "[key=value ...] cmd", or "@HOST [..] cmd".
func parsePrefix(j *Job) error {
	if strings.IndexByte(j.Text, 0) >= 0 {
		return errors.New("job contains a NUL byte, which no shell can receive")
	}
	rest := strings.TrimLeft(j.Text, " \t")
	if strings.HasPrefix(rest, "@") {
		end := strings.IndexAny(rest, " \t\n")
		if end < 0 {
			end = len(rest)
		}
		pin := rest[1:end]
		rest = strings.TrimLeft(rest[end:], " \t")
		host, gpu, hasGPU := strings.Cut(pin, ":")
		if host == "" {
			return fmt.Errorf("%q: want @HOST or @HOST:GPU before the command", "@"+pin)
		}
		j.Host = host
		if hasGPU {
			id, err := strconv.Atoi(gpu)
			if err != nil || id < 0 {
				return fmt.Errorf("@%s: GPU %q is not a GPU id (0, 1, ...)", pin, gpu)
			}
			j.GPU = id
		}
	}
	if isOptions(rest) {
		words, after, err := splitOptions(rest)
		if err != nil {
			return err
		}
		rest = strings.TrimLeft(after, " \t")
		if err := parseOptions(j, words); err != nil {
			return err
		}
		if isOptions(rest) {
			return errors.New("a second [key=value ...] prefix: put every option in one")
		}
	}
	if strings.TrimSpace(rest) == "" {
		return errors.New("no command after the placement prefix")
	}
	j.Command = rest
	return nil
}

func parseOptions(j *Job, words []string) error {
	for _, w := range words {
		key, val, _ := strings.Cut(w, "=")
		switch key {
		case "host":
			if val == "" || j.Host != "" && j.Host != val {
				return fmt.Errorf("[%s]: want one non-empty host", w)
			}
			j.Host = val
		case "gpu":
			id, err := strconv.Atoi(val)
			if err != nil || id < 0 {
				return fmt.Errorf("[%s]: want a GPU id (0, 1, ...)", w)
			}
			j.GPU = id
		case "gpus":
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 || n > maxGPUsPerJob {
				return fmt.Errorf("[%s]: want a number of GPUs from 1 to %d", w, maxGPUsPerJob)
			}
			j.GPUs = n
		case "nodes":
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 || n > maxNodesPerJob {
				return fmt.Errorf("[%s]: want a number of hosts from 1 to %d", w, maxNodesPerJob)
			}
			j.Nodes = n
		case "name":
			if !nameRE.MatchString(val) {
				return fmt.Errorf("[%s]: a name is letters, digits, '.', '_' and '-', not starting with '.' (it names the log files)", w)
			}
			// N.out is job number N's log, and ID.N.out that of attempt N
			// of job ID: a name must not look like either.
			if attemptRE.MatchString(val) {
				instead := strings.ReplaceAll(val, ".", "_")
				if instead == val {
					instead = "job" + val
				}
				return fmt.Errorf("[%s]: a name must not be a number, nor end in .N for a number N from 2 (ID.N.out is attempt N of job ID): write %s for instance", w, instead)
			}
			if rankRE.MatchString(val) {
				return fmt.Errorf("[%s]: a name must not end in .rankN (ID.rankN.out is part N of a job over several hosts): write %s for instance", w, strings.ReplaceAll(val, ".", "_"))
			}
			// A job's returned files go in LOGDIR/ID/: that directory
			// must not be a log or the log dir's own file.
			if logDirSuffixRE.MatchString(val) {
				return fmt.Errorf("[%s]: a name must not end in .out, .err, .jsonl, .lock or .sock (the log dir's files: logs, journal, lock, socket; its returned files go in a directory named as the job): write %s for instance", w, strings.ReplaceAll(val, ".", "_"))
			}
			j.Name = val
		case "retries":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 || n > MaxRetries {
				return fmt.Errorf("[%s]: want how many times a job that fails is run again, from 0 to %d", w, MaxRetries)
			}
			j.Retries = n
		case "timeout":
			d, err := parseTimeout(val)
			if err != nil {
				return fmt.Errorf("[%s]: %w", w, err)
			}
			j.Timeout = d
		case "priority":
			n, err := strconv.Atoi(val)
			if err != nil || n < -maxPriority || n > maxPriority {
				return fmt.Errorf("[%s]: want a whole number from %d to %d (higher runs first, default 0)", w, -maxPriority, maxPriority)
			}
			j.Priority = n
		case "prefer":
			host, gpu, hasGPU := strings.Cut(val, ":")
			if host == "" {
				return fmt.Errorf("[%s]: want prefer=HOST or prefer=HOST:GPU", w)
			}
			j.Prefer = host
			if hasGPU {
				id, err := strconv.Atoi(gpu)
				if err != nil || id < 0 {
					return fmt.Errorf("[%s]: GPU %q is not a GPU id (0, 1, ...)", w, gpu)
				}
				j.PreferGPU = id
			}
		case "mem":
			mb, err := inventory.ParseMem(val)
			if err != nil {
				return fmt.Errorf("[%s]: %w", w, err)
			}
			j.MemMB = mb
		case "model":
			j.Models = nil
			for _, m := range strings.Split(val, "|") {
				if m = strings.TrimSpace(m); m == "" || strings.ContainsAny(m, ",[]") {
					return fmt.Errorf("[%s]: want GPU models as nvidia-smi names them, or a part of the name, separated by | (model=A100|H100, model=\"RTX 4090\")", w)
				}
				j.Models = append(j.Models, m)
			}
		case "vram":
			mb, err := inventory.ParseMem(val)
			if err != nil {
				return fmt.Errorf("[%s]: %w", w, err)
			}
			j.VRAMMB = mb
		case "tags":
			j.Tags = nil
			for _, tag := range strings.Split(val, ",") {
				if !inventory.ValidTag(tag) {
					return fmt.Errorf("[%s]: want tags (letters, digits, '.', '_' and '-') separated by commas", w)
				}
				j.Tags = append(j.Tags, tag)
			}
		case "after", "after_any":
			var ids []string
			for _, id := range strings.Split(val, ",") {
				if !depIDRE.MatchString(id) {
					return fmt.Errorf("[%s]: want job numbers, names or globs over names (train_*), separated by commas", w)
				}
				ids = append(ids, id)
			}
			if key == "after" {
				j.After = ids
			} else {
				j.AfterAny = ids
			}
		case "return":
			j.Return = nil
			for _, p := range strings.Split(val, ",") {
				if err := inventory.CheckReturn(p); err != nil {
					return fmt.Errorf("[%s]: %w", w, err)
				}
				j.Return = append(j.Return, p)
			}
		case "conda":
			if val == "" {
				return fmt.Errorf("[%s]: want the name (or path) of a conda env", w)
			}
			j.Conda = val
		default:
			return fmt.Errorf("[%s]: unknown option %q (known: %s)", w, key, strings.Join(optionNames, ", "))
		}
	}
	if j.GPU >= 0 && j.GPUs > 1 {
		return fmt.Errorf("gpu=%d and gpus=%d: pin one GPU or ask for several, not both", j.GPU, j.GPUs)
	}
	if j.Nodes > 1 {
		// One job over several hosts: each part is placed by the
		// scheduler, in a place the options of one host cannot name.
		switch {
		case j.GPU >= 0:
			return fmt.Errorf("gpu=%d and nodes=%d: a job over several hosts cannot pin a GPU (gpus= says how many on each)", j.GPU, j.Nodes)
		case j.Prefer != "":
			return fmt.Errorf("prefer=%s and nodes=%d: a job over several hosts goes where its hosts are free together", j.Prefer, j.Nodes)
		case j.MemMB > 0:
			return fmt.Errorf("mem= and nodes=%d: a job over several hosts takes whole GPUs (gpus= on each host)", j.Nodes)
		}
	}
	return nil
}

// optionNames are the keys a [key=value ...] prefix knows.
var optionNames = []string{"host", "gpu", "gpus", "nodes", "name", "timeout", "priority", "prefer", "conda", "return", "after", "after_any", "mem", "model", "vram", "tags", "retries"}

// OptionNames are the keys of a job line's [key=value ...] prefix.
func OptionNames() []string { return slices.Clone(optionNames) }

// MaxRetries is the most times a job that fails may be run again.
const MaxRetries = 100

// depIDRE is the form of an ID of after= and after_any=: a number, a name,
// or a glob over names.
var depIDRE = regexp.MustCompile(`^[A-Za-z0-9_*?\[][A-Za-z0-9._*?\[\]!-]*$`)

// maxPriority bounds priority=N either way.
const maxPriority = 1_000_000

// parseTimeout accepts a Go duration ("90m", "1h30m") or whole seconds.
func parseTimeout(s string) (time.Duration, error) {
	if n, err := strconv.Atoi(s); err == nil && n > 0 {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, errors.New("want a duration such as 90s, 30m or 2h")
	}
	return d, nil
}
