package sshpool

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kevinburke/ssh_config"

	"github.com/gpudispatch/gpudispatch/inventory"
)

// Target is how to reach one host over SSH, every setting resolved.
type Target struct {
	// Name is the inventory's name for the host (an ssh_config alias or a
	// DNS name).
	Name     string
	Hostname string
	Port     int
	User     string
	// IdentityFiles are tried after ssh-agent's keys; IdentitiesOnly limits
	// the agent's keys to these.
	IdentityFiles  []string
	IdentitiesOnly bool
	// Jump is the bastion to go through (ProxyJump), or nil.
	Jump *Target
	// HostKeyAlias, when set, is the name the host key is looked up and
	// recorded under in known_hosts instead of HostName (ssh_config's
	// HostKeyAlias).
	HostKeyAlias string
	// IdentityAgent is the ssh-agent socket to use ("": SSH_AUTH_SOCK's;
	// "none": no agent), as ssh_config's IdentityAgent.
	IdentityAgent string
	// CertificateFiles are certificates to log in with, each with the key
	// it certifies (ssh_config's CertificateFile; an identity file's
	// FILE-cert.pub is tried too, as ssh does).
	CertificateFiles []string
	// ConnectTimeout, when not 0, is how long connecting may take
	// (ssh_config's ConnectTimeout) instead of --connect-timeout.
	ConnectTimeout time.Duration
	// AliveInterval and AliveCountMax, when not 0, are ssh_config's
	// ServerAliveInterval and ServerAliveCountMax: a keepalive every
	// AliveInterval (instead of --keepalive), and the connection is given
	// up after AliveCountMax go unanswered (default 3, as ssh).
	AliveInterval time.Duration
	AliveCountMax int
	// Unhonoured names the keys ssh_config sets for this host that would
	// change how ssh connects, and that gpudispatch does not honour (yet):
	// the user is told, rather than left to wonder why ssh and gpudispatch
	// disagree.
	Unhonoured []string
	// ProxyCommand, when set, is the command (run by sh, its tokens
	// expanded) whose stdin and stdout are the connection to the server, as
	// ssh_config's ProxyCommand: no TCP connection is made, and HostName
	// need not resolve here.
	ProxyCommand string
	// KnownHosts are the files host keys are checked against (missing ones
	// count as empty); new keys are recorded in the first.
	KnownHosts []string
	// AcceptNew records the key of a host that known_hosts does not know
	// (StrictHostKeyChecking accept-new); HashKnownHosts hashes the name.
	AcceptNew      bool
	HashKnownHosts bool
}

// Key is what makes two targets one server to a pool: all but the name.
// Host keys are checked by address, so aliases of one server can share
// its connections.
func (t Target) Key() string {
	k := t
	k.Name, k.Jump = "", nil
	s := fmt.Sprintf("%#v", k)
	if t.Jump != nil {
		s += " via " + t.Jump.Key()
	}
	return s
}

// Addr is host:port.
func (t Target) Addr() string { return net.JoinHostPort(t.Hostname, strconv.Itoa(t.Port)) }

// keyName is the host:port that known_hosts records the host's key under:
// its HostKeyAlias when it has one, taken as ssh takes it, verbatim, with
// no port added (a bracketed [host]:port alias names that host and port;
// a plain one is a name of port 22's form, as known_hosts writes it).
func (t Target) keyName() string {
	alias := t.HostKeyAlias
	if alias == "" {
		return t.Addr()
	}
	if host, port, err := net.SplitHostPort(alias); err == nil && strings.HasPrefix(alias, "[") {
		return net.JoinHostPort(host, port)
	}
	return net.JoinHostPort(alias, "22")
}

// Config is an ssh_config file: resolved by OpenSSH's own client (ssh -G,
// see sshg.go) where it is installed, else parsed here, and parsed here
// when it is plain (plain.go). Its zero value is no ssh_config.
type Config struct {
	path string
	// ssh is the OpenSSH client that resolves hosts, or "".
	ssh string
	cfg *ssh_config.Config
}

