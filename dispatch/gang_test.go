package dispatch

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// partsOf lists the starts of one job's parts by NODE_RANK.
func partsOf(f *fakeExec, command string) map[string]start {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]start{}
	for _, s := range f.starts {
		if s.command == command {
			out[envValue(s.env, "NODE_RANK")] = s
		}
	}
	return out
}

func TestJobOverSeveralHosts(t *testing.T) {
	inv := lab("a:0,1 b:0,1 c:0,1")
	dir := t.TempDir()
	f, s := runJobs(t, inv, "[nodes=2 gpus=2] sleep 20ms\n", func(o *Options) { o.LogDir = dir })
	if s.Counts[EventFinished] != 1 {
		t.Fatalf("summary %+v", s)
	}
	parts := partsOf(f, "sleep 20ms")
	if len(parts) != 2 {
		t.Fatalf("parts started: %+v", parts)
	}
	p0, p1 := parts["0"], parts["1"]
	if p0.host == p1.host || p0.gpus != "0,1" || p1.gpus != "0,1" {
		t.Errorf("parts on %s:%s and %s:%s, want two hosts, GPUs 0,1 on each", p0.host, p0.gpus, p1.host, p1.gpus)
	}
	for rank, p := range parts {
		for name, want := range map[string]string{
			"NNODES":            "2",
			"WORLD_SIZE":        "4",
			"MASTER_ADDR":       p0.host,
			"GPUDISPATCH_NODES": p0.host + "," + p1.host,
			"GPUDISPATCH_HOST":  p.host,
		} {
			if got := envValue(p.env, name); got != want {
				t.Errorf("part %s: %s=%q, want %q", rank, name, got, want)
			}
		}
		if port := envValue(p.env, "MASTER_PORT"); port == "" || port != envValue(p0.env, "MASTER_PORT") {
			t.Errorf("part %s: MASTER_PORT=%q, part 0's %q", rank, port, envValue(p0.env, "MASTER_PORT"))
		}
	}
	// Part 0's output is the job's log; part 1's its rank1 log.
	for name, want := range map[string]string{"1.out": p0.host + " 0,1\n", "1.rank1.out": p1.host + " 0,1\n"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(b) != want {
			t.Errorf("%s: %q (%v), want %q", name, b, err, want)
		}
	}
	var ends []Event
	for _, e := range readJournal(t, dir) {
		if e.Event == EventStarted && (len(e.Parts) != 1 || e.Parts[0].Host != p1.host || e.Parts[0].Rank != 1 || !strings.HasSuffix(e.Parts[0].Stdout, "1.rank1.out")) {
			t.Errorf("started event's parts: %+v", e.Parts)
		}
		if e.Event == EventFinished {
			ends = append(ends, e)
		}
	}
	if len(ends) != 1 || ends[0].Host != p0.host || ends[0].FailedPart != nil {
		t.Errorf("ends recorded: %+v", ends)
	}
}

// One part that fails ends the others at once, and the job is recorded
// once, with the part that ended it; retries= runs the whole job again.
func TestPartFailingEndsTheJob(t *testing.T) {
	inv := lab("a:0 b:0 c:0")
	dir := t.TempDir()
	begin := time.Now()
	f, s := runJobs(t, inv, "[nodes=3 retries=1] rankexit 2 3\n", func(o *Options) { o.LogDir = dir })
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("the run took %s: the other parts were not stopped", took)
	}
	if s.Counts[EventFailed] != 1 || len(s.Unsuccessful) != 1 {
		t.Fatalf("summary %+v", s)
	}
	e := s.Unsuccessful[0]
	if e.Exit == nil || *e.Exit != 3 || e.FailedPart == nil || *e.FailedPart != 2 || !strings.Contains(e.Error, "part 2 on c") || e.Attempt != 2 {
		t.Errorf("final event %+v", e)
	}
	f.mu.Lock()
	starts := len(f.starts)
	f.mu.Unlock()
	if starts != 6 {
		t.Errorf("%d parts started, want 3 for each of 2 attempts", starts)
	}
	var failed int
	for _, e := range readJournal(t, dir) {
		if e.Event == EventFailed {
			failed++
		}
	}
	if failed != 2 {
		t.Errorf("%d failed events, want one per attempt", failed)
	}
}

