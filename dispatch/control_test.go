package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpudispatch/gpudispatch/inventory"
)

// served is a standing queue run by Run in the background.
type served struct {
	c       *Control
	f       *fakeExec
	summary chan *Summary
}

func serve(t *testing.T, inv *inventory.Inventory, logDir string, resume bool, tweak ...func(*fakeExec)) *served {
	t.Helper()
	s := &served{c: NewControl(), f: newFakeExec(inv), summary: make(chan *Summary, 1)}
	for _, f := range tweak {
		f(s.f)
	}
	opts := Options{Inventory: inv, Executor: s.f, LogDir: logDir, Serve: true, Resume: resume, Control: s.c}
	go func() {
		sum, err := Run(context.Background(), opts, nil)
		if err != nil {
			t.Error(err)
		}
		s.summary <- sum
	}()
	return s
}

// stop stops the server and returns its summary.
func (s *served) stop(t *testing.T, now bool) *Summary {
	t.Helper()
	if err := s.c.Stop(context.Background(), now); err != nil {
		t.Fatal(err)
	}
	select {
	case sum := <-s.summary:
		return sum
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not stop")
		return nil
	}
}

func (s *served) submit(t *testing.T, b Batch) Submitted {
	t.Helper()
	out, err := s.c.Submit(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (s *served) wait(t *testing.T, ids ...string) map[string]Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	evs, err := s.c.Wait(ctx, ids)
	if err != nil {
		t.Fatalf("wait %v: %v", ids, err)
	}
	out := map[string]Event{}
	for _, e := range evs {
		out[e.Job] = e
	}
	return out
}

// waitRunning returns once job id runs (its GPU lock taken).
func (s *served) waitRunning(t *testing.T, logDir, id string) {
	t.Helper()
	for s.stateOf(t, logDir, id).State != StateRunning {
		time.Sleep(time.Millisecond)
	}
}

// stateOf is a job's row in the live status.
func (s *served) stateOf(t *testing.T, logDir, id string) JobStatus {
	t.Helper()
	st, err := s.c.Status(context.Background(), logDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range st.Jobs {
		if j.Job == id {
			return j
		}
	}
	t.Fatalf("no job %s in the status", id)
	return JobStatus{}
}

func TestServeSteersTheQueue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		s := serve(t, lab("a:0"), dir, false)
		got := s.submit(t, Batch{Text: "sleep 20s\n[name=w1] sleep 1ms\n[name=w2] exit 3\n@zz x\n"})
		if !slices.Equal(got.IDs, []string{"1", "w1", "w2"}) || len(got.Errors) != 1 || got.Errors[0] != `submit:4: unknown host "zz" (hosts: a)` {
			t.Fatalf("submitted %+v", got)
		}
		s.waitRunning(t, dir, "1")
		// Defaults apply under what a line says.
		got = s.submit(t, Batch{Source: "more.txt", Text: "[name=hi] exit 0\n", Defaults: Defaults{Priority: 5}})
		if !slices.Equal(got.IDs, []string{"hi"}) {
			t.Fatalf("submitted %+v", got)
		}
		if j := s.stateOf(t, dir, "hi"); j.State != StateWaiting || j.Priority != 5 || !strings.Contains(j.Why, "first in line") {
			t.Errorf("hi: %+v", j)
		}
		if j := s.stateOf(t, dir, "w2"); !strings.Contains(j.Why, "2 jobs ahead") {
			t.Errorf("w2: %+v", j)
		}
		if a, err := s.c.SetPriority(context.Background(), "w2", 10); err != nil || a.Err != "" {
			t.Fatalf("priority: %+v %v", a, err)
		}
		if a, _ := s.c.SetPriority(context.Background(), "1", 10); a.Err == "" {
			t.Errorf("a running job's priority changed: %+v", a)
		}
		as, err := s.c.Cancel(context.Background(), []string{"w1", "nope", "1"})
		if err != nil {
			t.Fatal(err)
		}
		if as[0].Err != "" || as[1].Err != `no job "nope" in this run` || as[2].Err != "" {
			t.Fatalf("cancel: %+v", as)
		}
		ended := s.wait(t, "1", "w1", "w2", "hi")
		if e := ended["1"]; e.Event != EventCancelled || !e.ByUser || e.Exit == nil {
			t.Errorf("running job cancelled: %+v", e)
		}
		if e := ended["w1"]; e.Event != EventCancelled || !e.ByUser || e.Start != nil {
			t.Errorf("waiting job cancelled: %+v", e)
		}
		if ended["w2"].Event != EventFailed || ended["hi"].Event != EventFinished {
			t.Errorf("w2 %s, hi %s", ended["w2"].Event, ended["hi"].Event)
		}
		var order []string
		for _, st := range s.f.starts {
			order = append(order, st.command)
		}
		if want := []string{"sleep 20s", "exit 3", "exit 0"}; !slices.Equal(order, want) {
			t.Errorf("start order %q, want %q (priority 10, then 5)", order, want)
		}
		as, _ = s.c.Retry(context.Background(), []string{"w2", "hi", "w1"})
		if as[0].Err != "" || !strings.Contains(as[1].Err, "succeeded") || as[2].Err != "" {
			t.Fatalf("retry: %+v", as)
		}
		ended = s.wait(t, "w2", "w1")
		if e := ended["w2"]; e.Event != EventFailed || e.Attempt != 2 || !strings.HasSuffix(e.Stdout, "w2.2.out") {
			t.Errorf("w2 retried: %+v", e)
		}
		if e := ended["w1"]; e.Event != EventFinished {
			t.Errorf("w1 retried after a cancel: %+v", e)
		}
		sum := s.stop(t, false)
		if !sum.Interrupted || sum.Counts[EventFinished] != 2 || sum.Counts[EventFailed] != 1 || sum.Counts[EventCancelled] != 1 || sum.Counts[EventRejected] != 1 {
			t.Errorf("summary %+v", sum)
		}
		for _, e := range readJournal(t, dir) {
			if e.Event == EventQueued && (e.Spec == nil || e.Job == "hi" && e.Spec.Priority != 5) {
				t.Errorf("queued event without its spec: %+v", e)
			}
		}
		if _, err := s.c.Submit(context.Background(), Batch{Text: "x"}); !errors.Is(err, ErrRunEnded) {
			t.Errorf("submit after the end: %v", err)
		}
	})
}