// LoadConfig reads the inventory's ssh_config: "none" disables it, ""
// means ~/.ssh/config, which may be missing. Where OpenSSH's client is on
// PATH it resolves each host (every Match criterion, Include, tokens)
// unless the file is plain; else the file is parsed here, which
// understands only Host and Match all/host.
func LoadConfig(path string) (*Config, error) {
	ssh, _ := exec.LookPath("ssh")
	return loadConfig(path, ssh)
}

func loadConfig(path, ssh string) (*Config, error) {
	if path == "none" {
		return &Config{}, nil
	}
	explicit := path != ""
	if !explicit {
		path = "~/.ssh/config"
	}
	path = expandTilde(path)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) && !explicit {
		return &Config{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ssh_config: %w", err)
	}
	defer f.Close()
	text, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("ssh_config: %w", err)
	}
	if ssh != "" && plain(text) {
		if cfg, err := ssh_config.Decode(bytes.NewReader(text)); err == nil {
			return &Config{path: path, cfg: cfg}, nil
		}
	}
	if ssh != "" {
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, fmt.Errorf("ssh_config: %w", err)
		}
		return &Config{path: abs, ssh: ssh}, nil
	}
	cfg, err := ssh_config.Decode(bytes.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("ssh_config %s: %w (without OpenSSH's ssh on PATH, only Host and Match all/host are understood; install openssh-client, or set ssh_config: none in the inventory to skip it)", path, err)
	}
	return &Config{path: path, cfg: cfg}, nil
}

func (c *Config) get(alias, key string) (string, error) {
	if c.cfg == nil {
		return "", nil
	}
	v, err := c.cfg.Get(alias, key)
	if err != nil {
		return "", fmt.Errorf("ssh_config %s: %s for %s: %w", c.path, key, alias, err)
	}
	return v, nil
}

func (c *Config) getAll(alias, key string) ([]string, error) {
	if c.cfg == nil {
		return nil, nil
	}
	v, err := c.cfg.GetAll(alias, key)
	if err != nil {
		return nil, fmt.Errorf("ssh_config %s: %s for %s: %w", c.path, key, alias, err)
	}
	return v, nil
}

// unhonoured are the ssh_config keys that change how ssh connects which
// gpudispatch does not follow: a host that sets one is warned about.
var unhonoured = []string{"ProxyUseFdpass", "AddressFamily", "BindAddress", "BindInterface", "CanonicalizeHostname"}

// Resolve works out how to reach h: its inventory entry first, then
// ssh_config for its name, then the inventory's defaults, then OpenSSH's.
// acceptNew is --accept-new-host-keys.
func Resolve(inv *inventory.Inventory, cfg *Config, h inventory.Host, acceptNew bool) (Target, error) {
	return resolveAlias(inv, cfg, h.Name, h.Connection, inv.Defaults, acceptNew, 0)
}

