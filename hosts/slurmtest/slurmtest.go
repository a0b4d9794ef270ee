// Package slurmtest starts a real Slurm cluster on this machine for tests:
// munged (shared by the machine, started once), and a slurmctld and a
// slurmd of the cluster's own, with fake GPUs that are character devices so
// that Slurm sets CUDA_VISIBLE_DEVICES itself. Each cluster has its own
// ports, state and configuration in a temporary directory; client commands
// find it through SLURM_CONF (Cluster.Env). Everything but munged is torn
// down by t.Cleanup.
//
// The daemons run as root, as a test cluster's do: tests that need Slurm
// call Start, and are skipped when Slurm is not installed or the tests do
// not run as root, unless GPUDISPATCH_REQUIRE_SLURM is set (CI sets it), in
// which case they fail.
//go:build linux

package slurmtest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// Options shape a cluster.
type Options struct {
	GPUs int // fake GPUs of its one node, default 4
	// CPUs is the node's CPUs (default 2); jobs may share them
	// (OverSubscribe), so that the GPUs are what limits them.
	CPUs int
}

// Cluster is a running test cluster of one node.
type Cluster struct {
	Dir       string
	Conf      string // its slurm.conf: SLURM_CONF for every command
	Node      string // the node's name: this machine's host name
	Partition string // "gpu", the default
	GPUs      int
	t         testing.TB
}

// Start starts a cluster and waits until its node is idle.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	for _, bin := range []string{"/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged"} {
		if _, err := os.Stat(bin); err != nil {
			sshtest.Missing(t, "GPUDISPATCH_REQUIRE_SLURM", "%s is not installed (apt-get install slurm-wlm munge)", bin)
		}
	}
	if os.Getuid() != 0 {
		sshtest.Missing(t, "GPUDISPATCH_REQUIRE_SLURM", "a test Slurm cluster runs its daemons as root")
	}
	if opts.GPUs == 0 {
		opts.GPUs = 4
	}
	if opts.CPUs == 0 {
		opts.CPUs = 2
	}
	if err := startMunge(); err != nil {
		t.Fatalf("munged: %v", err)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c := &Cluster{Dir: dir, Conf: filepath.Join(dir, "slurm.conf"), Node: strings.SplitN(host, ".", 2)[0], Partition: "gpu", GPUs: opts.GPUs, t: t}
	for i := range opts.GPUs {
		// Clones of /dev/null: Slurm only sets CUDA_VISIBLE_DEVICES for
		// GPUs that are character devices.
		if err := syscall.Mknod(filepath.Join(dir, fmt.Sprintf("nvidia%d", i)), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
			t.Fatalf("mknod: %v", err)
		}
	}
	ctld, slurmd := freePort(t), freePort(t)
	conf := fmt.Sprintf(`ClusterName=gpdtest
SlurmctldHost=%[1]s
SlurmctldPort=%[2]d
SlurmdPort=%[3]d
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=%[4]s/state
SlurmdSpoolDir=%[4]s/spool
SlurmctldPidFile=%[4]s/slurmctld.pid
SlurmdPidFile=%[4]s/slurmd.pid
SlurmctldLogFile=%[4]s/slurmctld.log
SlurmdLogFile=%[4]s/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SchedulerParameters=sched_interval=1
MinJobAge=300
NodeName=%[1]s CPUs=%[5]d RealMemory=1000 Gres=gpu:fake:%[6]d State=UNKNOWN
PartitionName=gpu Nodes=%[1]s Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
`, c.Node, ctld, slurmd, dir, opts.CPUs, opts.GPUs)
	gres := fmt.Sprintf("NodeName=%s Name=gpu Type=fake File=%s/nvidia[0-%d]\n", c.Node, dir, opts.GPUs-1)
	for name, text := range map[string]string{"slurm.conf": conf, "gres.conf": gres} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, sub := range []string{"state", "spool"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c.daemon("slurmctld", "-D", "-i")
	c.daemon("slurmd", "-D")
	// Cleanups run last first: the jobs go before the daemons. slurmstepd,
	// which runs a job, outlives slurmd.
	t.Cleanup(c.cancelAll)
	c.WaitNode("idle", 30*time.Second)
	return c
}

// cancelAll cancels every job of the cluster and waits a little for the
// queue to empty (a job whose node was taken down can stay COMPLETING),
// then kills every process that carries the cluster's SLURM_CONF: what is
// left of its jobs, slurmstepd (which outlives slurmd), and the daemons,
// whose own cleanup then finds them gone.
func (c *Cluster) cancelAll() {
	c.Command("scancel", "-p", c.Partition).Run()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		out, err := c.Command("squeue", "-h", "-o", "%i").Output()
		if err == nil && strings.TrimSpace(string(out)) == "" {
			break
		}

		time.Sleep(100 * time.Millisecond)
	}
	// slurmstepd and the jobs carry the cluster's SLURM_CONF.
	mine := []byte("SLURM_CONF=" + c.Conf + "\x00")
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if b, _ := os.ReadFile("/proc/" + e.Name() + "/environ"); bytes.Contains(b, mine) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// Env is the environment of a client command of the cluster.
func (c *Cluster) Env() []string { return append(os.Environ(), "SLURM_CONF="+c.Conf) }

// Command is a client command (sbatch, squeue, scontrol...) of the cluster.
func (c *Cluster) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = c.Env()
	return cmd
}

