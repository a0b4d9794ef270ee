package sshpool

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// sshGCorpus are realistic ssh_configs, with the names looked up in each;
// parser marks those the parser of this package (used without OpenSSH's
// client) understands too: no Match but "all", no Include; plain those it
// resolves even where OpenSSH's client is installed (plain.go).
var sshGCorpus = []struct {
	name          string
	config        string
	hosts         []string
	parser, plain bool
}{
	{"wildcards and first value wins", `Host gpu? !gpu9
  HostName %h.lab.example.org
  User alice
  Port 2201
Host gpu*
  User nobody
  Port 22
  IdentityFile ~/.ssh/lab_%r
  IdentityFile ~/.ssh/id_ed25519
  UserKnownHostsFile ~/.ssh/lab_known_hosts
Host *
  ServerAliveInterval 15
  ServerAliveCountMax 4
  ConnectTimeout 7
`, []string{"gpu1", "gpu9", "gpux2", "other"}, true, true},
	{"proxies and tokens", `Host bastion
  HostName 192.0.2.10
  User jump
Host behind-*
  ProxyCommand ssh -W %h:%p -l %r bastion %n 100%%
  HostKeyAlias %n.alias
  CertificateFile ~/.ssh/%r-cert.pub
Host viajump
  ProxyJump jump@bastion:2222
  HostName 10.1.2.3
`, []string{"behind-a", "viajump", "bastion"}, true, false},
	{"a jump host by its address", `Host inside*
  ProxyJump 192.0.2.10
Host inside2
  ProxyJump alice@192.0.2.11:2222
`, []string{"inside1", "inside2"}, true, true},
	{"a laptop's config", `# lab servers
Host GPU-Box gpubox
  HostName GPUBox.Lab.Example.org
  User=alice
  ForwardAgent yes
  ControlMaster auto
  ControlPath ~/.ssh/cm-%r@%h:%p
  ControlPersist 10m

Host *
  AddKeysToAgent yes
  ServerAliveInterval = 30
  IdentityFile ~/.ssh/lab_ed25519
`, []string{"GPU-Box", "gpubox", "GPU-box", "Elsewhere"}, true, true},
	{"a key the parser does not know", `Host *
  IgnoreUnknown UseKeychain
  UseKeychain yes
  User bob
`, []string{"node1"}, false, false},
	{"an environment variable", `Host node*
  User ${LOGNAME}
  IdentityFile ${HOME}/.ssh/lab
`, []string{"node1"}, false, false},
	{"Match blocks", `Match originalhost node* user bob
  Port 2300
Host node*
  HostName 10.0.0.1
Match host 10.0.0.*
  User labuser
  IdentityFile ~/.ssh/lab_key
Match localuser ` + localUser() + `
  ConnectTimeout 9
Match exec "test -n '%h'"
  ServerAliveInterval 11
Match all
  UserKnownHostsFile /etc/lab_known
`, []string{"node1", "elsewhere"}, false, false},
	{"Include and IgnoreUnknown", `IgnoreUnknown UseKeychain,AddKeysToAgent
Host *
  UseKeychain yes
Include @DIR@/lab.d/*.conf
Host *
  User fallback
`, []string{"node1", "node7"}, false, false},
}

// Every host of every config resolves to what OpenSSH's own ssh -G says:
// the name, port, user, identity files, proxy, known_hosts files, host key
// alias, certificates, timeouts. Through ssh -G itself, and through this
// package's parser where it applies.
func TestResolveMatchesSSHG(t *testing.T) {
	ssh, err := exec.LookPath("ssh")
	if err != nil {
		sshtest.Missing(t, "GPUDISPATCH_REQUIRE_SSHD", "no OpenSSH client here (apt-get install openssh-client)")
	}
	u, _ := user.Current()
	for _, c := range sshGCorpus {
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "lab.d"), 0o755)
		os.WriteFile(filepath.Join(dir, "lab.d", "a.conf"), []byte("Host node7\n  Port 2207\n  HostName seven.example.org\n"), 0o644)
		path := filepath.Join(dir, "config")
		os.WriteFile(path, []byte(strings.ReplaceAll(c.config, "@DIR@", dir)), 0o644)
		loaded, err := loadConfig(path, ssh)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if (loaded.ssh == "") != c.plain {
			t.Errorf("%s: resolved by ssh -G: %v, want %v", c.name, loaded.ssh != "", !c.plain)
		}
		resolvers := map[string]*Config{"ssh -G": {path: path, ssh: ssh}, "as loaded": loaded}
		if c.parser {
			if resolvers["parser"], err = loadConfig(path, ""); err != nil {
				t.Fatalf("%s, parser: %v", c.name, err)
			}
		}
		for how, cfg := range resolvers {
			for _, name := range c.hosts {
				got, err := Resolve(&inventory.Inventory{}, cfg, inventory.Host{Name: name}, false)
				if err != nil {
					t.Errorf("%s, %s: %s: %v", c.name, how, name, err)
					continue
				}
				want := fromSSHG(t, ssh, path, name, u.HomeDir)
				got.Name, got.Jump = "", nil
				if got.Unhonoured != nil {
					t.Errorf("%s, %s: %s: not honoured: %v", c.name, how, name, got.Unhonoured)
				}
				got.Unhonoured = nil
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s, %s: %s:\n got %+v\nwant %+v (ssh -G)", c.name, how, name, got, want)
				}
			}
		}
	}
}

