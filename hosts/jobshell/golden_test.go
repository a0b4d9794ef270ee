package jobshell

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// shown is what is sent to a machine, readable: a NUL is <NUL> and ends
// a line.
func shown(b []byte) string { return strings.ReplaceAll(string(b), "\x00", "<NUL>\n") }

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./hosts/jobshell -run Golden -args -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("what is sent to a job shell changed (%s); if on purpose, rewrite it with -args -update:\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// What a job shell is sent after its code, byte for byte: its start for
// each login (a copy's with the state it copies), and a job's record.
func TestGoldenWhatIsSent(t *testing.T) {
	sup := Supervision{Grace: 10 * time.Second, SetupLimit: 90 * time.Second}
	p := executor.Prelude{Workdir: "~/proj", Conda: "torch", Modules: []string{"cuda/12.2", "gcc"}, Setup: "source env.sh", Env: []string{"WANDB_MODE=offline"}}
	st := &State{At: "1764403200123456", Dir: "/home/ada/proj", Vars: "declare -x PATH=\"/opt/bin\"\numask 0027", Saved: "module () \n{ \n    :\n}\n#gpudispatch-aliases\nalias ll='ls -l'\n#opts\nset -o pipefail\n", Reader: "xabc"}
	var b strings.Builder
	for _, tc := range []struct {
		name  string
		sup   Supervision
		share bool
		st    *State
	}{
		{"slot", sup, false, nil},
		{"share", sup, true, nil},
		{"copy", sup, false, st},
		{"job", Supervision{Grace: sup.Grace, Login: LoginPerJob}, false, nil},
		{"none", Supervision{Grace: sup.Grace, Login: LoginNone}, false, nil},
	} {
		h := header(tc.sup, p, tc.share, tc.st)
		b.WriteString("== start, login " + tc.name + ", after the code:\n" + shown(h[len(script):]) + "\n")
	}
	c := executor.Command{Tag: "20261129T120000.000000Z-7-1", About: "log dir /home/ada/logs, job 7", Script: "python train.py --lr 0.1\necho done", Timeout: 90 * time.Minute,
		Env: []string{"CUDA_VISIBLE_DEVICES=2", "GPUDISPATCH_JOB_ID=7"}}
	b.WriteString("== a job, its output from byte 100 and 20 of the stream files:\n" + shown(fields(c, "0123456789abcdef", placing{outBase: 100, errBase: 20})) + "\n")
	b.WriteString("== a job that starts new stream files:\n" + shown(fields(c, "0123456789abcdef", placing{rotate: true})) + "\n")
	golden(t, "sent.golden", b.String())
}
