// Package sshtest starts a lab of real OpenSSH servers on 127.0.0.1 for
// tests: each host is its own sshd with its own host key, its own home
// directory (so that jobs' side effects can be told apart) and a fake
// nvidia-smi on its login shell's PATH that reads a file the test can change.
// The lab writes an ssh_config with an alias per host, a known_hosts with
// their keys and a client key they all accept. Everything is torn down by
// t.Cleanup.
//
// Tests that need sshd call Start; when sshd is not installed they are
// skipped, unless GPUDISPATCH_REQUIRE_SSHD is set (CI sets it), in which case
// they fail.
//go:build unix

package sshtest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skeema/knownhosts"
	"golang.org/x/crypto/ssh"
)

// SSHD is where Debian's openssh-server puts sshd; it must be started by
// absolute path because it re-executes itself.
const SSHD = "/usr/sbin/sshd"

// Options shape a lab.
type Options struct {
	Hosts int // default 1
	GPUs  int // fake GPUs per host, default 2
	// MaxSessions and MaxStartups are sshd's limits (defaults 10, 10:30:100).
	MaxSessions int
	MaxStartups string
	// Env holds NAME=value pairs every session gets (sshd's SetEnv: no
	// spaces), e.g. SLURM_CONF for a login node of a slurmtest cluster.
	Env []string
	// UserCA, when set, is the public key file of a CA whose user
	// certificates sshd accepts (TrustedUserCAKeys).
	UserCA string
	// Users may log in too (with the lab's client key, as the inventory's
	// user:), each with a home of its own on each host and the host's fake
	// nvidia-smi there: other people of a shared server.
	Users []User
}

// Lab is a set of running test hosts.
type Lab struct {
	Dir        string
	SSHConfig  string // Host aliases node1..nodeN
	KnownHosts string // every host's key, as [127.0.0.1]:port
	ClientKey  string // private key accepted by every host
	Hosts      []*Host
	t          testing.TB
	// id tells this lab's fake GPU UUIDs from other labs': GPU locks are
	// files named by UUID in one /tmp shared by every lab of the machine.
	id string
}

// Host is one sshd of the lab.
type Host struct {
	Name    string // its ssh_config alias: node1, node2...
	Port    int
	Dir     string
	Home    string // $HOME of jobs on this host
	Key     ssh.PublicKey
	config  string
	hostKey string
	cmd     *exec.Cmd
	t       testing.TB
	// frozen are the processes Freeze stopped, for Thaw.
	frozen []int
}

// Require skips t when sshd is missing, or fails it when
// GPUDISPATCH_REQUIRE_SSHD is set.
func Require(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(SSHD); err != nil {
		Missing(t, "GPUDISPATCH_REQUIRE_SSHD", "%s is not installed (apt-get install openssh-server)", SSHD)
	}
}

// Missing skips t, which needs what the message says is missing, or fails
// it when variable (a GPUDISPATCH_REQUIRE_*) is set: CI sets them all, so
// that no test it must run is skipped there.
func Missing(t testing.TB, variable, format string, args ...any) {
	t.Helper()
	what := fmt.Sprintf(format, args...)
	if os.Getenv(variable) != "" {
		t.Fatalf("%s is set, but %s", variable, what)
	}
	t.Skipf("%s (set %s=1 to make this a failure)", what, variable)
}