// fromSSHG reads what ssh -G prints for name into the Target it means,
// with the defaults this package applies where ssh's are its own (its
// identity files, its known_hosts under home).
func fromSSHG(t *testing.T, ssh, path, name, home string) Target {
	t.Helper()
	out, err := exec.Command(ssh, "-G", "-F", path, name).Output()
	if err != nil {
		t.Fatalf("ssh -G %s: %v", name, err)
	}
	g := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
		g[k] = append(g[k], v)
	}
	one := func(k string) string { return g[k][0] }
	port, _ := strconv.Atoi(one("port"))
	want := Target{Hostname: one("hostname"), Port: port, User: one("user"), IdentitiesOnly: one("identitiesonly") == "yes",
		AcceptNew: one("stricthostkeychecking") == "false" || one("stricthostkeychecking") == "accept-new", HashKnownHosts: one("hashknownhosts") == "yes"}
	expand := func(s string) string { return expandTilde(expandTokens(s, name, want.Hostname, want.User, want.Port)) }
	// ssh's own list, when nothing names a key, is left to this package's.
	if strings.Join(g["identityfile"], " ") != "~/.ssh/id_rsa ~/.ssh/id_ecdsa ~/.ssh/id_ecdsa_sk ~/.ssh/id_ed25519 ~/.ssh/id_ed25519_sk ~/.ssh/id_xmss ~/.ssh/id_dsa" {
		for _, f := range g["identityfile"] {
			want.IdentityFiles = append(want.IdentityFiles, expand(f))
		}
	}
	for _, f := range g["certificatefile"] {
		want.CertificateFiles = append(want.CertificateFiles, expand(f))
	}
	if v := g["proxycommand"]; v != nil {
		want.ProxyCommand = expand(v[0])
	}
	if v := g["hostkeyalias"]; v != nil {
		want.HostKeyAlias = v[0]
	}
	// ssh expands ~ in known_hosts names with the password file's home;
	// gpudispatch with $HOME, the same outside tests.
	osHome, _ := os.UserHomeDir()
	for _, f := range strings.Fields(one("userknownhostsfile") + " " + one("globalknownhostsfile")) {
		want.KnownHosts = append(want.KnownHosts, strings.Replace(f, home+"/", osHome+"/", 1))
	}
	if v := one("connecttimeout"); v != "none" {
		n, _ := strconv.Atoi(v)
		want.ConnectTimeout = time.Duration(n) * time.Second
	}
	n, _ := strconv.Atoi(one("serveraliveinterval"))
	want.AliveInterval = time.Duration(n) * time.Second
	if v := one("serveralivecountmax"); v != "3" {
		want.AliveCountMax, _ = strconv.Atoi(v)
	}
	return want
}

// A key that would change how ssh connects and that gpudispatch does not
// follow is named, by both resolvers.
func TestUnhonouredKeysAreNamed(t *testing.T) {
	path := writeConfig(t, "Host x\n  AddressFamily inet6\n  BindAddress 127.0.0.2\n")
	ssh, _ := exec.LookPath("ssh")
	for _, with := range []string{ssh, ""} {
		cfg, err := loadConfig(path, with)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Resolve(&inventory.Inventory{}, cfg, inventory.Host{Name: "x"}, false)
		if want := []string{"AddressFamily inet6", "BindAddress 127.0.0.2"}; err != nil || !reflect.DeepEqual(got.Unhonoured, want) {
			t.Errorf("with %q: %v, %v; want %v", with, got.Unhonoured, err, want)
		}
	}
}

// ssh_config's ServerAliveInterval and ServerAliveCountMax set a host's
// keepalives (3 unanswered by default, as ssh); else --keepalive, 2.
func TestAliveFor(t *testing.T) {
	d := newDialer(time.Second, 10*time.Second)
	for _, tc := range []struct {
		t    Target
		want alive
	}{
		{Target{}, alive{10 * time.Second, 2}},
		{Target{AliveInterval: 15 * time.Second}, alive{15 * time.Second, 3}},
		{Target{AliveInterval: 5 * time.Second, AliveCountMax: 6}, alive{5 * time.Second, 6}},
		{Target{AliveCountMax: 4}, alive{10 * time.Second, 4}},
	} {
		if got := d.aliveFor(tc.t); got != tc.want {
			t.Errorf("%+v: %+v, want %+v", tc.t, got, tc.want)
		}
	}
}
