package dispatch

import (
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

// parseAll reads every job and rejection from input.
func parseAll(t testing.TB, input string) (jobs []*Job, rejected []*LineError) {
	t.Helper()
	seq := 0
	p := newParser(strings.NewReader(input), "cmds.txt", &seq, map[string]int{}, map[string]string{})
	for {
		j, err := p.next()
		if errors.Is(err, io.EOF) {
			return jobs, rejected
		}
		var le *LineError
		switch {
		case errors.As(err, &le):
			rejected = append(rejected, le)
		case err != nil:
			t.Fatalf("next: %v", err)
		default:
			jobs = append(jobs, j)
		}
	}
}

func TestParseJobs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		input string
		want  []Job // fields compared: Seq, Line, Command, Host, GPU, GPUs, Name, Timeout, Text, Occurrence
	}{
		{name: "plain", input: "python train.py --lr 0.1\n",
			want: []Job{{Seq: 1, Line: 1, Command: "python train.py --lr 0.1", Text: "python train.py --lr 0.1", GPU: -1, GPUs: 1, Occurrence: 1}}},
		{name: "no final newline, CRLF", input: "a\r\nb",
			want: []Job{{Seq: 1, Line: 1, Command: "a", Text: "a", GPU: -1, GPUs: 1, Occurrence: 1}, {Seq: 2, Line: 2, Command: "b", Text: "b", GPU: -1, GPUs: 1, Occurrence: 1}}},
		{name: "comments and blanks", input: "# sweep\n\n   \n  # indented comment\necho hi # trailing comment stays\n",
			want: []Job{{Seq: 1, Line: 5, Command: "echo hi # trailing comment stays", Text: "echo hi # trailing comment stays", GPU: -1, GPUs: 1, Occurrence: 1}}},
		{name: "continuation", input: "python train.py \\\n  --lr 0.1 \\\n  --bs 32\necho next\n",
			want: []Job{
				{Seq: 1, Line: 1, Command: "python train.py \\\n  --lr 0.1 \\\n  --bs 32", Text: "python train.py \\\n  --lr 0.1 \\\n  --bs 32", GPU: -1, GPUs: 1, Occurrence: 1},
				{Seq: 2, Line: 4, Command: "echo next", Text: "echo next", GPU: -1, GPUs: 1, Occurrence: 1}}},
		{name: "escaped backslash does not continue", input: "echo a \\\\\necho b\n",
			want: []Job{{Seq: 1, Line: 1, Command: "echo a \\\\", Text: "echo a \\\\", GPU: -1, GPUs: 1, Occurrence: 1}, {Seq: 2, Line: 2, Command: "echo b", Text: "echo b", GPU: -1, GPUs: 1, Occurrence: 1}}},
		{name: "pin host", input: "@node1 python a.py\n",
			want: []Job{{Seq: 1, Line: 1, Host: "node1", Command: "python a.py", Text: "@node1 python a.py", GPU: -1, GPUs: 1, Occurrence: 1}}},
		{name: "a name with a decimal point", input: "[name=lr0.1] x\n",
			want: []Job{{Seq: 1, Line: 1, Name: "lr0.1", Command: "x", Text: "[name=lr0.1] x", GPU: -1, GPUs: 1, Occurrence: 1}}},
		{name: "pin host and GPU", input: "@Node-2:3 python a.py\n",
			want: []Job{{Seq: 1, Line: 1, Host: "Node-2", GPU: 3, Command: "python a.py", Text: "@Node-2:3 python a.py", GPUs: 1, Occurrence: 1}}},
		{name: "options", input: "[host=n1 gpus=2 name=run-7 timeout=90m] python a.py\n",
			want: []Job{{Seq: 1, Line: 1, Host: "n1", GPU: -1, GPUs: 2, Name: "run-7", Timeout: 90 * time.Minute, Command: "python a.py", Text: "[host=n1 gpus=2 name=run-7 timeout=90m] python a.py", Occurrence: 1}}},
		{name: "timeout in seconds, gpu pin", input: "[timeout=30 host=n1 gpu=1] x\n",
			want: []Job{{Seq: 1, Line: 1, Host: "n1", GPU: 1, GPUs: 1, Timeout: 30 * time.Second, Command: "x", Text: "[timeout=30 host=n1 gpu=1] x", Occurrence: 1}}},
		{name: "quoted values", input: "[name='lr1e-2_sgd' host=\"n1\" timeout=9\\0] x\n",
			want: []Job{{Seq: 1, Line: 1, Host: "n1", GPU: -1, GPUs: 1, Name: "lr1e-2_sgd", Timeout: 90 * time.Second, Command: "x", Text: "[name='lr1e-2_sgd' host=\"n1\" timeout=9\\0] x", Occurrence: 1}}},
		{name: "a ] in quotes is the value's", input: "[host='a]b'] x ]\n",
			want: []Job{{Seq: 1, Line: 1, Host: "a]b", GPU: -1, GPUs: 1, Command: "x ]", Text: "[host='a]b'] x ]", Occurrence: 1}}},
		{name: "the shell's test commands", input: "[ -f x ] && y\n[[ -d d ]] || z\n",
			want: []Job{{Seq: 1, Line: 1, Command: "[ -f x ] && y", Text: "[ -f x ] && y", GPU: -1, GPUs: 1, Occurrence: 1},
				{Seq: 2, Line: 2, Command: "[[ -d d ]] || z", Text: "[[ -d d ]] || z", GPU: -1, GPUs: 1, Occurrence: 1}}},
		{name: "pin and options", input: "@n1 [gpus=2] x\n",
			want: []Job{{Seq: 1, Line: 1, Host: "n1", GPU: -1, GPUs: 2, Command: "x", Text: "@n1 [gpus=2] x", Occurrence: 1}}},
		{name: "conda env", input: "[conda=torch-2.1] python t.py\n[conda='/opt/envs/my env'] x\n",
			want: []Job{
				{Seq: 1, Line: 1, GPU: -1, GPUs: 1, Conda: "torch-2.1", Command: "python t.py", Text: "[conda=torch-2.1] python t.py", Occurrence: 1},
				{Seq: 2, Line: 2, GPU: -1, GPUs: 1, Conda: "/opt/envs/my env", PreferGPU: -1, Command: "x", Text: "[conda='/opt/envs/my env'] x", Occurrence: 1}}},
		{name: "return", input: "[return=out/,'*.json',ckpt/**/best.pt] python t.py\n",
			want: []Job{{Seq: 1, Line: 1, GPU: -1, GPUs: 1, Return: []string{"out/", "*.json", "ckpt/**/best.pt"}, Command: "python t.py", Text: "[return=out/,'*.json',ckpt/**/best.pt] python t.py", Occurrence: 1}}},
		{name: "dependencies", input: "[after=1,train_* after_any=eval] python report.py\n",
			want: []Job{{Seq: 1, Line: 1, GPU: -1, GPUs: 1, After: []string{"1", "train_*"}, AfterAny: []string{"eval"}, Command: "python report.py", Text: "[after=1,train_* after_any=eval] python report.py", Occurrence: 1}}},
		{name: "priority and preference", input: "[priority=5 prefer=n2:1] x\n[priority=-3 prefer=n1] y\n",
			want: []Job{
				{Seq: 1, Line: 1, GPU: -1, GPUs: 1, Priority: 5, Prefer: "n2", PreferGPU: 1, Command: "x", Text: "[priority=5 prefer=n2:1] x", Occurrence: 1},
				{Seq: 2, Line: 2, GPU: -1, GPUs: 1, Priority: -3, Prefer: "n1", PreferGPU: -1, Command: "y", Text: "[priority=-3 prefer=n1] y", Occurrence: 1}}},
		{name: "over several hosts", input: "[nodes=2 gpus=4] torchrun --nnodes \"$NNODES\" train.py\n",
			want: []Job{{Seq: 1, Line: 1, GPU: -1, GPUs: 4, Nodes: 2, Command: "torchrun --nnodes \"$NNODES\" train.py", Text: "[nodes=2 gpus=4] torchrun --nnodes \"$NNODES\" train.py", Occurrence: 1}}},
		{name: "test builtin is a command", input: "[ -f done ] || python a.py\n",
			want: []Job{{Seq: 1, Line: 1, GPU: -1, GPUs: 1, Command: "[ -f done ] || python a.py", Text: "[ -f done ] || python a.py", Occurrence: 1}}},
		{name: "occurrences", input: "x\ny\nx\n",
			want: []Job{{Seq: 1, Line: 1, Command: "x", Text: "x", GPU: -1, GPUs: 1, Occurrence: 1}, {Seq: 2, Line: 2, Command: "y", Text: "y", GPU: -1, GPUs: 1, Occurrence: 1}, {Seq: 3, Line: 3, Command: "x", Text: "x", GPU: -1, GPUs: 1, Occurrence: 2}}},
		{name: "bytes kept", input: "echo \"a'b\" '$HOME' \\\\ ; printf '%s\\n' \"ü\" \xff\n",
			want: []Job{{Seq: 1, Line: 1, GPU: -1, GPUs: 1, Command: "echo \"a'b\" '$HOME' \\\\ ; printf '%s\\n' \"ü\" \xff", Text: "echo \"a'b\" '$HOME' \\\\ ; printf '%s\\n' \"ü\" \xff", Occurrence: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			jobs, rejected := parseAll(t, tt.input)
			if len(rejected) > 0 {
				t.Fatalf("rejected: %v", rejected[0])
			}
			if len(jobs) != len(tt.want) {
				t.Fatalf("got %d jobs, want %d", len(jobs), len(tt.want))
			}
			for i, j := range jobs {
				w := tt.want[i]
				w.File = "cmds.txt"
				if w.Prefer == "" {
					w.PreferGPU = -1
				}
				if w.Retries == 0 {
					w.Retries = -1 // the run's
				}
				if w.Nodes == 0 {
					w.Nodes = 1
				}
				if !reflect.DeepEqual(*j, w) {
					t.Errorf("job %d:\n got %+v\nwant %+v", i, *j, w)
				}
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		input, wantErr string
		line           int
	}{
		{"@ echo", `cmds.txt:1: "@": want @HOST or @HOST:GPU before the command`, 1},
		{"@n1:x echo", `cmds.txt:1: @n1:x: GPU "x" is not a GPU id (0, 1, ...)`, 1},
		{"[priority=high] x", `cmds.txt:1: [priority=high]: want a whole number from -1000000 to 1000000 (higher runs first, default 0)`, 1},
		{"[conda=] x", `cmds.txt:1: [conda=]: want the name (or path) of a conda env`, 1},
		{"[return=/tmp/out] x", `cmds.txt:1: [return=/tmp/out]: /tmp/out: a path to return is relative to the job's workdir`, 1},
		{"[return=out/../../x] x", `cmds.txt:1: [return=out/../../x]: out/../../x: a path to return stays under the job's workdir (no ..)`, 1},
		{"[return=a,,b] x", `cmds.txt:1: [return=a,,b]: an empty path to return`, 1},
		{"[prefer=:1] x", `cmds.txt:1: [prefer=:1]: want prefer=HOST or prefer=HOST:GPU`, 1},
		{"[prefer=n1:a] x", `cmds.txt:1: [prefer=n1:a]: GPU "a" is not a GPU id (0, 1, ...)`, 1},
		{"\n[gpus=0] x", `cmds.txt:2: [gpus=0]: want a number of GPUs from 1 to 1024`, 2},
		{"[retries=101] x", `cmds.txt:1: [retries=101]: want how many times a job that fails is run again, from 0 to 100`, 1},
		{"[retries=-1] x", `cmds.txt:1: [retries=-1]: want how many times a job that fails is run again, from 0 to 100`, 1},
		{"[colour=red] x", `cmds.txt:1: [colour=red]: unknown option "colour" (known: host, gpu, gpus, nodes, name, timeout, priority, prefer, conda, return, after, after_any, mem, model, vram, tags, retries)`, 1},
		{"[gpu=1 gpus=2 host=a] x", `cmds.txt:1: gpu=1 and gpus=2: pin one GPU or ask for several, not both`, 1},
		{"[nodes=0] x", `cmds.txt:1: [nodes=0]: want a number of hosts from 1 to 1024`, 1},
		{"[nodes=2 prefer=a] x", `cmds.txt:1: prefer=a and nodes=2: a job over several hosts goes where its hosts are free together`, 1},
		{"[nodes=2 mem=4G] x", `cmds.txt:1: mem= and nodes=2: a job over several hosts takes whole GPUs (gpus= on each host)`, 1},
		{"[name=train.rank1] x", `cmds.txt:1: [name=train.rank1]: a name must not end in .rankN (ID.rankN.out is part N of a job over several hosts): write train_rank1 for instance`, 1},
		{"[name=../x] x", `cmds.txt:1: [name=../x]: a name is letters, digits, '.', '_' and '-', not starting with '.' (it names the log files)`, 1},
		{"[name=12] x", `cmds.txt:1: [name=12]: a name must not be a number, nor end in .N for a number N from 2 (ID.N.out is attempt N of job ID): write job12 for instance`, 1},
		{"[name=train.2] x", `cmds.txt:1: [name=train.2]: a name must not be a number, nor end in .N for a number N from 2 (ID.N.out is attempt N of job ID): write train_2 for instance`, 1},
		{"[name=a.out] x", `cmds.txt:1: [name=a.out]: a name must not end in .out, .err, .jsonl, .lock or .sock (the log dir's files: logs, journal, lock, socket; its returned files go in a directory named as the job): write a_out for instance`, 1},
		{"[name=journal.jsonl] x", `cmds.txt:1: [name=journal.jsonl]: a name must not end in .out, .err, .jsonl, .lock or .sock (the log dir's files: logs, journal, lock, socket; its returned files go in a directory named as the job): write journal_jsonl for instance`, 1},
		{"[timeout=soon] x", `cmds.txt:1: [timeout=soon]: want a duration such as 90s, 30m or 2h`, 1},
		{"@n1 ", `cmds.txt:1: no command after the placement prefix`, 1},
		{"[name=lr1e-2_'sgd nesterov'] x", `cmds.txt:1: [name=lr1e-2_sgd nesterov]: a name is letters, digits, '.', '_' and '-', not starting with '.' (it names the log files)`, 1},
		{"[name=lr1e-2_sgd nesterov] x", `cmds.txt:1: [nesterov]: want key=value: a line that begins with [ starts a [key=value ...] prefix; quote a value as in the shell ([name='a b']), and put a blank after a [ that is the shell's test ([ -f x ])`, 1},
		{"[name='a] x", `cmds.txt:1: no closing ] on the line (or a quote left open): a line that begins with [ starts a [key=value ...] prefix; quote a value as in the shell ([name='a b']), and put a blank after a [ that is the shell's test ([ -f x ])`, 1},
		{"[name=a x\n] y", `cmds.txt:1: no closing ] on the line (or a quote left open): a line that begins with [ starts a [key=value ...] prefix; quote a value as in the shell ([name='a b']), and put a blank after a [ that is the shell's test ([ -f x ])`, 1},
		{"[gpus=2] [name=a] x", `cmds.txt:1: a second [key=value ...] prefix: put every option in one`, 1},
		{"@n1 [gpus=2 x", `cmds.txt:1: no closing ] on the line (or a quote left open): a line that begins with [ starts a [key=value ...] prefix; quote a value as in the shell ([name='a b']), and put a blank after a [ that is the shell's test ([ -f x ])`, 1},
		{"echo a\x00b", `cmds.txt:1: job contains a NUL byte, which no shell can receive`, 1},
		{"[name=a] x\n[name=a] y", `cmds.txt:2: name=a is already used at cmds.txt:1: names must be unique, they name the log files`, 2},
		{"echo " + strings.Repeat("x", MaxJobBytes), `cmds.txt:1: job is longer than 131071 bytes, the most a shell accepts as one argument: put it in a script and run that`, 1},
	}
	for _, tt := range tests {
		jobs, rejected := parseAll(t, tt.input)
		if len(rejected) != 1 {
			t.Errorf("%.40q: %d rejections, %d jobs", tt.input, len(rejected), len(jobs))
			continue
		}
		if got := rejected[0].Error(); got != tt.wantErr {
			t.Errorf("%.40q:\n got %s\nwant %s", tt.input, got, tt.wantErr)
		}
	}
}

// A rejected line still takes its number, and the lines after it run.
func TestParseRejectedLineKeepsNumbering(t *testing.T) {
	t.Parallel()
	jobs, rejected := parseAll(t, "a\n[bogus=1] b\nc\n")
	if len(rejected) != 1 || rejected[0].Job.Seq != 2 || len(jobs) != 2 || jobs[1].Seq != 3 {
		t.Fatalf("jobs %v, rejected %v", jobs, rejected)
	}
}

// A job arrives when its line does, before the input ends.
func TestParseStreams(t *testing.T) {
	t.Parallel()
	r, w := io.Pipe()
	seq := 0
	p := newParser(r, "", &seq, map[string]int{}, map[string]string{})
	go w.Write([]byte("first\nsecond"))
	j, err := p.next()
	if err != nil || j.Command != "first" {
		t.Fatalf("got %v, %v", j, err)
	}
	w.Close()
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"python train.py --lr 0.1\n", "@node1:2 x\n", "[host=a gpus=2 name=n timeout=1h] x\n",
		"a \\\n b\n", "# c\n\n", "[ -f x ] && y\n", "@\n", "[gpus=99999999999] x", "echo \"a'b\" '$HOME' \\\\ ;\n",
		"\xff\xfe\n", "a\r\n", "\\", "[name=a] x\n[name=a] x\n",
		"[name='a b' host=\"n\\\"1\"] x\n", "[host='a]b'] x ]\n", "[[ -f x ]] && y\n", "[name=a x\n", "@n [gpus=2 x\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, input string) {
		jobs, rejected := parseAll(t, input)
		seq := 0
		for _, j := range jobs {
			if j.Seq <= seq {
				t.Fatalf("job numbers not increasing: %d after %d", j.Seq, seq)
			}
			seq = j.Seq
			if strings.TrimSpace(j.Command) == "" || j.GPUs < 1 || j.Line < 1 {
				t.Fatalf("bad job %+v", j)
			}
			// The command is the text's own bytes, after the prefix, and each
			// of its lines stands in the input as it was written.
			// A line that begins with a prefix runs only once it parsed.
			if isOptions(j.Command) {
				t.Fatalf("job %q runs a [ prefix as its command", j.Text)
			}
			if !strings.HasSuffix(j.Text, j.Command) {
				t.Fatalf("command %q is not the end of the job text %q", j.Command, j.Text)
			}
			for _, line := range strings.Split(j.Command, "\n") {
				if !strings.Contains(input, line) {
					t.Fatalf("command line %q is not in the input", line)
				}
			}
		}
		for _, le := range rejected {
			if !strings.HasPrefix(le.Error(), "cmds.txt:") {
				t.Fatalf("rejection does not name the line: %v", le)
			}
		}
	})
}

// NoJobs tells a job file with no job line (blank lines and comments only)
// from one with a job, or with a bad line, which is a job line too.
func TestNoJobs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"", true},
		{"\n\n  \n", true},
		{"# a comment\n   # another\n", true},
		{"# a comment\necho hi\n", false},
		{"[gpus=x] bad line\n", false},
		{"echo no newline", false},
	} {
		if got, err := NoJobs(strings.NewReader(tc.in)); err != nil || got != tc.want {
			t.Errorf("NoJobs(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// model=, vram= and tags= say what kind of GPU a job needs.
func TestParseGPUKind(t *testing.T) {
	t.Parallel()
	tests := []struct {
		input   string
		models  []string
		vramMB  int
		tags    []string
		wantErr string
	}{
		{input: "[model=A100|H100] x", models: []string{"A100", "H100"}},
		{input: `[model="RTX 4090"] x`, models: []string{"RTX 4090"}},
		{input: "[vram=40G tags=nvlink,ib] x", vramMB: 40 * 1024, tags: []string{"nvlink", "ib"}},
		{input: "[model=] x", wantErr: "[model=]: want GPU models"},
		{input: "[model=A100||H100] x", wantErr: "want GPU models"},
		{input: "[vram=lots] x", wantErr: "[vram=lots]:"},
		{input: "[tags=a,,b] x", wantErr: "[tags=a,,b]: want tags"},
		{input: "[tags=nv/link] x", wantErr: "want tags"},
	}
	for _, tt := range tests {
		jobs, rejected := parseAll(t, tt.input+"\n")
		if tt.wantErr != "" {
			if len(rejected) != 1 || !strings.Contains(rejected[0].Error(), tt.wantErr) {
				t.Errorf("%q: rejected %v, want %q", tt.input, rejected, tt.wantErr)
			}
			continue
		}
		if len(jobs) != 1 || !reflect.DeepEqual(jobs[0].Models, tt.models) || jobs[0].VRAMMB != tt.vramMB || !reflect.DeepEqual(jobs[0].Tags, tt.tags) {
			t.Errorf("%q: %+v, rejected %v", tt.input, jobs, rejected)
		}
	}
}