// A stopped or killed server's queue comes back with --resume: what waited
// or was killed by the stop, with its number and priority; not what its
// user cancelled, nor what ended.
func TestServeResume(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		s := serve(t, lab("a:0"), dir, false)
		s.submit(t, Batch{Text: "sleep 20s\n"})
		s.waitRunning(t, dir, "1")
		s.submit(t, Batch{Text: "sleep 1ms\n[name=gone] sleep 1ms\n[name=late priority=3] sleep 2ms\nexit 4\n"})
		s.c.Cancel(context.Background(), []string{"gone"})
		s.c.SetPriority(context.Background(), "2", 7)
		s.stop(t, true)

		s = serve(t, lab("a:0"), dir, true)
		if j := s.stateOf(t, dir, "2"); j.State == EventCancelled.State() {
			t.Fatalf("job 2 after --resume: %+v", j)
		}
		got := s.submit(t, Batch{Text: "[name=gone] exit 0\nexit 0\n"})
		if len(got.Errors) != 1 || !strings.Contains(got.Errors[0], "name=gone is already used") || !slices.Equal(got.IDs, []string{"7"}) {
			t.Errorf("submitted after --resume: %+v (numbers and names go on from the journal)", got)
		}
		ended := s.wait(t, "2", "late")
		if ended["2"].Event != EventFinished || ended["late"].Event != EventFinished {
			t.Errorf("after --resume: %+v", ended)
		}
		s.c.Cancel(context.Background(), []string{"1"}) // sleep 20s: it ran, it goes
		ended = s.wait(t, "1", "5", "7")
		if ended["1"].Event != EventCancelled || ended["5"].Event != EventFailed || ended["7"].Event != EventFinished {
			t.Errorf("after --resume: %+v", ended)
		}
		var order []string
		for _, st := range s.f.starts {
			order = append(order, st.command)
		}
		// 1 was running and killed by stop --now; 2 had priority 7, late 3.
		if want := []string{"sleep 1ms", "sleep 2ms", "sleep 20s", "exit 4", "exit 0"}; !slices.Equal(order, want) {
			t.Errorf("after --resume the jobs ran in the order %q, want %q", order, want)
		}
		if as, _ := s.c.Retry(context.Background(), []string{"gone"}); as[0].Err != "" {
			t.Errorf("a job cancelled before the restart cannot be retried: %+v", as)
		}
		s.wait(t, "gone")
		s.stop(t, true)

		// Without --resume, the new server says what was left behind.
		s = serve(t, lab("a:0"), dir, false)
		s.submit(t, Batch{Text: "sleep 20s\n"})
		s.stop(t, true)
		s = serve(t, lab("a:0"), dir, false)
		s.stop(t, false)
		if warnings(t, dir, "", "1 job of an earlier run in this log dir did not finish") == 0 {
			t.Error("no warning about the job left unfinished")
		}
	})
}

