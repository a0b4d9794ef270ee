package inventory

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/bad")

// The same lab in three formats loads to the same inventory.
func TestLoadGood(t *testing.T) {
	t.Parallel()
	want := []Host{
		{Name: "Node1", GPUs: []int{0, 1, 2, 3}, SlotsPerGPU: 1, Workdir: "~/proj", Setup: "source ~/venv/bin/activate",
			Connection: Connection{}, Modules: []string{"cuda/12.1"}, Interactive: true, Return: []string{"out/", "*.json"}, ReserveMB: 1024,
			Env: []string{"OMP_NUM_THREADS=4", "WANDB_MODE=offline"}, Login: LoginPerSlot},
		{Name: "node2", GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}, SlotsPerGPU: 2, Workdir: "~/proj", Setup: "source ~/venv/bin/activate",
			Connection: Connection{Hostname: "10.0.0.12", Port: 2222, User: "bob", IdentityFile: "~/.ssh/lab_ed25519", ProxyJump: "bastion"},
			Env:        []string{"OMP_NUM_THREADS=4", "WANDB_MODE=online"}, Login: LoginPerJob, Conda: "torch", Modules: []string{}, Return: []string{"out/", "*.json"},
			MemMB: 20480, MemoryMB: 81920, ReserveMB: 0, MaxPerGPU: 4},
		{Name: "workstation", Local: true, AutoGPUs: true, SlotsPerGPU: 1, Workdir: "~/proj", Setup: "source ~/venv/bin/activate",
			Env: []string{"OMP_NUM_THREADS=4", "WANDB_MODE=offline"}, Login: LoginPerSlot, Venv: ".venv", Modules: []string{"cuda/12.1"}, Return: []string{"metrics.json"}, ReserveMB: 1024},
		{Name: "hpc", SlotsPerGPU: 1, Workdir: "~/proj", Setup: "source ~/venv/bin/activate",
			Connection: Connection{Hostname: "login.hpc.example.edu"},
			Env:        []string{"OMP_NUM_THREADS=4", "WANDB_MODE=offline"}, Login: LoginPerSlot, Modules: []string{"cuda/12.1"}, Return: []string{"out/", "*.json"}, ReserveMB: 1024,
			Slurm: &Slurm{Partition: "gpu", Account: "mylab", MaxJobs: 32, Time: "4:00:00",
				SbatchArgs: []string{"--mem=32G", "--cpus-per-task=8"}, Workdir: "/scratch/alice/gpd", Poll: 10 * time.Second}},
	}
	for _, name := range []string{"lab.yaml", "lab.json", "lab.toml"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			inv, err := Load(filepath.Join("testdata", "good", name))
			if err != nil {
				t.Fatal(err)
			}
			if inv.SSHConfig != "none" || inv.KnownHosts != "~/lab_known_hosts" || !inv.SkipBusy || inv.BusyMemoryMB != 1000 || inv.MaxGPUs != 3 {
				t.Errorf("top-level settings: %+v", inv)
			}
			if inv.Hooks != (Hooks{JobEnd: "notify-send done", RunEnd: "./summarize.sh"}) {
				t.Errorf("hooks: %+v", inv.Hooks)
			}
			if inv.Defaults.User != "alice" {
				t.Errorf("defaults.user = %q", inv.Defaults.User)
			}
			got := append([]Host(nil), inv.Hosts...)
			for i := range got {
				got[i].Line = 0
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("hosts:\n got %+v\nwant %+v", got, want)
			}
			if inv.HostNamed("Node1") == nil || inv.HostNamed("node1") != nil {
				t.Errorf("host names must keep their case")
			}
		})
	}
}

// Each bad file's whole error message is pinned in a golden file beside it.
func TestLoadBadGolden(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "bad", "*.*"))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, f := range files {
		if strings.HasSuffix(f, ".golden") {
			continue
		}
		n++
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			_, err := Load(f)
			if err == nil {
				t.Fatal("loaded without error")
			}
			var ie *Error
			if !errors.As(err, &ie) {
				t.Errorf("error is not an *inventory.Error: %T", err)
			}
			golden := f + ".golden"
			got := err.Error() + "\n"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./inventory -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("error message changed:\n got: %s\nwant: %s", got, want)
			}
		})
	}
	if n < 10 {
		t.Fatalf("only %d bad inventories found", n)
	}
}

func TestLoadUnknownExtension(t *testing.T) {
	t.Parallel()
	_, err := Load("lab.ini")
	if err == nil || !strings.Contains(err.Error(), "lab.ini: unknown format") {
		t.Fatalf("err = %v", err)
	}
}

func TestLocal(t *testing.T) {
	t.Parallel()
	inv := Local([]int{0, 0, 1})
	if len(inv.Hosts) != 1 || !inv.Hosts[0].Local || !reflect.DeepEqual(inv.Hosts[0].GPUs, []int{0, 0, 1}) {
		t.Fatalf("%+v", inv)
	}
}