// A job over several hosts is never starved by the jobs of one host that
// arrive after it: GPUs are held for it as they free up, on the hosts
// where it is closest to fitting, and the small jobs run on the others.
func TestJobOverSeveralHostsNotStarved(t *testing.T) {
	inv := lab("a:0,1 b:0,1 c:0,1")
	input := repeat("sleep 30ms", 6) + "[nodes=2 gpus=2 name=big] sleep 30ms\n" + repeat("sleep 30ms", 30)
	f, s := runJobs(t, inv, input, nil)
	if s.Counts[EventFinished] != 37 {
		t.Fatalf("summary %+v", s)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	big := slices.IndexFunc(f.starts, func(s start) bool { return envValue(s.env, "NNODES") == "2" })
	// Held for, it starts as the first jobs' GPUs free up (a few of the
	// later jobs run on the third host meanwhile); starved, it would
	// start last, after all 36.
	if big < 0 || big > 24 {
		t.Errorf("the job over two hosts started after %d others, want it before most of the jobs that came after it", big)
	}
}

func TestJobOverMoreHostsThanFit(t *testing.T) {
	inv := lab("a:0,1 b:0 c:0,1")
	_, s := runJobs(t, inv, "[nodes=3 gpus=2] sleep 1ms\n[nodes=2 gpus=2] sleep 1ms\n", nil)
	if s.Counts[EventRejected] != 1 || s.Counts[EventFinished] != 1 {
		t.Fatalf("summary %+v", s)
	}
	if why := s.Unsuccessful[0].Error; !strings.Contains(why, "only 2 hosts (a, c) have 2 GPUs or more") {
		t.Errorf("rejected with %q", why)
	}
}

// MASTER_ADDR is part 0's host's address: as the inventory gives it;
// nccl_ifname: is NCCL_SOCKET_IFNAME where a host names one.
func TestJobOverSeveralHostsAddress(t *testing.T) {
	inv := lab("a:0 b:0")
	inv.Hosts[0].Address, inv.Hosts[1].NCCLIfname = "10.1.0.1", "ib0"
	f, _ := runJobs(t, inv, "[nodes=2] sleep 1ms\n", nil)
	parts := partsOf(f, "sleep 1ms")
	for rank, want := range map[string][2]string{"0": {"a", ""}, "1": {"b", "ib0"}} {
		p := parts[rank]
		if p.host != want[0] || envValue(p.env, "MASTER_ADDR") != "10.1.0.1" || envValue(p.env, "NCCL_SOCKET_IFNAME") != want[1] {
			t.Errorf("part %s on %s: MASTER_ADDR=%q NCCL_SOCKET_IFNAME=%q", rank, p.host, envValue(p.env, "MASTER_ADDR"), envValue(p.env, "NCCL_SOCKET_IFNAME"))
		}
	}
}

// A part lost with its host ends the others, and the job is lost and run
// again whole (--retries) once the lost part is stopped where it ran
// (its GPUs are held till then).
func TestPartLostEndsTheJob(t *testing.T) {
	inv := lab("a:0 b:0")
	dir := t.TempDir()
	f, s := runJobs(t, inv, "[nodes=2] ranklose 1\n", func(o *Options) { o.LogDir = dir })
	if s.Counts[EventFinished] != 1 {
		t.Fatalf("summary %+v", s)
	}
	var kinds []string
	for _, e := range readJournal(t, dir) {
		if e.Job == "1" && e.Event != EventPending {
			kinds = append(kinds, string(e.Event))
			if e.Event == EventLost && (e.FailedPart == nil || *e.FailedPart != 1 || e.Host != "b" || !e.Unstopped) {
				t.Errorf("lost event %+v: want part 1 on b, unstopped", e)
			}
		}
	}
	if got := strings.Join(kinds, " "); got != "queued started lost retried stopped started finished" {
		t.Errorf("the job's story: %s", got)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reaps) != 1 || !strings.HasSuffix(f.reaps[0], ".rank1") {
		t.Errorf("reaps %v, want part 1's", f.reaps)
	}
}

// A job over several hosts may be pinned to a Slurm cluster (one batch
// job of N nodes there), not to one machine; a time limit ends every part.
func TestJobOverSeveralHostsPinnedOrTimed(t *testing.T) {
	inv := lab("a:0 b:0")
	_, s := runJobs(t, inv, "@a [nodes=2] sleep 1ms\n[nodes=2 timeout=200ms] sleep 30s\n", nil)
	if s.Counts[EventRejected] != 1 || s.Counts[EventTimeout] != 1 {
		t.Fatalf("summary %+v", s)
	}
	for _, e := range s.Unsuccessful {
		if e.Event == EventRejected && !strings.Contains(e.Error, "host=a and nodes=2: a job over several hosts may be pinned only to a Slurm cluster") {
			t.Errorf("rejected with %q", e.Error)
		}
	}
}

// A host where no free MASTER_PORT can be found takes no part 0: it is
// set aside, said once, and the job runs elsewhere without using an
// attempt.
func TestNoFreePortForPartZero(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0 b:0 c:0")
		dir := t.TempDir()
		f := newFakeExec(inv)
		f.noPort = map[string]bool{"a": true}
		s := runOnceOpen(t, f, Options{Inventory: inv, Executor: f, LogDir: dir, Recheck: time.Minute}, "[nodes=2] sleep 1ms\n")
		if s.Counts[EventFinished] != 1 {
			t.Fatalf("summary %+v", s)
		}
		parts := partsOf(f, "sleep 1ms")
		if parts["0"].host != "b" || parts["1"].host != "c" {
			t.Errorf("parts on %s and %s, want b and c", parts["0"].host, parts["1"].host)
		}
		warned := false
		for _, e := range readJournal(t, dir) {
			if e.Event == EventStarted && e.Attempt != 1 {
				t.Errorf("started attempt %d: a part 0 that found no port used an attempt", e.Attempt)
			}
			warned = warned || e.Event == EventWarning && strings.Contains(e.Error, "no free MASTER_PORT found there")
		}
		if !warned {
			t.Error("no word of host a's missing port")
		}
	})
}

