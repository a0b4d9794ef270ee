package live

import (
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch"
	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/inventory"
)

func testModel(t *testing.T, now *time.Time, opening ...string) *model {
	t.Helper()
	inv := &inventory.Inventory{Hosts: []inventory.Host{
		{Name: "n1", GPUs: []int{0, 1}, SlotsPerGPU: 1},
		{Name: "n2", GPUs: []int{0}, SlotsPerGPU: 2},
		{Name: "hpc", Slurm: &inventory.Slurm{MaxJobs: 2}},
	}}
	return newModel(inv, opening, func() time.Time { return *now })
}

func TestModelView(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	now := t0
	at := func(s int) *time.Time { tm := t0.Add(time.Duration(s) * time.Second); return &tm }
	for _, tc := range []struct {
		name    string
		opening []string
		events  []dispatch.Event
		after   time.Duration
		want    []string
	}{
		{
			name:   "nothing yet",
			events: nil,
			want:   []string{"[--------------------] 0/0 done", "n1:0         idle", "n1:1         idle", "n2:0         idle", "n2:0         idle", "hpc          idle", "hpc          idle"},
		},
		{
			name: "a 2-GPU job on one line per GPU, one of two slots of a GPU, a job waiting",
			events: []dispatch.Event{
				{Event: dispatch.EventQueued, Job: "1"}, {Event: dispatch.EventQueued, Job: "2"}, {Event: dispatch.EventQueued, Job: "3"},
				{Event: dispatch.EventStarted, Job: "1", Host: "n1", GPUs: []executor.GPUID{0, 1}, Command: "train --big", Start: at(0)},
				{Event: dispatch.EventStarted, Job: "2", Host: "n2", GPUs: []executor.GPUID{0}, Command: "train\nmore", Start: at(30)},
			},
			after: 75 * time.Second,
			want: []string{
				"[--------------------] 0/3 done · 2 running · 1 waiting",
				"n1:0         job 1        1m15s  train --big",
				"n1:1         job 1        1m15s  train --big",
				"n2:0         job 2          45s  train ...",
				"n2:0         idle",
				"hpc          idle",
				"hpc          idle",
			},
		},
		{
			name: "a job over two hosts on every GPU it holds, till it ends",
			events: []dispatch.Event{
				{Event: dispatch.EventQueued, Job: "1"}, {Event: dispatch.EventQueued, Job: "2"},
				{Event: dispatch.EventStarted, Job: "1", Host: "n1", GPUs: []executor.GPUID{0}, Command: "torchrun", Start: at(0),
					Parts: []dispatch.Part{{Rank: 1, Host: "n2", GPUs: []executor.GPUID{0}}}},
				{Event: dispatch.EventStarted, Job: "2", Host: "n1", GPUs: []executor.GPUID{1}, Command: "torchrun", Start: at(0),
					Parts: []dispatch.Part{{Rank: 1, Host: "n2", GPUs: []executor.GPUID{0}}}},
				{Event: dispatch.EventFailed, Job: "2", Host: "n1", GPUs: []executor.GPUID{1}, Command: "torchrun", Start: at(0), End: at(5),
					Parts: []dispatch.Part{{Rank: 1, Host: "n2", GPUs: []executor.GPUID{0}}}},
			},
			after: 10 * time.Second,
			want: []string{
				"[##########----------] 1/2 done · 1 failed · 1 running · 6.0 jobs/min · ETA 10s",
				"n1:0         job 1          10s  torchrun",
				"n1:1         idle",
				"n2:0         job 1          10s  torchrun",
				"n2:0         idle",
				"hpc          idle",
				"hpc          idle",
			},
		},
		{
			name: "jobs that declare GPU memory share a GPU, each with what it declared",
			events: []dispatch.Event{
				{Event: dispatch.EventQueued, Job: "1"}, {Event: dispatch.EventQueued, Job: "2"},
				{Event: dispatch.EventStarted, Job: "1", Host: "n1", GPUs: []executor.GPUID{0}, Command: "a", Start: at(0), MemMB: 19456},
				{Event: dispatch.EventStarted, Job: "2", Host: "n1", GPUs: []executor.GPUID{0}, Command: "b", Start: at(0), MemMB: 1536},
			},
			after: 5 * time.Second,
			want: []string{
				"[--------------------] 0/2 done · 2 running",
				"n1:0         job 1           5s  [19G] a",
				"n1:0         job 2           5s  [1.5G] b",
				"n1:1         idle",
				"n2:0         idle",
				"n2:0         idle",
				"hpc          idle",
				"hpc          idle",
			},
		},
		{
			name: "jobs that wait for others are counted apart, until they join the queue",
			events: []dispatch.Event{
				{Event: dispatch.EventQueued, Job: "train"}, {Event: dispatch.EventQueued, Job: "eval", After: []string{"train"}},
				{Event: dispatch.EventQueued, Job: "report", After: []string{"eval"}},
				{Event: dispatch.EventStarted, Job: "train", Host: "n1", GPUs: []executor.GPUID{0}, Command: "t", Start: at(0)},
				{Event: dispatch.EventFinished, Job: "train", Host: "n1", GPUs: []executor.GPUID{0}, Start: at(0), End: at(5)},
				{Event: dispatch.EventQueued, Job: "eval", Message: "the jobs it waited for ended"},
			},
			after: 5 * time.Second,
			want: []string{
				"[######--------------] 1/3 done · 2 waiting (1 after other jobs) · 12.0 jobs/min · ETA 10s",
				"n1:0         idle",
				"n1:1         idle",
				"n2:0         idle",
				"n2:0         idle",
				"hpc          idle",
				"hpc          idle",
			},
		},
		{
			name: "a lost job queued again is waiting, not lost; a host down and a busy GPU say so",
			events: []dispatch.Event{
				{Event: dispatch.EventQueued, Job: "1"}, {Event: dispatch.EventQueued, Job: "2"},
				{Event: dispatch.EventStarted, Job: "1", Host: "n2", GPUs: []executor.GPUID{0}, Command: "a", Start: at(0)},
				{Event: dispatch.EventFinished, Job: "1", Host: "n2", GPUs: []executor.GPUID{0}},
				{Event: dispatch.EventStarted, Job: "2", Host: "n2", GPUs: []executor.GPUID{0}, Command: "b", Start: at(1)},
				{Event: dispatch.EventHostDown, Host: "n2", Error: "connection lost"},
				{Event: dispatch.EventLost, Job: "2", Host: "n2", GPUs: []executor.GPUID{0}},
				{Event: dispatch.EventRetried, Job: "2"},
				{Event: dispatch.EventBusy, Job: "2", Host: "n1", GPUs: []executor.GPUID{1}, Error: "n1: GPU 1 is busy with other work: 900 MiB used"},
			},
			after: 10 * time.Second,
			want: []string{
				"[##########----------] 1/2 done · 1 waiting · 6.0 jobs/min · ETA 10s",
				"n1:0         idle",
				"n1:1         set aside: n1: GPU 1 is busy with other work: 900 MiB used",
				"n2:0         host down: connection lost",
				"n2:0         host down: connection lost",
				"hpc          idle",
				"hpc          idle",
			},
		},
		{
			name:    "hosts being opened are connecting, not down, until they are up or said down or left out",
			opening: []string{"n1", "n2", "hpc"},
			events: []dispatch.Event{
				{Event: dispatch.EventHostUp, Host: "n1", Message: "opened"},
				{Event: dispatch.EventWarning, Host: "hpc", Error: "left out: hpc: sbatch: invalid partition"},
			},
			want: []string{
				"[--------------------] 0/0 done",
				"n1:0         idle",
				"n1:1         idle",
				"n2:0         connecting: not answered yet",
				"n2:0         connecting: not answered yet",
				"hpc          left out: hpc: sbatch: invalid partition",
				"hpc          left out: hpc: sbatch: invalid partition",
			},
		},
		{
			name: "cancelled jobs are not done, and the pace and ETA are of the jobs that ran",
			events: []dispatch.Event{
				{Event: dispatch.EventQueued, Job: "1"}, {Event: dispatch.EventQueued, Job: "2"}, {Event: dispatch.EventQueued, Job: "3"},
				{Event: dispatch.EventQueued, Job: "4"},
				{Event: dispatch.EventStarted, Job: "1", Host: "n1", GPUs: []executor.GPUID{0}, Command: "a", Start: at(0)},
				{Event: dispatch.EventFinished, Job: "1", Host: "n1", GPUs: []executor.GPUID{0}},
				{Event: dispatch.EventStarted, Job: "2", Host: "n1", GPUs: []executor.GPUID{0}, Command: "b", Start: at(1)},
				{Event: dispatch.EventCancelled, Job: "3"}, {Event: dispatch.EventCancelled, Job: "4"},
			},
			after: 10 * time.Second,
			want: []string{
				"[##########----------] 1/2 done · 2 cancelled · 1 running · 6.0 jobs/min · ETA 1s",
				"n1:0         job 2           9s  b",
				"n1:1         idle",
				"n2:0         idle",
				"n2:0         idle",
				"hpc          idle",
				"hpc          idle",
			},
		},
		{
			name: "a Slurm cluster's jobs take its places, not GPUs; pending in Slurm is waiting",
			events: []dispatch.Event{
				{Event: dispatch.EventQueued, Job: "1"}, {Event: dispatch.EventQueued, Job: "2"}, {Event: dispatch.EventQueued, Job: "3"},
				{Event: dispatch.EventPending, Job: "1", Host: "hpc", SlurmJobID: "7", Message: "Priority"},
				{Event: dispatch.EventStarted, Job: "1", Host: "hpc", SlurmJobID: "7", Command: "a", Start: at(0)},
				{Event: dispatch.EventStarted, Job: "2", Host: "hpc", SlurmJobID: "8", Command: "b", Start: at(5)},
				{Event: dispatch.EventFinished, Job: "1", Host: "hpc", SlurmJobID: "7"},
				{Event: dispatch.EventPending, Job: "3", Host: "hpc", SlurmJobID: "9", Message: "Resources"},
			},
			after: 20 * time.Second,
			want: []string{
				"[######--------------] 1/3 done · 1 running · 1 waiting · 3.0 jobs/min · ETA 25s",
				"n1:0         idle",
				"n1:1         idle",
				"n2:0         idle",
				"n2:0         idle",
				"hpc          idle",
				"hpc          job 2          15s  b",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now = t0
			m := testModel(t, &now, tc.opening...)
			for _, e := range tc.events {
				m.apply(e)
			}
			now = t0.Add(tc.after)
			got := strings.Split(strings.TrimSuffix(m.view(), "\n"), "\n")
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("view:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// The view fits the terminal: long lines are cut, and when the slots do not
// fit, the last line counts the rest.
func TestModelFitsTerminal(t *testing.T) {
	now := time.Now()
	m := testModel(t, &now)
	m.width, m.height = 30, 4
	m.apply(dispatch.Event{Event: dispatch.EventQueued, Job: "1"})
	m.apply(dispatch.Event{Event: dispatch.EventStarted, Job: "1", Host: "n1", GPUs: []executor.GPUID{0}, Command: strings.Repeat("x", 100), Start: &now})
	got := strings.Split(strings.TrimSuffix(m.view(), "\n"), "\n")
	want := []string{"[--------------------] 0/1 do…", "n1:0         job 1           …", "… 5 more slots (5 idle)"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("view:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A slot's command is cut in its middle, so that what tells a sweep's jobs
// apart, at its end, stays in sight.
func TestModelCutsCommandsInTheMiddle(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	m := testModel(t, &now)
	m.width, m.height = 60, 10
	m.apply(dispatch.Event{Event: dispatch.EventQueued, Job: "1"})
	m.apply(dispatch.Event{Event: dispatch.EventStarted, Job: "1", Host: "n1", GPUs: []executor.GPUID{0},
		Command: "python train.py --model resnet50 --data /scratch/imagenet --lr 0.001 --seed 3", Start: &now})
	line := strings.Split(m.view(), "\n")[1]
	if len([]rune(line)) != 60 || !strings.HasPrefix(line, "n1:0         job 1           0s  python") || !strings.HasSuffix(line, "0.001 --seed 3") {
		t.Errorf("slot line %q (%d runes): want 60, the program first and the end of the command", line, len([]rune(line)))
	}
}

// Slots that come during the run (a gpus: auto host opened late, a MIG
// instance) take their place in inventory order, then GPU order; the
// columns line up whatever the lengths of places and job names; the last
// view is the progress line alone.
func TestModelOrderColumnsAndEnd(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	inv := &inventory.Inventory{Hosts: []inventory.Host{
		{Name: "n1", GPUs: []int{0}, SlotsPerGPU: 1},
		{Name: "auto", AutoGPUs: true, SlotsPerGPU: 1},
		{Name: "n3", GPUs: []int{0}, SlotsPerGPU: 1},
	}}
	m := newModel(inv, nil, func() time.Time { return now })
	m.width, m.height = 100, 20
	start := func(job, host string, gpu executor.GPUID) {
		m.apply(dispatch.Event{Event: dispatch.EventQueued, Job: job})
		m.apply(dispatch.Event{Event: dispatch.EventStarted, Job: job, Host: host, GPUs: []executor.GPUID{gpu}, Command: "c", Start: &now})
	}
	start("1", "auto", 3)
	start("train_long_name", "auto", 0)
	start("3", "n1", executor.MIGID(0, 1))
	got := strings.Split(strings.TrimSuffix(m.view(), "\n"), "\n")[1:]
	want := []string{
		"n1:0         idle",
		"n1:0:1       job 3                    0s  c",
		"auto:0       job train_long_name      0s  c",
		"auto:3       job 1                    0s  c",
		"n3:0         idle",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("view:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	m.final = true
	if v := m.view(); strings.Count(v, "\n") != 1 || !strings.HasPrefix(v, "[") {
		t.Errorf("the last view %q: want the progress line alone", v)
	}
}

// A gpus: auto host opened during the run (under serve, before any job)
// shows its GPUs' slots, idle, in its place.
func TestModelAutoHostOpened(t *testing.T) {
	now := time.Now()
	inv := &inventory.Inventory{Hosts: []inventory.Host{
		{Name: "n1", GPUs: []int{0}, SlotsPerGPU: 1},
		{Name: "auto", AutoGPUs: true, SlotsPerGPU: 2},
		{Name: "n3", GPUs: []int{0}, SlotsPerGPU: 1},
	}}
	m := newModel(inv, []string{"auto"}, func() time.Time { return now })
	m.apply(dispatch.Event{Event: dispatch.EventHostUp, Host: "auto", Message: "opened", GPUs: []executor.GPUID{0, 1}})
	got := strings.Split(strings.TrimSuffix(m.view(), "\n"), "\n")[1:]
	want := []string{"n1:0         idle", "auto:0       idle", "auto:0       idle", "auto:1       idle", "auto:1       idle", "n3:0         idle"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("view:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
