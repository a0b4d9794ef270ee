package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// envInventory writes an inventory of l's hosts with defaults, and each
// host's own keys (YAML lines, indented by four), and returns its path.
func envInventory(t *testing.T, l *sshtest.Lab, name, defaults string, own ...string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "ssh_config: %s\ndefaults:\n  slots_per_gpu: 1\n%s\nhosts:\n", l.SSHConfig, defaults)
	for i, h := range l.Hosts {
		fmt.Fprintf(&b, "  - name: %s\n    gpus: auto\n", h.Name)
		if i < len(own) && own[i] != "" {
			b.WriteString(own[i] + "\n")
		}
	}
	path := filepath.Join(l.Dir, name)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// conda: on real OpenSSH hosts whose ~/.bashrc is Ubuntu's, with conda
// init's block below its "not interactive" guard: the env is activated on
// the host that has it; the host without says so once, naming what it has,
// and its jobs go to the other; a job's own [conda=] goes where that env
// is; an env that no host has fails its job at once with each host's
// reason.
func TestSSHConda(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 2})
	sshtest.UbuntuBashrc(t, l.Hosts[0].Home, sshtest.Conda(t, l.Hosts[0].Home, "torch"), "")
	sshtest.UbuntuBashrc(t, l.Hosts[1].Home, sshtest.Conda(t, l.Hosts[1].Home, "jax"), "")
	inv := envInventory(t, l, "lab.yaml", "  conda: torch")
	jobs := strings.Repeat("python; echo \"$CONDA_DEFAULT_ENV $FAKE_HOST\"\n", 8) +
		"[conda=jax name=j] python; echo \"$CONDA_DEFAULT_ENV $FAKE_HOST\"\n" +
		"[conda=tf name=tf] python\n"
	r := labRun(t, l, jobs, "-i", inv, "-o", "logs")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1 (job tf has no host)\n%s", r.code, r.stderr)
	}
	for i := 1; i <= 8; i++ {
		if got := readFile(t, filepath.Join(l.Dir, "logs", fmt.Sprint(i)+".out")); got != "python of torch\ntorch node1\n" {
			t.Errorf("job %d printed %q, want torch's python on node1", i, got)
		}
	}
	if got := readFile(t, filepath.Join(l.Dir, "logs", "j.out")); got != "python of jax\njax node2\n" {
		t.Errorf("job j printed %q, want jax's python on node2", got)
	}
	warn := "node2: cannot set up its jobs, which go to other hosts: conda env torch not found (or cannot be activated); this host has: base, jax"
	if n := strings.Count(r.stderr, warn); n != 1 {
		t.Errorf("the warning about node2 is said %d times, want once:\n%s", n, r.stderr)
	}
	fail := "no host can set up its environment (node1: conda env tf not found (or cannot be activated); this host has: base, torch; node2: conda env tf not found (or cannot be activated); this host has: base, jax)"
	if !strings.Contains(r.stderr, fail) {
		t.Errorf("job tf's failure does not give each host's reason (%s):\n%s", fail, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(l.Dir, "logs", "tf.out")); err == nil {
		t.Error("job tf, which ran nowhere, has a log")
	}
	s := labRun(t, l, "", "status", "-o", "logs")
	if !regexpMatch(`(?m)^tf\s+failed\s+-\s+0\s`, s.stdout) {
		t.Errorf("status gives job tf, which ran nowhere, a place or an attempt:\n%s", s.stdout)
	}
	if s = labRun(t, l, "", "status", "-o", "logs", "--json", "--failed"); !strings.Contains(s.stdout, `"error":"`+fail) {
		t.Errorf("status --json does not say why job tf failed:\n%s", s.stdout)
	}
}

