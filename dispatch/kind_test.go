package dispatch

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// model=, vram= and tags= place a job only on a GPU of the kind it needs,
// known from the looks at the hosts; a job no GPU of the lab suits is
// rejected, once every host has answered, with what the lab has.
func TestGPUKind(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0,1 b:0")
		inv.Hosts[1].Tags = []string{"fast"}
		f := newFakeExec(inv)
		f.usage["a"] = []executor.GPU{{Index: 0, Name: "NVIDIA A100-SXM4-80GB", MemoryTotalMB: 81920}, {Index: 1, Name: "NVIDIA A100-SXM4-80GB", MemoryTotalMB: 81920}}
		f.usage["b"] = []executor.GPU{{Index: 0, Name: "NVIDIA GeForce RTX 4090", MemoryTotalMB: 24564}}
		input := "[name=rtx model=4090] sleep 10ms\n[name=datacenter model=a100|H100] sleep 10ms\n[name=big vram=40G] sleep 10ms\n" +
			"[name=tagged tags=fast] sleep 10ms\n[name=h200 model=H200] sleep 10ms\n[name=nvlink tags=nvlink] sleep 10ms\n" +
			"[name=small vram=20G gpus=2] sleep 10ms\n"
		_, s := runJobsWith(t, f, Options{Inventory: inv, Executor: f, LogDir: t.TempDir(), Recheck: time.Hour}, input)
		where := map[string]string{}
		for _, st := range f.starts {
			where[envValue(st.env, "GPUDISPATCH_JOB_ID")] = st.host
		}
		for job, host := range map[string]string{"rtx": "b", "datacenter": "a", "big": "a", "tagged": "b", "small": "a"} {
			if where[job] != host {
				t.Errorf("job %s ran on %q, want %s", job, where[job], host)
			}
		}
		rejected := map[string]string{}
		for _, e := range s.Unsuccessful {
			rejected[e.Job] = e.Error
		}
		lab := "(the lab has: a: 2× NVIDIA A100-SXM4-80GB (81920 MiB); b: 1× NVIDIA GeForce RTX 4090 (24564 MiB), tags fast)"
		for job, want := range map[string]string{
			"h200":   "model=H200: no GPU of the lab is one " + lab,
			"nvlink": "tags=nvlink: no GPU of the lab is one " + lab,
		} {
			if rejected[job] != want {
				t.Errorf("job %s: %q, want %q", job, rejected[job], want)
			}
		}
		if len(rejected) != 2 || s.Counts[EventFinished] != 5 {
			t.Errorf("summary %+v", s)
		}
	})
}

// A job that only a host still being opened could suit waits for it, and
// runs there once it is; it is not rejected while a host may yet suit it.
func TestGPUKindWaitsForHostsBeingOpened(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inv := lab("a:0 b:0")
		f := newFakeExec(inv)
		f.usage["a"] = []executor.GPU{{Index: 0, Name: "Tesla V100", MemoryTotalMB: 16384}}
		f.usage["b"] = []executor.GPU{{Index: 0, Name: "NVIDIA H100 80GB HBM3", MemoryTotalMB: 81559}}
		updates := make(chan Update)
		w, done := startRun(t, Options{Inventory: inv, Executor: f, LogDir: t.TempDir(), Updates: updates, Opening: []string{"b"}, Recheck: time.Hour})
		w.Write([]byte("[model=H100] sleep 1ms\nsleep 1ms\n"))
		waitFor(t, func() bool { return len(f.startsOn("a")) == 1 })
		updates <- Update{Inventory: inv, Opened: []string{"b"}}
		w.Close()
		s := <-done
		if !s.Succeeded() || !slices.Equal(f.startsOn("b"), []string{"sleep 1ms"}) {
			t.Errorf("summary %+v, on b %+v: want the H100 job run there once b was opened", s, f.startsOn("b"))
		}
	})
}

