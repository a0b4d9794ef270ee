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
	// Nodes, above 1, makes a cluster of that many nodes, each with GPUs
	// and CPUs of its own: a slurmd each on this machine (Debian's Slurm
	// is built with multiple-slurmd), named gpd1, gpd2...
	Nodes int
}

// Cluster is a running test cluster of one node.
type Cluster struct {
	Dir  string
	Conf string // its slurm.conf: SLURM_CONF for every command
	// Node is the node's name: this machine's host name; Nodes are all
	// the nodes' (gpd1, gpd2... for a cluster of several).
	Node      string
	Nodes     []string
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
	c.Nodes = []string{c.Node}
	// Node lines: one node named as this machine, or several of their own
	// names, each its own slurmd's (port, spool, GPUs).
	node := fmt.Sprintf("NodeName=%s CPUs=%d RealMemory=1000 Gres=gpu:fake:%d State=UNKNOWN\n", c.Node, opts.CPUs, opts.GPUs)
	gres := fmt.Sprintf("NodeName=%s Name=gpu Type=fake File=%s/nvidia[0-%d]\n", c.Node, dir, opts.GPUs-1)
	devices := []string{"nvidia"}
	if opts.Nodes > 1 {
		c.Nodes, node, gres, devices = nil, "", "", nil
		for i := range opts.Nodes {
			name := fmt.Sprintf("gpd%d", i+1)
			c.Nodes = append(c.Nodes, name)
			node += fmt.Sprintf("NodeName=%s NodeHostname=%s NodeAddr=127.0.0.1 Port=%d CPUs=%d RealMemory=1000 Gres=gpu:fake:%d State=UNKNOWN\n", name, c.Node, freePort(t), opts.CPUs, opts.GPUs)
			gres += fmt.Sprintf("NodeName=%s Name=gpu Type=fake File=%s/%s-nvidia[0-%d]\n", name, dir, name, opts.GPUs-1)
			devices = append(devices, name+"-nvidia")
		}
		c.Node = c.Nodes[0]
	}
	for _, d := range devices {
		for i := range opts.GPUs {
			// Clones of /dev/null: Slurm only sets CUDA_VISIBLE_DEVICES for
			// GPUs that are character devices.
			if err := syscall.Mknod(filepath.Join(dir, fmt.Sprintf("%s%d", d, i)), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
				t.Fatalf("mknod: %v", err)
			}
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
SlurmdSpoolDir=%[4]s/spool/%%n
SlurmctldPidFile=%[4]s/slurmctld.pid
SlurmdPidFile=%[4]s/slurmd-%%n.pid
SlurmctldLogFile=%[4]s/slurmctld.log
SlurmdLogFile=%[4]s/slurmd-%%n.log
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
%[5]sPartitionName=gpu Nodes=%[6]s Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
`, strings.SplitN(host, ".", 2)[0], ctld, slurmd, dir, node, strings.Join(c.Nodes, ","))
	for name, text := range map[string]string{"slurm.conf": conf, "gres.conf": gres} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, sub := range append([]string{"state"}, c.Nodes...) {
		if err := os.MkdirAll(filepath.Join(dir, "spool", sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c.daemon("slurmctld", "slurmctld", "-D", "-i")
	for _, n := range c.Nodes {
		c.daemon("slurmd-"+n, "slurmd", "-D", "-N", n)
	}
	// Cleanups run last first: the jobs go before the daemons. slurmstepd,
	// which runs a job, outlives slurmd.
	t.Cleanup(c.cancelAll)
	for _, n := range c.Nodes {
		c.waitNode(n, "idle", 30*time.Second)
	}
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

// NodeState is the (first) node's state as sinfo says it ("idle",
// "mixed", "down*"...).
func (c *Cluster) NodeState() string { return c.nodeState(c.Node) }

func (c *Cluster) nodeState(node string) string {
	out, _ := c.Command("sinfo", "-h", "-n", node, "-o", "%T").Output()
	return strings.TrimSpace(string(out))
}

// WaitNode waits until the (first) node's state is state.
func (c *Cluster) WaitNode(state string, timeout time.Duration) {
	c.t.Helper()
	c.waitNode(c.Node, state, timeout)
}

func (c *Cluster) waitNode(node, state string, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if c.nodeState(node) == state {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(c.Dir, "slurmd-"+node+".log"))
	c.t.Fatalf("node %s is %q, never %q\nslurmd-%s.log:\n%s", node, c.nodeState(node), state, node, log)
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

// daemon starts a daemon of the cluster (bin, its output in name.out) in
// the foreground; the test's end stops it (and with slurmd, the jobs it
// runs).
func (c *Cluster) daemon(name, bin string, args ...string) {
	c.t.Helper()
	cmd := exec.Command("/usr/sbin/"+bin, args...)
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