// Start starts a lab.
func Start(t testing.TB, o Options) *Lab {
	t.Helper()
	Require(t)
	if o.Hosts == 0 {
		o.Hosts = 1
	}
	if o.GPUs == 0 {
		o.GPUs = 2
	}
	if o.MaxSessions == 0 {
		o.MaxSessions = 10
	}
	if o.MaxStartups == "" {
		o.MaxStartups = "10:30:100"
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatalf("sshd needs /run/sshd: %v", err)
	}
	dir := t.TempDir()
	l := &Lab{Dir: dir, t: t, id: randomID(t),
		SSHConfig:  filepath.Join(dir, "ssh_config"),
		KnownHosts: filepath.Join(dir, "known_hosts"),
		ClientKey:  filepath.Join(dir, "client_ed25519"),
	}
	clientPub := writeKey(t, l.ClientKey)
	authorized := filepath.Join(dir, "authorized_keys")
	must(t, os.WriteFile(authorized, ssh.MarshalAuthorizedKey(clientPub), 0o600))
	// The other users' key file and homes are where they can reach them
	// (sshd reads a user's keys as that user); sshd without PAM refuses
	// an account whose password is locked ("!", as useradd leaves it).
	var shared, theirKeys string
	if len(o.Users) > 0 {
		shared = SharedDir(t)
		theirKeys = filepath.Join(shared, "authorized_keys")
		must(t, os.WriteFile(theirKeys, ssh.MarshalAuthorizedKey(clientPub), 0o644))
		for _, u := range o.Users {
			if out, err := exec.Command(tool("usermod"), "-p", "*", u.Name).CombinedOutput(); err != nil {
				t.Fatalf("usermod -p '*' %s: %v: %s", u.Name, err, out)
			}
		}
	}

	var sshConfig, known strings.Builder
	// The ports stay bound until every host has one, so that no two hosts of
	// the lab get the same port (a second sshd on it would fail to start,
	// and its clients would reach the first).
	var ports portSet
	for k := 1; k <= o.Hosts; k++ {
		h := &Host{Name: "node" + strconv.Itoa(k), Dir: filepath.Join(dir, "node"+strconv.Itoa(k)), t: t}
		h.Home = filepath.Join(h.Dir, "home")
		must(t, os.MkdirAll(h.Home, 0o755))
		h.hostKey = filepath.Join(h.Dir, "ssh_host_ed25519_key")
		h.Key = writeKey(t, h.hostKey)
		h.Port = ports.take(t)
		gpus := fakeGPUs(o.GPUs, l.id+"-"+h.Name)
		NvidiaSMI(t, h.Home, gpus, "")
		h.config = filepath.Join(h.Dir, "sshd_config")
		// sshd honours only the first SetEnv line: every variable goes on
		// it, in a Match block of each user when the lab has other users.
		setEnv := func(home string) string {
			return fmt.Sprintf("SetEnv HOME=%s FAKE_HOST=%s%s\n", home, h.Name, envWords(o.Env))
		}
		var users string
		if len(o.Users) > 0 {
			users = "Match User " + currentUser() + "\n  " + setEnv(h.Home)
			for _, u := range o.Users {
				home := filepath.Join(shared, h.Name, u.Name)
				NvidiaSMI(t, home, gpus, "")
				if out, err := exec.Command("chown", "-R", fmt.Sprintf("%d:%d", u.UID, u.GID), home).CombinedOutput(); err != nil {
					t.Fatalf("chown %s: %v: %s", home, err, out)
				}
				users += "Match User " + u.Name + "\n  AuthorizedKeysFile " + theirKeys + "\n  " + setEnv(home)
			}
		}
		cfg := fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %s
PidFile %s
AuthorizedKeysFile %s
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
MaxSessions %d
MaxStartups %s
PerSourcePenalties no
LogLevel VERBOSE
`, h.Port, h.hostKey, filepath.Join(h.Dir, "sshd.pid"), authorized, o.MaxSessions, o.MaxStartups)
		if o.UserCA != "" {
			cfg += "TrustedUserCAKeys " + o.UserCA + "\n"
		}
		if users == "" {
			cfg += setEnv(h.Home)
		}
		cfg += users
		must(t, os.WriteFile(h.config, []byte(cfg), 0o644))
		if out, err := exec.Command(SSHD, "-t", "-f", h.config).CombinedOutput(); err != nil {
			// PerSourcePenalties exists only from OpenSSH 9.8.
			cfg = strings.Replace(cfg, "PerSourcePenalties no\n", "", 1)
			must(t, os.WriteFile(h.config, []byte(cfg), 0o644))
			if out2, err := exec.Command(SSHD, "-t", "-f", h.config).CombinedOutput(); err != nil {
				t.Fatalf("sshd -t %s: %v\n%s\n%s", h.config, err, out, out2)
			}
		}
		fmt.Fprintf(&sshConfig, "Host %s\n  HostName 127.0.0.1\n  Port %d\n\n", h.Name, h.Port)
		known.WriteString(knownhosts.Line([]string{knownhosts.Normalize(h.Addr())}, h.Key) + "\n")
		l.Hosts = append(l.Hosts, h)
	}
	fmt.Fprintf(&sshConfig, "Host node*\n  User %s\n  IdentityFile %s\n  UserKnownHostsFile %s\n  StrictHostKeyChecking yes\n  IdentitiesOnly yes\n",
		currentUser(), l.ClientKey, l.KnownHosts)
	must(t, os.WriteFile(l.SSHConfig, []byte(sshConfig.String()), 0o644))
	must(t, os.WriteFile(l.KnownHosts, []byte(known.String()), 0o644))
	ports.release()
	for _, h := range l.Hosts {
		h.Start()
	}
	return l
}

// Addr is the host's address, 127.0.0.1:port.
func (h *Host) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(h.Port)) }

// Start starts (or restarts) the host's sshd and waits until it answers.
func (h *Host) Start() {
	h.t.Helper()
	reaped := h.spawn()
	deadline := time.Now().Add(10 * time.Second)
	for {
		// An sshd that could not bind its port exits: one of the last
		// sshd's connection processes (which leave its group) may still
		// hold it, for as long as it takes to die.
		var ws syscall.WaitStatus
		if pid, _ := syscall.Wait4(h.cmd.Process.Pid, &ws, syscall.WNOHANG, nil); pid == h.cmd.Process.Pid {
			reaped()
			time.Sleep(100 * time.Millisecond)
			reaped = h.spawn()
		}
		c, err := net.DialTimeout("tcp", h.Addr(), time.Second)
		if err == nil {
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			banner := make([]byte, 8)
			_, err = c.Read(banner)
			c.Close()
			if err == nil && string(banner) == "SSH-2.0-" {
				h.checkOwnKey()
				return
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(h.Dir, "sshd.log"))
			h.t.Fatalf("%s: sshd did not come up on %s: %v\n%s", h.Name, h.Addr(), err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// spawn starts the host's sshd, stopped at the test's end unless reaped
// is called first (its pid may be another process's by then).
func (h *Host) spawn() (reaped func()) {
	h.t.Helper()
	log, err := os.OpenFile(filepath.Join(h.Dir, "sshd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	must(h.t, err)
	// -D: stay in the foreground, a child of the test; -e: log to stderr.
	h.cmd = exec.Command(SSHD, "-D", "-e", "-f", h.config)
	h.cmd.Stdout, h.cmd.Stderr = log, log
	// Its own process group, so Stop can take the sessions' processes too.
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	must(h.t, h.cmd.Start())
	log.Close()
	cmd := h.cmd
	gone := false
	h.t.Cleanup(func() {
		if !gone {
			stop(cmd)
		}
	})
	return func() { gone = true }
}

// checkOwnKey fails the test when the server on the host's port is not its
// sshd (another test's took the port while this one was stopped): clients
// would silently reach the wrong host.
func (h *Host) checkOwnKey() {
	h.t.Helper()
	c, err := ssh.Dial("tcp", h.Addr(), &ssh.ClientConfig{
		User: "probe", HostKeyCallback: ssh.FixedHostKey(h.Key), Timeout: 5 * time.Second,
	})
	if err == nil {
		c.Close()
		return
	}
	if strings.Contains(err.Error(), "host key mismatch") {
		h.t.Fatalf("%s: another server answers on %s", h.Name, h.Addr())
	}
}

// Stop kills the host's sshd and every process of its sessions, as a
// machine that loses power would.
func (h *Host) Stop() { stop(h.cmd) }

// Cut kills the host's sshd processes, the server and those of every
// connection, and leaves what their sessions started running: a host whose
// network went away while its jobs run on. Start brings sshd back.
func (h *Host) Cut() {
	for _, pid := range descendants(h.cmd.Process.Pid) {
		if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); strings.TrimSpace(string(comm)) == "sshd" {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	h.cmd.Wait()
}

// Freeze stops (SIGSTOP) the host's sshd processes and leaves its jobs
// running, like a host whose network hangs: connections stay open and
// nothing answers. Thaw lets them go on.
func (h *Host) Freeze() {
	for _, pid := range descendants(h.cmd.Process.Pid) {
		if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); strings.TrimSpace(string(comm)) == "sshd" {
			syscall.Kill(pid, syscall.SIGSTOP)
			h.frozen = append(h.frozen, pid)
		}
	}
}

// Thaw undoes Freeze: it continues the very processes Freeze stopped. One
// that was in execve then is bash by now, and one whose parent has gone is
// no longer below sshd: both would stay stopped for good otherwise.
func (h *Host) Thaw() {
	for _, pid := range h.frozen {
		syscall.Kill(pid, syscall.SIGCONT)
	}
	h.frozen = nil
}

func stop(cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	// sshd's session processes set up their own groups (and jobs setsid out
	// of them), so killing the whole tree means walking it. A process that
	// forks during a walk would leave a child the walk missed: stop the tree
	// first, walking again until it stops growing (stopped processes do not
	// fork), then kill it all at once, as a power cut would.
	stopped := map[int]bool{}
	for grew := true; grew; {
		grew = false
		for _, pid := range descendants(cmd.Process.Pid) {
			if !stopped[pid] {
				stopped[pid], grew = true, true
				syscall.Kill(pid, syscall.SIGSTOP)
			}
		}
	}
	for pid := range stopped {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
}

// descendants lists pid and every process below it.
func descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, ok := parentOf(p); ok {
			children[pp] = append(children[pp], p)
		}
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, false
	}
	pp, err := strconv.Atoi(f[1])
	return pp, err == nil
}

// Running reports whether process pid exists and is not a zombie.
func Running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] != 'Z'
}

// WaitGone waits until none of pids runs, for at most within (0: they must
// be gone already), and fails t otherwise.
func WaitGone(t testing.TB, pids []int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for _, p := range pids {
		for Running(p) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d still running %v later", p, within)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// Late adds to the lab's ssh_config and known_hosts a host named name
// that is h reached through a proxy that answers after delay: a server
// that takes its time (a slow VPN, a loaded machine). Each connection waits
// delay before its first byte goes either way. The proxy lives as long as
// the test.
func (l *Lab) Late(h *Host, name string, delay time.Duration) {
	l.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(l.t, err)
	l.t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				time.Sleep(delay)
				s, err := net.Dial("tcp", h.Addr())
				if err != nil {
					return
				}
				defer s.Close()
				go func() { io.Copy(s, c); s.(*net.TCPConn).CloseWrite() }()
				io.Copy(c, s)
			}()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	f, err := os.OpenFile(l.SSHConfig, os.O_APPEND|os.O_WRONLY, 0)
	must(l.t, err)
	fmt.Fprintf(f, "\nHost %s\n  HostName 127.0.0.1\n  Port %d\n", name, port)
	must(l.t, f.Close())
	f, err = os.OpenFile(l.KnownHosts, os.O_APPEND|os.O_WRONLY, 0)
	must(l.t, err)
	fmt.Fprintln(f, knownhosts.Line([]string{knownhosts.Normalize(ln.Addr().String())}, h.Key))
	must(l.t, f.Close())
}

// Aliases writes an ssh_config with n aliases, alias1..aliasN, spread over
// the lab's hosts in turn (many inventory hosts, few servers), and returns
// its path and the aliases.
func (l *Lab) Aliases(n int) (string, []string) {
	l.t.Helper()
	var b strings.Builder
	var names []string
	for i := 1; i <= n; i++ {
		h := l.Hosts[(i-1)%len(l.Hosts)]
		name := "alias" + strconv.Itoa(i)
		names = append(names, name)
		fmt.Fprintf(&b, "Host %s\n  HostName 127.0.0.1\n  Port %d\n\n", name, h.Port)
	}
	fmt.Fprintf(&b, "Host alias*\n  User %s\n  IdentityFile %s\n  UserKnownHostsFile %s\n  StrictHostKeyChecking yes\n  IdentitiesOnly yes\n",
		currentUser(), l.ClientKey, l.KnownHosts)
	path := filepath.Join(l.Dir, "aliases_config")
	must(l.t, os.WriteFile(path, []byte(b.String()), 0o644))
	return path, names
}

// NvidiaSMI installs the fake nvidia-smi in the home directory home, for
// the hosts of a lab and for any test of a local machine: ~/bin/nvidia-smi,
// put on the login shell's PATH by ~/.bash_profile (Debian's /etc/profile
// resets PATH; a user's own profile is where additions live). It reports
// gpus (lines of "index, uuid, name, memory.total, memory.used,
// utilization.gpu") and apps (compute processes: lines of "gpu_uuid, pid,
// used_memory"), which SetGPUs and SetApps change later.
func NvidiaSMI(t testing.TB, home, gpus, apps string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Join(home, "bin"), 0o755))
	must(t, os.WriteFile(filepath.Join(home, "bin", "nvidia-smi"), []byte(fakeNvidiaSMI), 0o755))
	must(t, os.WriteFile(filepath.Join(home, ".bash_profile"), []byte("PATH=$HOME/bin:$PATH\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(home, "gpus.csv"), []byte(gpus), 0o644))
	must(t, os.WriteFile(filepath.Join(home, "apps.csv"), []byte(apps), 0o644))
}

// SetGPUs replaces what the host's nvidia-smi reports (see NvidiaSMI).
func (h *Host) SetGPUs(csv string) {
	must(h.t, os.WriteFile(filepath.Join(h.Home, "gpus.csv"), []byte(csv), 0o644))
}

// SetAnswer makes the host's nvidia-smi answer the GPU query with stdout
// and stderr, and exit with rc: a real machine's answer, errors included.
func (h *Host) SetAnswer(stdout, stderr string, rc int) {
	h.SetGPUs(stdout)
	must(h.t, os.WriteFile(filepath.Join(h.Home, "gpus.stderr"), []byte(stderr), 0o644))
	must(h.t, os.WriteFile(filepath.Join(h.Home, "gpus.rc"), []byte(strconv.Itoa(rc)), 0o644))
}

// SetApps replaces the compute processes the host's nvidia-smi reports
// (see NvidiaSMI).
func (h *Host) SetApps(csv string) {
	must(h.t, os.WriteFile(filepath.Join(h.Home, "apps.csv"), []byte(csv), 0o644))
}

// SetList makes the host's nvidia-smi -L print list (a real machine's,
// with MIG instances).
func (h *Host) SetList(list string) {
	must(h.t, os.WriteFile(filepath.Join(h.Home, "gpus.L"), []byte(list), 0o644))
}

// UUID is the fake UUID of the host's GPU i.
func (h *Host) UUID(i int) string {
	b, err := os.ReadFile(filepath.Join(h.Home, "gpus.csv"))
	must(h.t, err)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ", ")
		if len(f) > 1 && f[0] == strconv.Itoa(i) {
			return f[1]
		}
	}
	h.t.Fatalf("%s has no GPU %d", h.Name, i)
	return ""
}

// FakeGPU is the line SetGPUs takes for GPU i with that UUID and used MiB
// of its 80 GB in use.
func FakeGPU(i int, uuid string, used int) string {
	return fmt.Sprintf("%d, %s, Fake GPU 80GB, 81920, %d, 0\n", i, uuid, used)
}

func fakeGPUs(n int, id string) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString(FakeGPU(i, fmt.Sprintf("GPU-%s-%d", id, i), 0))
	}
	return b.String()
}

func randomID(t testing.TB) string {
	b := make([]byte, 4)
	_, err := rand.Read(b)
	must(t, err)
	return fmt.Sprintf("%x", b)
}

// HangNvidiaSMI makes the host's nvidia-smi hang (sleep 3601, as one stuck
// in a driver that lost a GPU) until ResumeNvidiaSMI.
func (h *Host) HangNvidiaSMI() {
	must(h.t, os.WriteFile(filepath.Join(h.Home, "nvidia-smi.hang"), nil, 0o644))
}

// ResumeNvidiaSMI makes the host's nvidia-smi answer again.
func (h *Host) ResumeNvidiaSMI() {
	must(h.t, os.Remove(filepath.Join(h.Home, "nvidia-smi.hang")))
}

// fakeNvidiaSMI answers the --query-gpu form from ~/gpus.csv, the
// --query-compute-apps form from ~/apps.csv, -L (from ~/gpus.L, else the
// GPUs of ~/gpus.csv), and with no arguments the
// head of its summary (driver and CUDA versions); it hangs while
// ~/nvidia-smi.hang is there. It writes its arguments to
// ~/nvidia-smi.calls.
const fakeNvidiaSMI = `#!/bin/sh
echo "$*" >>"$HOME/nvidia-smi.calls"
if [ -e "$HOME/nvidia-smi.hang" ]; then exec sleep 3601; fi
case "$*" in
  *--query-gpu=*)
    cat "$HOME/gpus.csv"
    if [ -e "$HOME/gpus.stderr" ]; then cat "$HOME/gpus.stderr" >&2; fi
    if [ -e "$HOME/gpus.rc" ]; then exit "$(cat "$HOME/gpus.rc")"; fi ;;
  *--query-compute-apps=*) cat "$HOME/apps.csv" 2>/dev/null ;;
  -L)
    if [ -e "$HOME/gpus.L" ]; then exec cat "$HOME/gpus.L"; fi
    awk -F', ' '{print "GPU " $1 ": " $3 " (UUID: " $2 ")"}' "$HOME/gpus.csv" ;;
  "") echo "| NVIDIA-SMI 535.104.05             Driver Version: 535.104.05   CUDA Version: 12.2     |" ;;
  *) echo "fake nvidia-smi: unsupported arguments: $*" >&2; exit 2 ;;