// A run's --model, --vram and --tags apply to every job whose line does
// not say, each part alone; a submitted batch's apply before the run's.
func TestRunWideKind(t *testing.T) {
	t.Parallel()
	newLab := func() (*inventory.Inventory, *fakeExec) {
		inv := lab("a:0 b:0")
		inv.Hosts[1].Tags = []string{"fast"}
		f := newFakeExec(inv)
		f.usage["a"] = []executor.GPU{{Index: 0, Name: "NVIDIA A100-SXM4-80GB", MemoryTotalMB: 81920}}
		f.usage["b"] = []executor.GPU{{Index: 0, Name: "NVIDIA GeForce RTX 4090", MemoryTotalMB: 24564}}
		return inv, f
	}
	where := func(f *fakeExec) map[string]string {
		f.mu.Lock()
		defer f.mu.Unlock()
		w := map[string]string{}
		for _, st := range f.starts {
			w[envValue(st.env, "GPUDISPATCH_JOB_ID")] = st.host
		}
		return w
	}
	tests := []struct {
		name     string
		kind     Kind
		want     map[string]string
		rejected []string
	}{
		{name: "a model", kind: Kind{Models: []string{"A100"}}, want: map[string]string{"plain": "a", "own": "b"}},
		{name: "memory, kept by a line's model", kind: Kind{VRAMMB: 40960}, want: map[string]string{"plain": "a"}, rejected: []string{"own"}},
		{name: "tags", kind: Kind{Tags: []string{"fast"}}, want: map[string]string{"plain": "b", "own": "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				inv, f := newLab()
				input := "[name=plain] sleep 10ms\n[name=own model=4090] sleep 10ms\n"
				_, s := runJobsWith(t, f, Options{Inventory: inv, Executor: f, LogDir: t.TempDir(), Recheck: time.Hour, Kind: tt.kind}, input)
				if got := where(f); !maps.Equal(got, tt.want) {
					t.Errorf("ran on %v, want %v", got, tt.want)
				}
				var rejected []string
				for _, e := range s.Unsuccessful {
					rejected = append(rejected, e.Job)
				}
				if !slices.Equal(rejected, tt.rejected) {
					t.Errorf("rejected %v, want %v", rejected, tt.rejected)
				}
			})
		})
	}
	t.Run("a submitted batch", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			inv, f := newLab()
			c := NewControl()
			done := make(chan *Summary, 1)
			dir := t.TempDir()
			go func() {
				s, err := Run(context.Background(), Options{Inventory: inv, Executor: f, LogDir: dir, Recheck: time.Hour, Serve: true, Control: c,
					Kind: Kind{Models: []string{"A100"}, Tags: []string{"fast"}}}, nil)
				if err != nil {
					t.Error(err)
				}
				done <- s
			}()
			// The batch's model wins over the run's; the run's tags stay.
			out, err := c.Submit(context.Background(), Batch{Text: "[name=j] sleep 10ms\n", Defaults: Defaults{Kind: Kind{Models: []string{"4090"}}}})
			if err != nil || len(out.Errors) > 0 {
				t.Fatalf("submit: %+v, %v", out, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := c.Wait(ctx, []string{"j"}); err != nil {
				t.Fatal(err)
			}
			if got := where(f)["j"]; got != "b" {
				t.Errorf("the batch's job ran on %q, want b (model=4090 tags=fast)", got)
			}
			c.Stop(context.Background(), false)
			<-done
			// A server brought back (--resume) rebuilds the job with its kind.
			for _, e := range readJournal(t, dir) {
				if e.Event != EventQueued {
					continue
				}
				j, err := rebuild(e, e.Spec)
				if err != nil || !slices.Equal(j.Models, []string{"4090"}) || !slices.Equal(j.Tags, []string{"fast"}) {
					t.Errorf("rebuilt from %+v: %+v, %v; want model=4090 tags=fast", e.Spec, j, err)
				}
			}
		})
	})
}

// --model, --vram and --tags read as the line options they stand for, with
// the flag in the error.
func TestParseKind(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tests := []struct {
			model, vram, tags string
			want              Kind
			wantErr           string
		}{
			{model: "A100|H100", vram: "40G", tags: "nvlink,ib", want: Kind{Models: []string{"A100", "H100"}, VRAMMB: 40960, Tags: []string{"nvlink", "ib"}}},
			{model: "RTX 4090", want: Kind{Models: []string{"RTX 4090"}}},
			{},
			{model: "A100|", wantErr: "--model: [model=A100|]: want GPU models"},
			{vram: "lots", wantErr: "--vram: [vram=lots]: "},
			{tags: "a b", wantErr: "--tags: [tags=a b]: want tags"},
		}
		for _, tt := range tests {
			got, err := ParseKind(tt.model, tt.vram, tt.tags)
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Errorf("%+v: err %v, want %q…", tt, err, tt.wantErr)
				}
				continue
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("%+v: %+v, %v", tt, got, err)
			}
		}
	})
}