// A missing workdir, or a setup that fails, is found once per host, as its
// first job shell starts: said in one line that names it, and the jobs go
// to the host that can run them, each in one attempt; with no such host
// they fail with the reason, not "exit status 126".
func TestSSHBrokenHostSetUp(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	for _, h := range l.Hosts {
		os.MkdirAll(filepath.Join(h.Home, "proj"), 0o755)
	}
	inv := envInventory(t, l, "lab.yaml", "  workdir: ~/proj", "    setup: source ~/venv/bin/activate")
	r := labRun(t, l, strings.Repeat("echo $FAKE_HOST $PWD\n", 6), "-i", inv, "-o", "logs")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	for i := 1; i <= 6; i++ {
		if got := readFile(t, filepath.Join(l.Dir, "logs", fmt.Sprint(i)+".out")); got != "node2 "+filepath.Join(l.Hosts[1].Home, "proj")+"\n" {
			t.Errorf("job %d printed %q, want node2 in its workdir", i, got)
		}
	}
	warn := "node1: cannot set up its jobs, which go to other hosts: setup failed with exit status 1: " + filepath.Join(l.Hosts[0].Home, "venv/bin/activate") + ": No such file or directory"
	if n := strings.Count(r.stderr, "node1: cannot set up"); n != 1 || !strings.Contains(r.stderr, warn) {
		t.Errorf("want the one line %q:\n%s", warn, r.stderr)
	}
	for _, e := range journal(t, filepath.Join(l.Dir, "logs")) {
		if e["event"] == "finished" && e["attempt"] != 1.0 {
			t.Errorf("job %v finished in attempt %v", e["job"], e["attempt"])
		}
		if e["event"] == "started" && e["host"] == "node1" {
			t.Errorf("the journal says job %v started on node1, where nothing ran: %v", e["job"], e)
		}
	}
	// An attempt that never ran is never said to start.
	if strings.Contains(r.stderr, "started on node1") || strings.Count(r.stderr, "started on node2") != 6 {
		t.Errorf("want six jobs started on node2, none on node1:\n%s", r.stderr)
	}
	// No host can: the jobs fail with the reason.
	inv = envInventory(t, l, "none.yaml", "  workdir: ~/nope")
	r = labRun(t, l, "echo never\necho never\n", "-i", inv, "-o", "logs2")
	if r.code != 1 || strings.Contains(r.stderr, "status 126") {
		t.Fatalf("exit %d, want 1, and no exit status 126\n%s", r.code, r.stderr)
	}
	want := "no host can set up its environment (node1: workdir " + filepath.Join(l.Hosts[0].Home, "nope") + " does not exist; node2: workdir " + filepath.Join(l.Hosts[1].Home, "nope") + " does not exist)"
	if n := strings.Count(r.stderr, want); n < 2 {
		t.Errorf("the jobs' failures do not say %q:\n%s", want, r.stderr)
	}
}