esac
`

// Inventory writes an inventory file for the lab's hosts, each with the
// lab's fake GPUs, plus extra top-level YAML, and returns its path.
func (l *Lab) Inventory(extra string) string {
	l.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "ssh_config: %s\n%s\nhosts:\n", l.SSHConfig, extra)
	for _, h := range l.Hosts {
		fmt.Fprintf(&b, "  - name: %s\n    gpus: auto\n", h.Name)
	}
	path := filepath.Join(l.Dir, "lab.yaml")
	must(l.t, os.WriteFile(path, []byte(b.String()), 0o644))
	return path
}

func writeKey(t testing.TB, path string) ssh.PublicKey {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	must(t, err)
	block, err := ssh.MarshalPrivateKey(priv, "")
	must(t, err)
	must(t, os.WriteFile(path, pem.EncodeToMemory(block), 0o600))
	sshPub, err := ssh.NewPublicKey(pub)
	must(t, err)
	must(t, os.WriteFile(path+".pub", ssh.MarshalAuthorizedKey(sshPub), 0o644))
	return sshPub
}

// portSet holds free ports bound until release.
type portSet []net.Listener

func (ps *portSet) take(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	*ps = append(*ps, l)
	return l.Addr().(*net.TCPAddr).Port
}

func (ps portSet) release() {
	for _, l := range ps {
		l.Close()
	}
}

func currentUser() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	out, err := exec.Command("id", "-un").Output()
	if err != nil {
		return "root"
	}
	return strings.TrimSpace(string(out))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// RunWithOwnHome runs a package's tests (from its TestMain) with HOME set
// to a directory of their own, removed after: the login shells of local
// jobs must not run the developer's profile, which may be slow or hold
// locks that a killed job leaves behind (pyenv's rehash does).
func RunWithOwnHome(m *testing.M) int {
	home, err := os.MkdirTemp("", "gpudispatch-test-home")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(home)
	os.Setenv("HOME", home)
	return m.Run()
}

// envWords is env as more words of a SetEnv line.
func envWords(env []string) string {
	var b strings.Builder
	for _, kv := range env {
		b.WriteString(" " + kv)
	}
	return b.String()
}

// Buffer is a bytes.Buffer that a test may read while a job writes to it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