// Run runs a client command and returns its output, failing the test if it
// fails.
func (c *Cluster) Run(name string, args ...string) string {
	c.t.Helper()
	out, err := c.Command(name, args...).CombinedOutput()
	if err != nil {
		c.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// NodeState is the node's state as sinfo says it ("idle", "mixed",
// "down*"...).
func (c *Cluster) NodeState() string {
	out, _ := c.Command("sinfo", "-h", "-n", c.Node, "-o", "%T").Output()
	return strings.TrimSpace(string(out))
}

// WaitNode waits until the node's state is state.
func (c *Cluster) WaitNode(state string, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if c.NodeState() == state {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(c.Dir, "slurmd.log"))
	c.t.Fatalf("node %s is %q, never %q\nslurmd.log:\n%s", c.Node, c.NodeState(), state, log)
}

// SetNode changes the node's state, as an administrator would (down with a
// reason, resume).
func (c *Cluster) SetNode(state, reason string) {
	c.t.Helper()
	args := []string{"update", "nodename=" + c.Node, "state=" + state}
	if reason != "" {
		args = append(args, "reason="+reason)
	}
	c.Run("scontrol", args...)
}

// daemon starts a daemon of the cluster in the foreground; the test's end
// stops it (and with slurmd, the jobs it runs).
func (c *Cluster) daemon(name string, args ...string) {
	c.t.Helper()
	cmd := exec.Command("/usr/sbin/"+name, args...)
	cmd.Env = c.Env()
	out, err := os.Create(filepath.Join(c.Dir, name+".out"))
	if err != nil {
		c.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("%s: %v", name, err)
	}
	c.t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		out.Close()
	})
}

// startMunge starts the machine's munged unless it answers already.
func startMunge() error {
	if exec.Command("sh", "-c", "munge -n | unmunge").Run() == nil {
		return nil
	}
	if err := os.MkdirAll("/run/munge", 0o755); err != nil {
		return err
	}
	if out, err := exec.Command("chown", "-R", "munge:munge", "/etc/munge", "/run/munge", "/var/lib/munge", "/var/log/munge").CombinedOutput(); err != nil {
		return fmt.Errorf("chown: %v: %s", err, out)
	}
	if out, err := exec.Command("runuser", "-u", "munge", "--", "/usr/sbin/munged").CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	for range 50 {
		if exec.Command("sh", "-c", "munge -n | unmunge").Run() == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("munge -n | unmunge still fails")
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