// A login profile that ends the shell reading it (exec of another shell,
// as users who cannot chsh write, or an exit) is named as the reason a
// host's jobs cannot run there, not taken for a lost connection: with a
// fixed GPU list the jobs go to the other host; with gpus: auto the host
// is left out, and says why.
func TestSSHProfileEndsTheShell(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	if err := os.WriteFile(filepath.Join(l.Hosts[0].Home, ".bash_profile"), []byte("exec sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	inv := filepath.Join(l.Dir, "fixed.yaml")
	y := fmt.Sprintf("ssh_config: %s\nhosts:\n  - name: node1\n    gpus: [0]\n  - name: node2\n    gpus: [0]\n", l.SSHConfig)
	if err := os.WriteFile(inv, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	// Jobs of 0.3 s: node2 cannot have run them all before node1's first.
	r := labRun(t, l, strings.Repeat("sleep 0.3; echo $FAKE_HOST\n", 4), "-i", inv, "-o", "logs")
	why := "the login profile ended gpudispatch's job shell as it was read (exit status 0)"
	if r.code != 0 || !strings.Contains(r.stderr, "node1: cannot set up its jobs, which go to other hosts: "+why) {
		t.Fatalf("exit %d, want 0 and node1 named with %q:\n%s", r.code, why, r.stderr)
	}
	for i := 1; i <= 4; i++ {
		if got := readFile(t, filepath.Join(l.Dir, "logs", fmt.Sprint(i)+".out")); got != "node2\n" {
			t.Errorf("job %d printed %q, want node2", i, got)
		}
	}
	auto := filepath.Join(l.Dir, "auto.yaml")
	if err := os.WriteFile(auto, fmt.Appendf(nil, "ssh_config: %s\nhosts:\n  - name: node1\n    gpus: auto\n", l.SSHConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	r = labRun(t, l, "true\n", "-i", auto, "-o", "logs2")
	if want := "gpus: auto: node1: " + why; r.code == 0 || !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "connection lost") {
		t.Errorf("exit %d, want the host left out with %q:\n%s", r.code, want, r.stderr)
	}
}

// A job shell's set-up that never finishes (here a setup that sleeps; on
// a lab server, a conda env on a dead NFS mount) holds a host's slots no
// longer than --setup-timeout: the shell and what its set-up started are
// stopped, the host says why, and the jobs run on the other host. (A
// login profile that never finishes is met first by the GPU lock's look
// at nvidia-smi, which --probe-timeout bounds.)
func TestSSHSetUpTimeout(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	inv := filepath.Join(l.Dir, "fixed.yaml")
	y := fmt.Sprintf("ssh_config: %s\nhosts:\n  - name: node1\n    gpus: [0]\n    setup: sleep 1234\n  - name: node2\n    gpus: [0]\n", l.SSHConfig)
	if err := os.WriteFile(inv, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	// Jobs of 0.3 s: node2 cannot have run them all before node1's first
	// look answers and node1 is given one (quick ones could, and then
	// node1 was never tried).
	out := runWithin(t, labCmd(t, l, strings.Repeat("sleep 0.3; echo $FAKE_HOST\n", 4), "-i", inv, "-o", "logs", "--setup-timeout", "2s"), 90*time.Second, "node1's set-up")
	want := "node1: cannot set up its jobs, which go to other hosts: its job shell's set-up (the login profile, then the workdir, modules, conda env, venv and setup) did not finish within 2s (--setup-timeout)"
	if !strings.Contains(out, want) {
		t.Errorf("the run does not say %q:\n%s", want, out)
	}
	if strings.Contains(out, "started on node1") || strings.Count(out, "started on node2") != 4 {
		t.Errorf("want four jobs started on node2 and none on node1, where nothing ran:\n%s", out)
	}
	for i := 1; i <= 4; i++ {
		if got := readFile(t, filepath.Join(l.Dir, "logs", fmt.Sprint(i)+".out")); got != "node2\n" {
			t.Errorf("job %d printed %q, want node2", i, got)
		}
	}
	if ps, _ := exec.Command("pgrep", "-f", "sleep 1234").Output(); len(ps) > 0 {
		t.Errorf("the setup's sleep still runs: %s", ps)
	}
}

// modules: are loaded with the host's real Lmod (Debian's lmod), once per
// slot; venv: activates a venv relative to the workdir; shell:
// interactive reads ~/.bashrc past its guard, and what it prints reaches
// no log.
func TestSSHModulesVenvInteractive(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/etc/profile.d/lmod.sh"); err != nil {
		sshtest.Missing(t, "GPUDISPATCH_REQUIRE_LMOD", "no Lmod here (apt-get install lmod)")
	}
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	h1, h2 := l.Hosts[0], l.Hosts[1]
	mods := filepath.Join(h1.Home, "modules", "cuda")
	os.MkdirAll(mods, 0o755)
	os.WriteFile(filepath.Join(mods, "12.1.lua"), []byte(`setenv("CUDA_HOME", "/opt/cuda-12.1")`+"\n"), 0o644)
	p, _ := os.ReadFile(filepath.Join(h1.Home, ".bash_profile"))
	os.WriteFile(filepath.Join(h1.Home, ".bash_profile"), append(p, "export MODULEPATH=$HOME/modules\n"...), 0o644)
	venv := filepath.Join(h1.Home, "proj", ".venv", "bin")
	os.MkdirAll(venv, 0o755)
	os.WriteFile(filepath.Join(venv, "activate"), []byte("export VIRTUAL_ENV="+filepath.Dir(venv)+"\nPATH=$VIRTUAL_ENV/bin:$PATH\n"), 0o644)
	sshtest.UbuntuBashrc(t, h2.Home, sshtest.Conda(t, h2.Home), "echo welcome to node2\nexport FROM_BASHRC=yes\n")
	inv := envInventory(t, l, "lab.yaml", "",
		"    workdir: ~/proj\n    venv: .venv\n    modules: [cuda/12.1]",
		"    shell: interactive")
	r := labRun(t, l, "@node1 echo $CUDA_HOME $VIRTUAL_ENV\n@node2 echo $FROM_BASHRC\n", "-i", inv, "-o", "logs")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if got, want := readFile(t, filepath.Join(l.Dir, "logs", "1.out")), "/opt/cuda-12.1 "+filepath.Dir(venv)+"\n"; got != want {
		t.Errorf("node1's job printed %q, want %q", got, want)
	}
	if got := readFile(t, filepath.Join(l.Dir, "logs", "2.out")) + readFile(t, filepath.Join(l.Dir, "logs", "2.err")); got != "yes\n" {
		t.Errorf("node2's job logged %q, want only its own yes", got)
	}
}

// hosts --check looks at each host from inside a job, and runs a command
// there: a table for people, JSON with --json, exit 1 when a host fails
// its check, with the reason.
func TestSSHHostsCheck(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 2})
	sshtest.UbuntuBashrc(t, l.Hosts[0].Home, sshtest.Conda(t, l.Hosts[0].Home, "torch"), "")
	os.MkdirAll(filepath.Join(l.Hosts[0].Home, "proj"), 0o755)
	inv := envInventory(t, l, "lab.yaml", "  workdir: ~/proj\n  conda: torch")
	r := labRun(t, l, "", "hosts", "-i", inv, "--check", `python; echo "gpu $CUDA_VISIBLE_DEVICES"`)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1 (node2 has no workdir)\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{
		`(?m)^node1  ok$`,
		`(?m)^  env\s+conda torch$`,
		`(?m)^  PATH\s+` + filepath.Join(l.Hosts[0].Home, "miniconda3/envs/torch/bin") + `:`,
		`(?m)^  GPU\s+0: driver 535\.104\.05, CUDA 12\.2$`,
		`(?m)^  workdir\s+` + filepath.Join(l.Hosts[0].Home, "proj") + `, \d`,
		`(?m)^  command\s+python; echo "gpu \$CUDA_VISIBLE_DEVICES": exit status 0$`,
		`(?m)^    python of torch\n    gpu 0$`,
		`(?m)^node2  FAILED: cannot set up a job's environment: workdir ` + filepath.Join(l.Hosts[1].Home, "proj") + ` does not exist$`,
	} {
		if !regexpMatch(want, r.stdout) {
			t.Errorf("no line like %s:\n%s", want, r.stdout)
		}
	}
	r = labRun(t, l, "", "hosts", "-i", inv, "--check", "--json", "exit 3")
	if r.code != 1 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var got []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		got = append(got, m)
	}
	if len(got) != 2 || got[0]["env"] != "conda torch" || got[0]["exit"] != 3.0 || !strings.Contains(fmt.Sprint(got[0]["error"]), "exited with status 3") ||
		!strings.Contains(fmt.Sprint(got[1]["error"]), "does not exist") {
		t.Errorf("json: %v", got)
	}
}

// hosts --check on this machine: the look at a job's environment runs
// locally, as a local job does, in the caller's environment.
func TestHostsCheckLocal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "lab.yaml"), []byte("hosts:\n  - {name: here, local: true, gpus: [0]}\n"), 0o644)
	r := gpd(t, dir, "", "hosts", "-i", "lab.yaml", "--check", "echo from-$GPUDISPATCH_HOST on $CUDA_VISIBLE_DEVICES")
	if r.code != 0 || !regexpMatch(`(?m)^here  ok$`, r.stdout) || !regexpMatch(`(?m)^    from-here on 0$`, r.stdout) {
		t.Errorf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = gpd(t, dir, "", "hosts", "-i", "lab.yaml", "--check", "exit 5"); r.code != 1 || !strings.Contains(r.stdout, `here  FAILED: here: "exit 5" exited with status 5`) {
		t.Errorf("a failing command: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// A host whose logind does not answer (D-Bus stuck: busctl and loginctl
// hang) holds up no check: linger is read from logind's file for the user.
func TestSSHHostsCheckStuckLogind(t *testing.T) {
	t.Parallel()
	fakes, linger := t.TempDir(), t.TempDir()
	for _, name := range []string{"busctl", "loginctl"} {
		if err := os.WriteFile(filepath.Join(fakes, name), []byte("#!/bin/sh\nsleep 600\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(linger, me(t)), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 1, Env: []string{"PATH=" + fakes + ":/usr/local/bin:/usr/bin:/bin", "GPUDISPATCH_LINGER_DIR=" + linger}})
	start := time.Now()
	r := labRun(t, l, "", "hosts", "-i", l.Inventory(""), "--check", "--probe-timeout", "1s", "echo done")
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the check took %v with logind stuck and a 1s probe timeout", took)
	}
	if !regexpMatch(`(?m)^  linger\s+yes$`, r.stdout) || !regexpMatch(`(?m)^    done$`, r.stdout) {
		t.Errorf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// A host whose nvidia-smi hangs holds up no check: nvidia-smi gets the
// probe timeout there, and the rest of the look is shown.
func TestSSHHostsCheckHungNvidiaSMI(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 1})
	l.Hosts[0].HangNvidiaSMI()
	inv := filepath.Join(l.Dir, "fixed.yaml")
	os.WriteFile(inv, []byte("ssh_config: "+l.SSHConfig+"\nhosts:\n  - {name: node1, gpus: [0]}\n"), 0o644)
	start := time.Now()
	r := labRun(t, l, "", "hosts", "-i", inv, "--check", "--probe-timeout", "1s", "echo done")
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the check took %v with nvidia-smi hung and a 1s probe timeout", took)
	}
	if !regexpMatch(`(?m)^  GPU\s+0: nvidia-smi gave no driver version$`, r.stdout) || !regexpMatch(`(?m)^    done$`, r.stdout) {
		t.Errorf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
