package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// A chain across real OpenSSH hosts runs in order, each job reading what
// the one before it wrote; a failed job cancels its dependents, with the
// reason on the terminal and in the exit status.
func TestSSHDependencyChain(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	d := l.Dir
	jobs := "[name=train host=node1] sleep 0.3; echo weights > " + d + "/model\n" +
		"[name=eval host=node2 after=train] cat " + d + "/model > " + d + "/score\n" +
		"[name=report after=eval] cat " + d + "/score\n" +
		"[name=broken] exit 4\n" +
		"[name=never after=broken] echo never\n"
	r := labRun(t, l, jobs, "-i", l.Inventory(""), "-o", "logs")
	if r.code != 1 {
		t.Fatalf("exit %d; want 1 (a job failed)\n%s", r.code, r.stderr)
	}
	if got := readFile(t, filepath.Join(d, "logs", "report.out")); got != "weights\n" {
		t.Errorf("report printed %q", got)
	}
	if !strings.Contains(r.stderr, "job never cancelled") || !strings.Contains(r.stderr, "dependency broken failed") {
		t.Errorf("the cancelled dependent is not said:\n%s", r.stderr)
	}
	if _, err := os.Stat(filepath.Join(d, "logs", "never.out")); err == nil {
		t.Error("the dependent of a failed job ran")
	}
}

// submit --after on a live serve: the job waits, status says for what, and
// it runs once the job it waits for succeeded.
func TestE2ESubmitAfter(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	logJournalOnFailure(t, logs)
	serve, errOut := startServe(t, dir, "--gpus", "0,1")
	flag := filepath.Join(dir, "go")
	if r := gpd(t, dir, "", "submit", "-o", "logs", "--name", "long", "--", "while [ ! -e "+flag+" ]; do sleep 0.05; done; echo made > out.txt"); r.code != 0 {
		t.Fatalf("submit: %d %s", r.code, r.stderr)
	}
	if r := gpd(t, dir, "", "submit", "-o", "logs", "--after", "long", "--name", "use", "--", "cat out.txt"); r.code != 0 {
		t.Fatalf("submit --after: %d %s", r.code, r.stderr)
	}
	st := gpd(t, dir, "", "status", "-o", "logs", "--json")
	var why string
	for _, line := range strings.Split(strings.TrimSpace(st.stdout), "\n") {
		var j struct{ Job, State, Why string }
		json.Unmarshal([]byte(line), &j)
		if j.Job == "use" {
			why = j.State + ": " + j.Why
		}
	}
	if why != "waiting: after long" {
		t.Errorf("status says of the dependent %q; want waiting: after long\n%s", why, st.stdout)
	}
	os.WriteFile(flag, nil, 0o644)
	waitJournal(t, logs, func(ev []map[string]any) bool { return count(ev, "finished") >= 2 })
	if got := readFile(t, filepath.Join(logs, "use.out")); got != "made\n" {
		t.Errorf("the dependent printed %q", got)
	}
	serve.Process.Signal(syscall.SIGTERM)
	if err := serve.Wait(); statusOf(err) != 130 {
		t.Errorf("serve: %v\n%s", err, errOut)
	}
}

