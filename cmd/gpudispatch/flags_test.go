package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// update rewrites the golden files under testdata: go test -run Golden -update.
var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// parsed runs newCmd's flag parsing on args, in-process, and returns the
// options its run function was given, or the error parsing gave.
func parsed[O any](t *testing.T, newCmd func(streams, func(context.Context, streams, O) error) *cobra.Command, args []string) (O, *cobra.Command, error) {
	t.Helper()
	var got O
	var out bytes.Buffer
	cmd := newCmd(streams{in: strings.NewReader(""), out: &out, err: &out}, func(_ context.Context, _ streams, o O) error {
		got = o
		return nil
	})
	cmd.SetArgs(append([]string{}, args...)) // nil would make cobra read os.Args
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	err := cmd.Execute()
	return got, cmd, err
}

// A value for every flag of run, hosts and status that differs from its
// default and is valid alone.
var flagValues = map[string]string{
	"inventory": "lab.yaml", "hosts": "a,b", "connect-timeout": "3s", "accept-new-host-keys": "true",
	"keepalive": "7s", "lock-dir": "/var/tmp/gpd-locks", "gpus": "0,1", "log-dir": "elsewhere",
	"resume": "true", "retries": "5", "timeout": "2h", "host-down-timeout": "1m", "skip-busy": "true", "no-share": "true", "max-gpus": "3",
	"busy-recheck": "30s", "dry-run": "true", "json": "true", "quiet": "true", "verbose": "true", "check": "true", "on-job-end": "echo job", "on-run-end": "echo run", "hook-timeout": "10s",
	"failed": "true", "all": "true", "probe-timeout": "5s", "setup-timeout": "30s", "lost-after": "1m", "name": "eval", "host": "a", "priority": "3", "wait": "true", "now": "true", "detach": "true",
	"listen": "127.0.0.1:8420", "sync": "/srv/proj", "after": "train_1,eval", "sync-limit": "64", "return-limit": "128", "hook-jobs": "2", "keep": "48h", "clean": "true",
	"model": "A100|H100", "vram": "40G", "tags": "nvlink", "retry-failed": "2",
}

// everyFlag checks that each flag of cmd, set as GPUDISPATCH_<FLAG>, gives
// the options that --flag=value gives, and that those differ from the
// defaults: every flag honours its environment variable.
// own gives values for flags of this command only; args are its
// arguments.
func everyFlag[O any](t *testing.T, name string, newCmd func(streams, func(context.Context, streams, O) error) *cobra.Command, own map[string]string, args ...string) {
	defaults, cmd, err := parsed(t, newCmd, args)
	if err != nil {
		t.Fatalf("%s with no flags: %v", name, err)
	}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" {
			return
		}
		value, ok := own[f.Name]
		if !ok {
			value, ok = flagValues[f.Name]
		}
		if !ok {
			t.Errorf("%s --%s: no value in flagValues to test it with", name, f.Name)
			return
		}
		fromFlag, _, err := parsed(t, newCmd, append([]string{"--" + f.Name + "=" + value}, args...))
		if err != nil {
			t.Errorf("%s --%s=%s: %v", name, f.Name, value, err)
			return
		}
		env := "GPUDISPATCH_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		t.Setenv(env, value)
		fromEnv, _, err := parsed(t, newCmd, args)
		os.Unsetenv(env)
		switch {
		case err != nil:
			t.Errorf("%s %s=%s: %v", name, env, value, err)
		case reflect.DeepEqual(fromFlag, defaults):
			t.Errorf("%s --%s=%s changed nothing", name, f.Name, value)
		case !reflect.DeepEqual(fromEnv, fromFlag):
			t.Errorf("%s %s=%s gave %+v, want %+v as --%s gives", name, env, value, fromEnv, fromFlag, f.Name)
		}
	})
}