func resolveAlias(inv *inventory.Inventory, cfg *Config, name string, entry, defaults inventory.Connection, acceptNew bool, depth int) (Target, error) {
	t := Target{Name: name}
	var errs []error
	var r resolved
	if cfg.ssh != "" {
		var err error
		if r, err = sshG(cfg.ssh, cfg.path, name, entry, defaults); err != nil {
			return t, err
		}
	}
	get := func(key string) string {
		if r != nil {
			return r.get(strings.ToLower(key))
		}
		v, err := cfg.get(name, key)
		errs = append(errs, err)
		return v
	}
	getAll := func(key string) []string {
		if r != nil {
			return r[strings.ToLower(key)]
		}
		v, err := cfg.getAll(name, key)
		errs = append(errs, err)
		return v
	}
	// ssh lowercases the name it connects to; ssh -G prints it so, its %
	// tokens expanded.
	hostname := get("HostName")
	if r == nil {
		hostname = expandTokens(hostname, name, "", "", 0)
	}
	t.Hostname = cmp.Or(entry.Hostname, strings.ToLower(cmp.Or(hostname, name)))
	port := get("Port")
	t.Port = entry.Port
	if t.Port == 0 && port != "" {
		p, err := strconv.Atoi(port)
		if err != nil || p < 1 || p > 65535 {
			errs = append(errs, fmt.Errorf("ssh_config %s: Port %q for %s is not a port", cfg.path, port, name))
		}
		t.Port = p
	}
	if t.Port == 0 {
		t.Port = defaults.Port
	}
	if t.Port == 0 {
		t.Port = 22
	}
	// An address as ssh writes it: 127.1 is 127.0.0.1, 0:: is ::.
	if a, ok := inetAton(t.Hostname); ok {
		t.Hostname = a.String()
	} else if a, err := netip.ParseAddr(t.Hostname); err == nil {
		t.Hostname = a.String()
	}
	t.User = cmp.Or(entry.User, get("User"), defaults.User, localUser())

	ids := []string{entry.IdentityFile}
	if entry.IdentityFile == "" {
		ids = append(getAll("IdentityFile"), defaults.IdentityFile)
	}
	for _, id := range ids {
		if id != "" {
			t.IdentityFiles = append(t.IdentityFiles, expandTilde(expandTokens(id, name, t.Hostname, t.User, t.Port)))
		}
	}
	t.IdentitiesOnly = strings.EqualFold(get("IdentitiesOnly"), "yes")

	t.KnownHosts = []string{inv.KnownHosts}
	if inv.KnownHosts == "" {
		t.KnownHosts = strings.Fields(get("UserKnownHostsFile"))
		if len(t.KnownHosts) == 0 {
			t.KnownHosts = []string{"~/.ssh/known_hosts", "~/.ssh/known_hosts2"}
		}
		global := strings.Fields(get("GlobalKnownHostsFile"))
		if len(global) == 0 {
			global = []string{"/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"}
		}
		t.KnownHosts = append(t.KnownHosts, global...)
	}
	for i, f := range t.KnownHosts {
		t.KnownHosts[i] = expandTilde(expandTokens(f, name, t.Hostname, t.User, t.Port))
	}
	switch strings.ToLower(get("StrictHostKeyChecking")) {
	case "accept-new", "no", "off", "false":
		// "no" would also accept changed keys in OpenSSH; gpudispatch never
		// does, so it means accept-new here.
		t.AcceptNew = true
	}
	t.AcceptNew = t.AcceptNew || acceptNew
	t.HashKnownHosts = strings.EqualFold(get("HashKnownHosts"), "yes")

	t.HostKeyAlias = strings.ToLower(get("HostKeyAlias")) // as ssh
	switch agent := get("IdentityAgent"); {
	case agent == "", strings.EqualFold(agent, "none"), agent == "SSH_AUTH_SOCK":
		t.IdentityAgent = agent
	default:
		t.IdentityAgent = expandTilde(os.ExpandEnv(expandTokens(agent, name, t.Hostname, t.User, t.Port)))
	}
	for _, f := range getAll("CertificateFile") {
		t.CertificateFiles = append(t.CertificateFiles, expandTilde(expandTokens(f, name, t.Hostname, t.User, t.Port)))
	}
	if v := get("ConnectTimeout"); v != "" && !strings.EqualFold(v, "none") {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("ssh_config %s: ConnectTimeout %q for %s is not a number of seconds", cfg.path, v, name))
		}
		t.ConnectTimeout = time.Duration(n) * time.Second
	}
	if v := get("ServerAliveInterval"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("ssh_config %s: ServerAliveInterval %q for %s is not a number of seconds", cfg.path, v, name))
		}
		t.AliveInterval = time.Duration(n) * time.Second
	}
	if v := get("ServerAliveCountMax"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("ssh_config %s: ServerAliveCountMax %q for %s is not a positive number", cfg.path, v, name))
		}
		t.AliveCountMax = n
	}
	for _, key := range unhonoured {
		if v := get(key); v != "" {
			t.Unhonoured = append(t.Unhonoured, key+" "+v)
		}
	}
	jump := cmp.Or(entry.ProxyJump, get("ProxyJump"), defaults.ProxyJump)
	if pc := get("ProxyCommand"); pc != "" && !strings.EqualFold(pc, "none") && entry.ProxyJump == "" && defaults.ProxyJump == "" {
		// As OpenSSH, whichever of ProxyCommand and ProxyJump ssh_config
		// gives: the inventory's proxy_jump wins over both.
		t.ProxyCommand = expandTokens(pc, name, t.Hostname, t.User, t.Port)
		if jump != "" && get("ProxyJump") != "" {
			errs = append(errs, fmt.Errorf("ssh_config %s: %s has both ProxyCommand and ProxyJump: keep one", cfg.path, name))
		}
		jump = ""
	}
	if err := errors.Join(errs...); err != nil {
		return t, err
	}
	if jump != "" && !strings.EqualFold(jump, "none") {
		if strings.Contains(jump, ",") {
			return t, fmt.Errorf("%s: ProxyJump %q: only one jump host is supported", name, jump)
		}
		if depth > 0 {
			return t, fmt.Errorf("%s: ProxyJump %q: the jump host itself needs a jump host, which is not supported", name, jump)
		}
		jt, err := resolveJump(inv, cfg, jump, acceptNew)
		if err != nil {
			return t, fmt.Errorf("%s: ProxyJump: %w", name, err)
		}
		t.Jump = &jt
	}
	return t, nil
}