func FuzzParse(f *testing.F) {
	for _, dir := range []string{"good", "bad"} {
		files, _ := filepath.Glob(filepath.Join("testdata", dir, "*.*"))
		for _, file := range files {
			if strings.HasSuffix(file, ".golden") {
				continue
			}
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			format, _ := formatOf(file)
			f.Add(data, format)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, format string) {
		if format != "yaml" && format != "json" && format != "toml" {
			return
		}
		inv, err := Parse("fuzz."+format, data, format)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz."+format) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if len(inv.Hosts) == 0 {
			t.Fatal("valid inventory without hosts")
		}
		seen := map[string]bool{}
		for _, h := range inv.Hosts {
			if h.Name == "" || seen[h.Name] {
				t.Fatalf("bad or duplicate host name %q", h.Name)
			}
			seen[h.Name] = true
			if h.Slurm != nil {
				if h.Slurm.Partition == "" || h.Slurm.MaxJobs < 1 || h.Slurm.Poll < time.Second || len(h.GPUs) > 0 {
					t.Fatalf("cluster %q: %+v", h.Name, *h.Slurm)
				}
				continue
			}
			if len(h.GPUs) == 0 && !h.AutoGPUs || h.SlotsPerGPU < 1 {
				t.Fatalf("host %q has no slots: %+v", h.Name, h)
			}
		}
	})
}

// A host's empty conda: (or venv:) clears the defaults' env for it; a host
// that says nothing inherits it.
func TestEnvKeysOverrideDefaults(t *testing.T) {
	t.Parallel()
	inv, err := Parse("lab.yaml", []byte(`defaults: {conda: torch, venv: ~/v}
hosts:
  - {name: a, gpus: 1, conda: "", venv: .venv}
  - {name: b, gpus: 1}
`), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	if a, b := inv.Hosts[0], inv.Hosts[1]; a.Conda != "" || a.Venv != ".venv" || b.Conda != "torch" || b.Venv != "~/v" {
		t.Errorf("a: conda %q venv %q; b: conda %q venv %q", a.Conda, a.Venv, b.Conda, b.Venv)
	}
}

// sync: names a directory of this machine, relative to the inventory
// file; a host's own wins over the defaults'.
func TestLoadSync(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "lab.yaml")
	os.WriteFile(file, []byte("defaults:\n  sync: proj\nhosts:\n  - {name: a, gpus: 1}\n  - {name: b, gpus: 1, sync: /abs/other}\n  - {name: c, gpus: 1, local: true}\n"), 0o644)
	inv, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{filepath.Join(dir, "proj"), "/abs/other", filepath.Join(dir, "proj")} {
		if got := inv.Hosts[i].Sync; got != want {
			t.Errorf("host %s: sync %q, want %q", inv.Hosts[i].Name, got, want)
		}
	}
}

// tags: a host's add to the defaults', sorted, each once; a tag is
// letters, digits, '.', '_' and '-'.
func TestLoadTags(t *testing.T) {
	t.Parallel()
	inv, err := Parse("lab.yaml", []byte(`defaults: {tags: [ib]}
hosts:
  - {name: a, gpus: 1, tags: [nvlink, ib]}
  - {name: b, gpus: 1}
`), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	if a, b := inv.Hosts[0].Tags, inv.Hosts[1].Tags; !slices.Equal(a, []string{"ib", "nvlink"}) || !slices.Equal(b, []string{"ib"}) {
		t.Errorf("tags a %v, b %v", a, b)
	}
	for _, bad := range []string{"tags: nvlink", "tags: [nv/link]", "tags: [[a]]"} {
		_, err := Parse("lab.yaml", []byte("hosts:\n  - {name: a, gpus: 1, "+bad+"}\n"), "yaml")
		if err == nil || !strings.Contains(err.Error(), "hosts[0].tags") {
			t.Errorf("%s: %v, want the key named", bad, err)
		}
	}
}

// address: is a host's own; nccl_ifname: a host's, else the defaults'.
func TestLoadJobsOverHostsKeys(t *testing.T) {
	t.Parallel()
	inv, err := Parse("lab.yaml", []byte(`defaults: {nccl_ifname: ib0}
hosts:
  - {name: a, gpus: 1, address: 10.1.0.1, nccl_ifname: eth1}
  - {name: b, gpus: 1}
`), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	a, b := inv.Hosts[0], inv.Hosts[1]
	if a.Address != "10.1.0.1" || b.Address != "" || a.NCCLIfname != "eth1" || b.NCCLIfname != "ib0" {
		t.Errorf("a: %q %q, b: %q %q", a.Address, a.NCCLIfname, b.Address, b.NCCLIfname)
	}
	if _, err := Parse("lab.yaml", []byte("defaults: {address: x}\nhosts:\n  - {name: a, gpus: 1}\n"), "yaml"); err == nil || !strings.Contains(err.Error(), "defaults.address: unknown key") {
		t.Errorf("address: under defaults: %v, want it refused (one address per host)", err)
	}
}