func TestEveryFlagFromEnvironment(t *testing.T) {
	everyFlag(t, "run", newRunCommand, nil)
	everyFlag(t, "serve", newServeCommand, nil)
	everyFlag(t, "hosts", newHostsCommand, nil)
	everyFlag(t, "status", newStatusCommand, nil)
	// submit's --gpus is a count; --name needs a command after --.
	everyFlag(t, "submit", newSubmitCommand, map[string]string{"gpus": "2"}, "--", "true")
	for verb, args := range map[string][]string{"cancel": {"1"}, "retry": {"1"}, "priority": {"1", "2"}, "stop": nil} {
		everyFlag(t, verb, func(s streams, runF func(context.Context, streams, steerOptions) error) *cobra.Command {
			return newSteerCommand(s, verb, runF)
		}, nil, args...)
	}
}

// sweep parses its own arguments: its options come from the environment
// too, and the command line wins.
func TestSweepFromEnvironment(t *testing.T) {
	env := map[string]string{"GPUDISPATCH_SEED": "7", "GPUDISPATCH_SAMPLES": "2", "GPUDISPATCH_ORDERED": "1"}
	got := sweepEnv(func(k string) string { return env[k] })
	want := []string{"--samples=2", "--seed=7", "--ordered"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sweepEnv = %q, want %q", got, want)
	}
	var out bytes.Buffer
	if err := runSweep(streams{out: &out, err: &out}, append(got, "x {a}", "-p", "a", "1", "2", "3", "--samples", "3")); err != nil {
		t.Fatal(err)
	}
	if out.String() != "x 1\nx 2\nx 3\n" {
		t.Errorf("got %q: want three samples in grid order", out.String())
	}
}

// Flag parsing in run: simple_gpu_scheduler's --gpus 0 1 2 form, job files
// after the ids or after --.
func TestRunArgs(t *testing.T) {
	tests := []struct {
		args       []string
		gpus       []int
		files      []string
		wantErrSub string
	}{
		{args: []string{"--gpus", "0", "1", "2"}, gpus: []int{0, 1, 2}},
		{args: []string{"--gpus", "0", "1", "jobs.txt"}, gpus: []int{0, 1}, files: []string{"jobs.txt"}},
		{args: []string{"--gpus", "0", "--", "1"}, gpus: []int{0}, files: []string{"1"}},
		{args: []string{"--gpus", "0,0,1", "a.txt", "b.txt"}, gpus: []int{0, 0, 1}, files: []string{"a.txt", "b.txt"}},
		{args: []string{"jobs.txt"}, files: []string{"jobs.txt"}},
		{args: []string{"--gpus", "x"}, wantErrSub: `--gpus: "x" is not a GPU id`},
	}
	for _, tt := range tests {
		o, _, err := parsed(t, newRunCommand, tt.args)
		if tt.wantErrSub != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErrSub) {
				t.Errorf("%q: err %v, want %q", tt.args, err, tt.wantErrSub)
			}
			continue
		}
		if err != nil || !slices.Equal(o.gpus, tt.gpus) || !slices.Equal(o.files, tt.files) {
			t.Errorf("%q: gpus %v, files %q, err %v; want %v, %q", tt.args, o.gpus, o.files, err, tt.gpus, tt.files)
		}
	}
}

