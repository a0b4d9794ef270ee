package dispatch

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/hosts"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// fakeExec stands in for the hosts: it interprets a few commands and checks
// that no GPU slot ever runs more jobs than it has slots.
//
//	sleep D     sleeps D (a Go duration)
//	exit N      exits with N
//	hang        runs until cancelled
//	lose N      loses its connection on its first N attempts, then sleeps 1 ms
//	die         on its first attempt takes its host down and loses the
//	            connection; later attempts sleep 1 ms
//
// A lost job keeps its slots (the fake counts it running) until Reap is
// called for its tag, so a slot reused too early shows as overbooked. While a
// host is down, Run fails with hosts.ErrHostDown and WaitUp blocks.
type fakeExec struct {
	inv *inventory.Inventory
	// reapGate, when set, holds every Reap until it is closed.
	reapGate chan struct{}

	mu         sync.Mutex
	now        map[string]int // "host:gpu" -> jobs running there
	peak       map[string]int
	total      int // jobs running anywhere
	peakTotal  int
	starts     []start
	attempts   map[string]int // command -> attempts so far
	violations []string
	down       map[string]chan struct{} // host -> closed when it is back
	held       map[string][]string      // tag -> slots its lost job still holds
	reaps      []string                 // tags reaped, in order
}

type start struct {
	command string
	host    string
	gpus    string
	env     []string
}

func newFakeExec(inv *inventory.Inventory) *fakeExec {
	return &fakeExec{inv: inv, now: map[string]int{}, peak: map[string]int{}, attempts: map[string]int{},
		down: map[string]chan struct{}{}, held: map[string][]string{}}
}

// setDown takes host down (true) or brings it back (false).
func (f *fakeExec) setDown(host string, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch, isDown := f.down[host]
	switch {
	case down && !isDown:
		f.down[host] = make(chan struct{})
	case !down && isDown:
		close(ch)
		delete(f.down, host)
	}
}

func (f *fakeExec) WaitUp(ctx context.Context, host string) error {
	f.mu.Lock()
	ch := f.down[host]
	f.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeExec) Reap(ctx context.Context, host, tag string) error {
	if err := f.WaitUp(ctx, host); err != nil {
		return err
	}
	if f.reapGate != nil {
		select {
		case <-f.reapGate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.held[tag] {
		f.now[s]--
	}
	delete(f.held, tag)
	f.reaps = append(f.reaps, tag)
	return nil
}

func (f *fakeExec) capacity(host string, id int) int {
	h := f.inv.HostNamed(host)
	n := 0
	for _, g := range h.GPUs {
		if g == id {
			n += h.SlotsPerGPU
		}
	}
	return n
}

func envValue(env []string, name string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

func (f *fakeExec) Run(ctx context.Context, host string, c hosts.Command, stdout, stderr io.Writer) (int, error) {
	gpus := envValue(c.Env, "CUDA_VISIBLE_DEVICES")
	f.mu.Lock()
	if f.down[host] != nil {
		f.mu.Unlock()
		return -1, fmt.Errorf("%s: %w: connection refused", host, hosts.ErrHostDown)
	}
	f.starts = append(f.starts, start{command: c.Script, host: host, gpus: gpus, env: c.Env})
	f.attempts[c.Script]++
	attempt := f.attempts[c.Script]
	var slots []string
	for _, g := range strings.Split(gpus, ",") {
		id, _ := strconv.Atoi(g)
		slot := host + ":" + g
		slots = append(slots, slot)
		f.now[slot]++
		f.peak[slot] = max(f.peak[slot], f.now[slot])
		if f.now[slot] > f.capacity(host, id) {
			f.violations = append(f.violations, fmt.Sprintf("%s runs %d jobs", slot, f.now[slot]))
		}
	}
	f.total++
	f.peakTotal = max(f.peakTotal, f.total)
	f.mu.Unlock()
	lost := false
	defer func() {
		f.mu.Lock()
		if lost {
			f.held[c.Tag] = slots
		} else {
			for _, s := range slots {
				f.now[s]--
			}
		}
		f.total--
		f.mu.Unlock()
	}()
	fmt.Fprintf(stdout, "%s %s\n", host, gpus)

	verb, arg, _ := strings.Cut(c.Script, " ")
	switch verb {
	case "sleep":
		d, _ := time.ParseDuration(arg)
		select {
		case <-time.After(d):
			return 0, nil
		case <-ctx.Done():
			return 143, fmt.Errorf("job stopped: %w", context.Cause(ctx))
		}
	case "exit":
		n, _ := strconv.Atoi(arg)
		return n, nil
	case "hang":
		<-ctx.Done()
		return 143, fmt.Errorf("job stopped: %w", context.Cause(ctx))
	case "lose":
		n, _ := strconv.Atoi(arg)
		if attempt <= n {
			lost = true
			return -1, fmt.Errorf("%s: %w", host, hosts.ErrConnectionLost)
		}
		time.Sleep(time.Millisecond)
		return 0, nil
	case "die":
		if attempt == 1 {
			f.setDown(host, true)
			lost = true
			return -1, fmt.Errorf("%s: %w", host, hosts.ErrConnectionLost)
		}
		time.Sleep(time.Millisecond)
		return 0, nil
	}
	return 127, nil
}

func (f *fakeExec) check(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, v := range f.violations {
		t.Error("slot overbooked:", v)
	}
}

// lab builds an inventory: "a:0,1 b:0,0,1" is host a with GPUs 0 and 1, and
// host b with two slots on GPU 0 and one on GPU 1.
func lab(spec string) *inventory.Inventory {
	inv := &inventory.Inventory{}
	for _, h := range strings.Fields(spec) {
		name, ids, _ := strings.Cut(h, ":")
		host := inventory.Host{Name: name, Local: true, SlotsPerGPU: 1}
		for _, id := range strings.Split(ids, ",") {
			n, _ := strconv.Atoi(id)
			host.GPUs = append(host.GPUs, n)
		}
		inv.Hosts = append(inv.Hosts, host)
	}
	return inv
}

// runJobs runs input on inv with the fake and returns it and the summary.
func runJobs(t *testing.T, inv *inventory.Inventory, input string, tweak func(*Options)) (*fakeExec, *Summary) {
	t.Helper()
	f := newFakeExec(inv)
	opts := Options{Inventory: inv, Executor: f, LogDir: t.TempDir(), Retries: 2}
	if tweak != nil {
		tweak(&opts)
	}
	s, err := Run(context.Background(), opts, []Input{{Name: "jobs", R: strings.NewReader(input)}})
	if err != nil {
		t.Fatal(err)
	}
	f.check(t)
	return f, s
}

func repeat(line string, n int) string {
	return strings.Repeat(line+"\n", n)
}