// resolveJump resolves a ProxyJump value, [user@]host[:port]. A bastion that
// is an inventory host uses its entry; any other is resolved through
// ssh_config alone (the inventory's defaults are for job hosts).
func resolveJump(inv *inventory.Inventory, cfg *Config, spec string, acceptNew bool) (Target, error) {
	var entry inventory.Connection
	if u, rest, ok := strings.Cut(spec, "@"); ok {
		entry.User, spec = u, rest
	}
	if host, port, err := net.SplitHostPort(spec); err == nil && port == "" {
		spec = host // as ssh: no port but the default
	} else if err == nil {
		p, err := strconv.Atoi(port)
		if err != nil {
			return Target{}, fmt.Errorf("%q: bad port", spec)
		}
		spec, entry.Port = host, p
	}
	// ssh -G prints an address jump host in brackets, also without a port.
	if len(spec) > 1 && spec[0] == '[' && spec[len(spec)-1] == ']' {
		spec = spec[1 : len(spec)-1]
	}
	if h := inv.HostNamed(spec); h != nil {
		entry.Hostname, entry.IdentityFile = h.Hostname, h.IdentityFile
		entry.User = cmp.Or(entry.User, h.User)
		if entry.Port == 0 {
			entry.Port = h.Port
		}
	}
	return resolveAlias(inv, cfg, spec, entry, inventory.Connection{}, acceptNew, 1)
}

// expandTokens expands ssh_config's %h (host name), %n (the name as given),
// %r (remote user), %p (port, when known: not 0), %u (local user), %d
// (local home) and %%.
func expandTokens(s, name, hostname, remoteUser string, port int) string {
	if !strings.Contains(s, "%") {
		return s
	}
	home, _ := os.UserHomeDir()
	if hostname == "" {
		hostname = name
	}
	pairs := []string{"%%", "%", "%h", hostname, "%n", name, "%r", remoteUser, "%u", localUser(), "%d", home}
	if port != 0 {
		pairs = append(pairs, "%p", strconv.Itoa(port))
	}
	return strings.NewReplacer(pairs...).Replace(s)
}

func expandTilde(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[1:])
		}
	}
	return p
}

func localUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return os.Getenv("USER")
}

// inetAton reads an IPv4 address as inet_aton(3) does, also in short
// (0, 127.1, 0x7f.1, 010.0.0.1), as ssh connects to one.
func inetAton(v string) (netip.Addr, bool) {
	parts := strings.Split(v, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var n [4]uint64
	for i, p := range parts {
		base := 10
		switch {
		case len(p) > 1 && (p[:2] == "0x" || p[:2] == "0X"):
			base, p = 16, p[2:]
		case len(p) > 1 && p[0] == '0':
			base, p = 8, p[1:]
		}
		var err error
		if n[i], err = strconv.ParseUint(p, base, 32); err != nil && !(base == 16 && p == "") {
			return netip.Addr{}, false
		}
	}
	// The last part fills the bytes the others leave.
	last := len(parts) - 1
	if n[last] >= 1<<(8*(4-last)) {
		return netip.Addr{}, false
	}
	var b [4]byte
	for i := range last {
		if n[i] > 255 {
			return netip.Addr{}, false
		}
		b[i] = byte(n[i])
	}
	for i := 3; i >= last; i-- {
		b[i] = byte(n[last] >> (8 * (3 - i)))
	}
	return netip.AddrFrom4(b), true
}