// On a real OpenSSH host whose nvidia-smi reports 80 GB GPUs, jobs that
// declare 19G run four at a time on each GPU, a 50G job waits for room and
// runs, a 100G job is rejected with the largest GPU's budget, and no
// moment has more memory declared on a GPU than its budget (the journal's
// start and end times).
func TestSSHMemoryBudgets(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 1})
	var jobs strings.Builder
	for i := range 8 {
		fmt.Fprintf(&jobs, "[name=s%d mem=19G] sleep 2\n", i)
	}
	jobs.WriteString("[name=big mem=50G] sleep 0.2\n[name=huge mem=100G] true\n")
	r := labRun(t, l, jobs.String(), "-i", l.Inventory(""), "-o", "logs")
	if r.code != 1 || !strings.Contains(r.stderr, "job huge rejected: mem=100G: the largest GPU it may use gives jobs 79G (its memory less reserve_mb)") {
		t.Fatalf("exit %d; want 1, huge rejected\n%s", r.code, r.stderr)
	}
	type edge struct {
		at time.Time
		mb int
	}
	var edges []edge
	started := map[string]time.Time{}
	for _, e := range journal(t, filepath.Join(l.Dir, "logs")) {
		mb, _ := e["mem_mb"].(float64)
		switch e["event"] {
		case "started":
			at, _ := time.Parse(time.RFC3339Nano, e["start"].(string))
			started[e["job"].(string)] = at
			edges = append(edges, edge{at, int(mb)})
		case "finished":
			s, _ := time.Parse(time.RFC3339Nano, e["start"].(string))
			end, _ := time.Parse(time.RFC3339Nano, e["end"].(string))
			for _, x := range edges {
				if x.at.Equal(s) {
					edges = append(edges, edge{end, -x.mb})
					break
				}
			}
		}
	}
	sort.Slice(edges, func(a, b int) bool {
		if !edges[a].at.Equal(edges[b].at) {
			return edges[a].at.Before(edges[b].at)
		}
		return edges[a].mb < edges[b].mb
	})
	now, peak, most := 0, 0, 0
	for _, x := range edges {
		now += x.mb
		peak = max(peak, now)
		if x.mb > 0 && now/(19*1024) > most && now%(19*1024) == 0 {
			most = now / (19 * 1024)
		}
	}
	if peak > 81920-1024 {
		t.Errorf("%d MiB declared at once on the GPU; its budget is %d", peak, 81920-1024)
	}
	if most != 4 {
		t.Errorf("at most %d jobs of 19G at once; want 4", most)
	}
	if _, ok := started["big"]; !ok {
		t.Error("the 50G job never ran")
	}
}

// An eval after the trainings reads the files they brought back from
// $GPUDISPATCH_DEPS_DIR/ID/..., on a host that shares no filesystem with
// the ones they ran on (real OpenSSH hosts with homes of their own).
func TestSSHDepsDir(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	inv := envInventory(t, l, "lab.yaml", "")
	// Jobs of one run share their tree on a host: each writes its own.
	jobs := "[name=train_1 return=out1/] @node1 mkdir -p out1 && echo 0.91 > out1/acc\n" +
		"[name=train_2 return=out2/] @node1 mkdir -p out2 && echo 0.87 > out2/acc\n" +
		"[after=train_* name=eval host=node2] cat \"$GPUDISPATCH_DEPS_DIR\"/train_1/out1/acc \"$GPUDISPATCH_DEPS_DIR\"/train_2/out2/acc; ls \"$GPUDISPATCH_DEPS_DIR\"\n"
	jobs = strings.ReplaceAll(jobs, "] @node1 ", " host=node1] ")
	// The jobs run in a snapshot's tree, where return= looks.
	os.MkdirAll(filepath.Join(l.Dir, "proj"), 0o755)
	os.WriteFile(filepath.Join(l.Dir, "proj", "train.py"), []byte("pass\n"), 0o644)
	r := labRun(t, l, jobs, "-i", inv, "-o", "logs", "--sync", "proj")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if got := readFile(t, filepath.Join(l.Dir, "logs", "eval.out")); got != "0.91\n0.87\ntrain_1\ntrain_2\n" {
		t.Errorf("the eval on node2 printed %q; want both trainings' results\n%s", got, readFile(t, filepath.Join(l.Dir, "logs", "eval.err")))
	}
}

// On this machine, a job after others finds their folders in the log dir
// through $GPUDISPATCH_DEPS_DIR, with nothing copied.
func TestE2EDepsDirLocal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	jobs := "[name=a return=out/] mkdir -p out && echo A > out/x\n[after=a name=b] cat \"$GPUDISPATCH_DEPS_DIR\"/a/out/x; readlink \"$GPUDISPATCH_DEPS_DIR\"/a\n"
	r := gpd(t, dir, jobs, "--gpus", "0", "-o", "logs")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if got := readFile(t, filepath.Join(dir, "logs", "b.out")); got != "A\n"+filepath.Join(dir, "logs", "a")+"\n" {
		t.Errorf("b printed %q; want A and the log dir's folder of a", got)
	}
}