// What a user sees when a command cannot start: the message and the exit
// status, in-process, pinned in testdata/errors.golden.
func TestGoldenErrors(t *testing.T) {
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("HOME", dir)
	os.WriteFile("bad.yaml", []byte("hosts:\n  - name: a\n    gpus: []\n"), 0o644)
	os.WriteFile("unknown.yaml", []byte("hosts:\n  - name: a\n    gpus: 2\n    gpu: 1\n"), 0o644)
	os.WriteFile("lab.yaml", []byte("hosts:\n  - name: a\n    local: true\n    gpus: 2\n"), 0o644)
	cases := [][]string{
		{"-i", "bad.yaml"},
		{"-i", "unknown.yaml"},
		{"-i", "missing.yaml"},
		{"-i", "lab.yaml", "--hosts", "b"},
		{"--gpus", "0", "nosuchjobs.txt"},
		{"--gpus", "x"},
		{"--gpus", "0", "-i", "lab.yaml"},
		{"--gpus", "0", "--retries", "-1"},
		{"--gpus", "0", "--lock-dir", "locks"},
		{"--gpus", "0", "--keepalive", "0s"},
		{"--bogus"},
		{"status"},
		{"status", "a", "b"},
		{"sweep", "x {a}"},
		{"sweep", "x", "-p", "a", "1", "--samples", "0"},
		{"hosts", "-i", "bad.yaml"},
		{"submit", "-o", "nowhere"},
		{"submit", "--name", "x"},
		{"submit", "jobs.txt", "--", "true"},
		{"submit", "--"},
		{"cancel"},
		{"cancel", "-o", "nowhere", "3"},
		{"priority", "3"},
		{"priority", "3", "high"},
		{"stop", "now"},
		{"hosts", "python -V"},
		{"serve", "extra.txt"},
	}
	var b strings.Builder
	for _, args := range cases {
		var out, errs bytes.Buffer
		code := execute(args, streams{in: strings.NewReader("echo hi\n"), out: &out, err: &errs})
		fmt.Fprintf(&b, "$ gpudispatch %s\nexit %d\n%s%s\n", strings.Join(args, " "), code, out.String(), errs.String())
	}
	path := filepath.Join(here, "testdata", "errors.golden")
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run Golden -update writes it)", err)
	}
	if b.String() != string(want) {
		t.Errorf("errors differ from %s (go test -run Golden -update rewrites it):\n%s", path, b.String())
	}
}

// The manual's tables of exit statuses (a run's in docs/running.md,
// submit's and the steering commands' in docs/queue.md) are the code's.
func TestManualExitStatus(t *testing.T) {
	var readme []byte
	for _, name := range []string{"running.md", "queue.md"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "docs", name))
		if err != nil {
			t.Fatal(err)
		}
		readme = append(readme, b...)
	}
	// The manual puts commands and flags in backticks.
	text := strings.ReplaceAll(string(readme), "`", "")
	for _, c := range exitCodes {
		rows := []string{fmt.Sprintf("| %d | %s |", c.code, c.run)}
		if c.submit != "" || c.steer != "" {
			rows = append(rows, fmt.Sprintf("| %d | %s | %s |", c.code, c.submit, c.steer))
		}
		for _, row := range rows {
			if !strings.Contains(text, row) {
				t.Errorf("the manual lacks the row %q", row)
			}
		}
	}
}

// Every command's help ends with examples, and says its exit statuses in
// lines of their own (none cut mid-sentence by the help's layout).
func TestEveryCommandHasExamples(t *testing.T) {
	var out bytes.Buffer
	root := newRootCommand(streams{in: strings.NewReader(""), out: &out, err: &out})
	for _, c := range append(root.Commands(), root) {
		if c.Name() == "help" {
			continue
		}
		out.Reset()
		args := []string{c.Name(), "--help"}
		if c == root {
			args = []string{"--help"}
		}
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		help := out.String()
		if !strings.Contains(help, "\nExamples:\n  ") {
			t.Errorf("gpudispatch %s --help has no examples:\n%s", c.Name(), help)
		}
		for _, line := range strings.Split(help, "\n") {
			if len(line) > 110 && !strings.HasPrefix(line, "  ") {
				t.Errorf("gpudispatch %s --help: a line of %d characters: %q", c.Name(), len(line), line)
			}
		}
	}
}

// version names the build: a release's version, else the commit.
func TestBuildVersion(t *testing.T) {
	set := func(kv ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}
		for i := 0; i < len(kv); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return bi
	}
	for _, tc := range []struct {
		bi   *debug.BuildInfo
		want string
	}{
		{&debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3"},
		{set("vcs.revision", "429e6ad0123456789", "vcs.time", "2026-11-24T06:00:00Z", "vcs.modified", "false"), "devel 429e6ad01234 of 2026-11-24"},
		{set("vcs.revision", "429e6ad0123456789", "vcs.modified", "true"), "devel 429e6ad01234, with uncommitted changes"},
		{set(), "devel (built without version control information)"},
		{nil, "devel (no build information)"},
	} {
		if got := buildVersion(tc.bi); got != tc.want {
			t.Errorf("buildVersion = %q, want %q", got, tc.want)
		}
	}
}