// Many clients at once: every job is queued once, under its own number.
func TestServeConcurrentSubmits(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		s := serve(t, lab("a:0,1"), dir, false)
		var mu sync.Mutex
		ids := map[string]int{}
		var wg sync.WaitGroup
		for c := range 40 {
			wg.Go(func() {
				var b strings.Builder
				for i := range 10 {
					fmt.Fprintf(&b, "exit 0 # client %d line %d\n", c, i)
				}
				got, err := s.c.Submit(context.Background(), Batch{Text: b.String()})
				if err != nil || len(got.IDs) != 10 {
					t.Errorf("submit: %+v %v", got, err)
				}
				mu.Lock()
				for _, id := range got.IDs {
					ids[id]++
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		all := make([]string, 0, len(ids))
		for id, n := range ids {
			if n != 1 {
				t.Errorf("id %s given %d times", id, n)
			}
			all = append(all, id)
		}
		if len(all) != 400 {
			t.Fatalf("%d ids", len(all))
		}
		for _, e := range s.wait(t, all...) {
			if e.Event != EventFinished {
				t.Errorf("%s: %s", e.Job, e.Event)
			}
		}
		if sum := s.stop(t, false); sum.Counts[EventFinished] != 400 {
			t.Errorf("summary %+v", sum.Counts)
		}
	})
}

func TestSubmitToAPipeRun(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := NewControl()
		inv := lab("a:0")
		in, w := io.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			Run(context.Background(), Options{Inventory: inv, Executor: newFakeExec(inv), LogDir: t.TempDir(), Control: c}, []Input{{R: in}})
		}()
		if _, err := c.Submit(context.Background(), Batch{Text: "exit 0\n"}); !errors.Is(err, ErrNotServing) {
			t.Errorf("submit to a pipe run: %v", err)
		}
		w.Close()
		<-done
	})
}

// A job cancelled while its GPU's lock is being taken never starts.
func TestServeCancelWhileStarting(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		gate := make(chan struct{})
		s := serve(t, lab("a:0"), dir, false, func(f *fakeExec) { f.lockGate = gate })
		s.submit(t, Batch{Text: "exit 0\n"})
		// It waits for the host's first look at its GPUs, then for its lock.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			j := s.stateOf(t, dir, "1")
			if j.Why == "starting: taking its GPUs' locks" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job 1 before its lock: %+v", j)
			}
		}
		as, _ := s.c.Cancel(context.Background(), []string{"1"})
		if as[0].Message != "cancelled (it was about to start)" {
			t.Fatalf("cancel: %+v", as)
		}
		close(gate)
		if e := s.wait(t, "1")["1"]; e.Event != EventCancelled || !e.ByUser || e.Start != nil {
			t.Errorf("job 1: %+v", e)
		}
		if len(s.f.starts) != 0 {
			t.Errorf("the cancelled job started: %+v", s.f.starts)
		}
		s.stop(t, false)
	})
}

// What a run prints for the events of steering.
func TestSteeringLines(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := &TextReporter{Verbose: true}
		for _, tt := range []struct {
			e    Event
			want string
		}{
			{Event{Event: EventRetried, Job: "7", ByUser: true}, "job 7 queued again on request (retry)"},
			{Event{Event: EventRetried, Job: "7", Attempt: 1}, "job 7 queued again (attempt 1 failed with its host)"},
			{Event{Event: EventPriority, Job: "7", Message: "priority 0 → 5"}, "job 7: priority 0 → 5"},
		} {
			if got, _ := r.Line(tt.e); got != tt.want {
				t.Errorf("%+v: %q, want %q", tt.e, got, tt.want)
			}
		}
	})
}

// A submitted environment is kept as what differs from the coordinator's.
func TestEnvChanges(t *testing.T) {
	for _, tc := range []struct {
		env, base, want []string
	}{
		{nil, []string{"A=1"}, nil},
		{[]string{"A=1", "B=2"}, []string{"A=1"}, []string{"B=2"}},
		{[]string{"PATH=/venv/bin:/usr/bin"}, []string{"PATH=/usr/bin"}, []string{"PATH=/venv/bin:/usr/bin"}},
		{[]string{"A=1"}, nil, []string{"A=1"}},
	} {
		if got := envChanges(tc.env, tc.base); !slices.Equal(got, tc.want) {
			t.Errorf("envChanges(%q, %q) = %q, want %q", tc.env, tc.base, got, tc.want)
		}
	}
}
