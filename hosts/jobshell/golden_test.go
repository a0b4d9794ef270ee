package jobshell

import (
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/spawn/spawntest"
)

// What a job shell is sent after its code, byte for byte: its start for
// each login (a copy's with the state it copies), and a job's record.
func TestGoldenWhatIsSent(t *testing.T) {
	sup := Supervision{Grace: 10 * time.Second, SetupLimit: 90 * time.Second}
	p := executor.Prelude{Workdir: "~/proj", Conda: "torch", Modules: []string{"cuda/12.2", "gcc"}, Setup: "source env.sh", Env: []string{"WANDB_MODE=offline"}}
	st := &State{At: "1764403200123456", Dir: "/home/ada/proj", Vars: "declare -x PATH=\"/opt/bin\"\numask 0027", Saved: "module () \n{ \n    :\n}\n#gpudispatch-aliases\nalias ll='ls -l'\n#opts\nset -o pipefail\n", Odiff: "set -o pipefail\n", Reader: "xabc"}
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
		b.WriteString("== start, login " + tc.name + ", after the code:\n" + spawntest.Records(h[len(script):]))
	}
	c := executor.Command{Tag: "20261129T120000.000000Z-7-1", About: "log dir /home/ada/logs, job 7", Script: "python train.py --lr 0.1\necho done", Timeout: 90 * time.Minute,
		Env: []string{"CUDA_VISIBLE_DEVICES=2", "GPUDISPATCH_JOB_ID=7", "RUN_NAME=it's lr 0.1"}}
	for _, at := range []struct {
		what string
		at   placing
	}{
		{"a job, its output from byte 100 and 20 of the stream files", placing{outBase: 100, errBase: 20}},
		{"a job that starts new stream files", placing{rotate: true}},
	} {
		f := fields(c, "0123456789abcdef", at.at)
		b.WriteString("== " + at.what + ": " + string(f[:1]) + ", then\n" + spawntest.Records(f[1:]))
	}
	b.WriteString("== a follower's arguments, following from byte 100 and 20, then stopping a job:\n" +
		strings.Join(followArgs(c.Tag, 100, 20, sup.Grace, false), " ") + "\n" + strings.Join(followArgs(c.Tag, 0, 0, sup.Grace, true), " ") + "\n")
	b.WriteString("== the kept-job lister's arguments (it is sent nothing else):\n" + strings.Join(KeptArgs(20*time.Second), " ") + "\n")
	spawntest.Golden(t, "a job shell", "sent.golden", b.String())
}