// runOnceOpen runs input with opts (in a synctest bubble), the input
// coming once every host is open, so that the first of the idle hosts
// in inventory order are where a job over several hosts goes first.
func runOnceOpen(t *testing.T, f *fakeExec, opts Options, input string) *Summary {
	t.Helper()
	in, w := io.Pipe()
	go func() {
		time.Sleep(time.Second)
		io.WriteString(w, input)
		w.Close()
	}()
	s, err := Run(context.Background(), opts, []Input{{R: in}})
	if err != nil {
		t.Fatal(err)
	}
	f.check(t)
	return s
}

// All parts start together or none does: a part whose host cannot set up
// the job ends the others, which waited, set up, without running their
// line; the job runs on other hosts without using an attempt.
func TestPartThatCannotStartLetsNoneRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0 b:0 c:0")
		f := newFakeExec(inv)
		f.unfit = map[string]map[string]string{"b": {"*": "conda env torch not found"}}
		s := runOnceOpen(t, f, Options{Inventory: inv, Executor: f, LogDir: t.TempDir(), Recheck: time.Minute}, "[nodes=2] sleep 1ms\n")
		if s.Counts[EventFinished] != 1 || f.unfitTries != 1 {
			t.Fatalf("summary %+v, %d tries on b", s, f.unfitTries)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		slices.Sort(f.ran)
		if strings.Join(f.ran, ", ") != "a sleep 1ms, c sleep 1ms" {
			t.Errorf("ran %v, want the parts on a and c once each: none ran with the part on b", f.ran)
		}
	})
}
