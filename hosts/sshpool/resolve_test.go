package sshpool

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpudispatch/gpudispatch/inventory"
	"github.com/skeema/knownhosts"
)

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ssh_config")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Settings come from the inventory entry, then ssh_config, then defaults,
// then OpenSSH's own defaults.
func TestResolvePrecedence(t *testing.T) {
	home, _ := os.UserHomeDir()
	cfgPath := writeConfig(t, `Host node1
  HostName 10.0.0.1
  Port 2201
  User cfguser
  IdentityFile ~/.ssh/node1_key
  IdentityFile /keys/%h-%r
  IdentitiesOnly yes
  StrictHostKeyChecking accept-new
  HashKnownHosts yes
  UserKnownHostsFile ~/lab_known /etc/other_known

Host *.lab
  HostName %h.example.org
  ProxyJump jumpuser@bastion:2222

Host bastion
  HostName 192.0.2.1
`)
	cfg, err := LoadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	inv := &inventory.Inventory{Defaults: inventory.Connection{User: "defuser", Port: 2000, IdentityFile: "~/.ssh/default_key"}}
	tests := []struct {
		name  string
		entry inventory.Connection
		want  Target
	}{
		{name: "node1", want: Target{Name: "node1", Hostname: "10.0.0.1", Port: 2201, User: "cfguser",
			IdentityFiles: []string{home + "/.ssh/node1_key", "/keys/10.0.0.1-cfguser", home + "/.ssh/default_key"}, IdentitiesOnly: true,
			KnownHosts: []string{home + "/lab_known", "/etc/other_known", "/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"},
			AcceptNew:  true, HashKnownHosts: true}},
		{name: "node1", entry: inventory.Connection{Hostname: "h", Port: 7, User: "u", IdentityFile: "/k"},
			want: Target{Name: "node1", Hostname: "h", Port: 7, User: "u", IdentityFiles: []string{"/k"}, IdentitiesOnly: true,
				KnownHosts: []string{home + "/lab_known", "/etc/other_known", "/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"},
				AcceptNew:  true, HashKnownHosts: true}},
		{name: "plain", want: Target{Name: "plain", Hostname: "plain", Port: 2000, User: "defuser", IdentityFiles: []string{home + "/.ssh/default_key"},
			KnownHosts: []string{home + "/.ssh/known_hosts", home + "/.ssh/known_hosts2", "/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"}}},
	}
	for _, tt := range tests {
		got, err := resolveAlias(inv, cfg, tt.name, tt.entry, inv.Defaults, false, 0)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.name, got, tt.want)
		}
	}

	// %h in HostName, and a ProxyJump with user and port.
	got, err := Resolve(inv, cfg, inventory.Host{Name: "gpu3.lab"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hostname != "gpu3.lab.example.org" || got.Jump == nil || got.Jump.Hostname != "192.0.2.1" || got.Jump.Port != 2222 || got.Jump.User != "jumpuser" {
		t.Errorf("got %+v, jump %+v", got, got.Jump)
	}
	// The inventory's known_hosts wins over ssh_config's.
	inv.KnownHosts = "/my/known"
	got, _ = Resolve(inv, cfg, inventory.Host{Name: "node1"}, false)
	if !reflect.DeepEqual(got.KnownHosts, []string{"/my/known"}) {
		t.Errorf("known_hosts: %v", got.KnownHosts)
	}
}

func TestSSHConfigErrors(t *testing.T) {
	t.Parallel()
	if _, err := LoadConfig("/nonexistent/config"); err == nil || !strings.Contains(err.Error(), "/nonexistent/config") {
		t.Errorf("missing explicit config: %v", err)
	}
	// Without OpenSSH's client, the file is parsed here: a Match it does
	// not understand is an error that names the file and the way out.
	bad := writeConfig(t, "Match user alice\n  Port 2\n")
	if _, err := loadConfig(bad, ""); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "ssh_config: none") {
		t.Errorf("unsupported Match: %v", err)
	}
	if ssh, err := exec.LookPath("ssh"); err == nil {
		// With it, what ssh cannot read fails the host, naming the file.
		c, _ := loadConfig(writeConfig(t, "Host x\n  NoSuchKey 1\n"), ssh)
		if _, err := Resolve(&inventory.Inventory{}, c, inventory.Host{Name: "x"}, false); err == nil || !strings.Contains(err.Error(), "line 2: Bad configuration option: nosuchkey") || !strings.Contains(err.Error(), "ssh_config: none") {
			t.Errorf("unknown key through ssh -G: %v", err)
		}
	}
	c, err := LoadConfig("none")
	if err != nil || c.cfg != nil {
		t.Errorf("none: %v %v", c, err)
	}
	port := writeConfig(t, "Host x\n  Port http\n")
	c, _ = loadConfig(port, "")
	if _, err := Resolve(&inventory.Inventory{}, c, inventory.Host{Name: "x"}, false); err == nil || !strings.Contains(err.Error(), `Port "http"`) {
		t.Errorf("bad port: %v", err)
	}
	chain := writeConfig(t, "Host x\n  ProxyJump a,b\n")
	c, _ = LoadConfig(chain)
	if _, err := Resolve(&inventory.Inventory{}, c, inventory.Host{Name: "x"}, false); err == nil || !strings.Contains(err.Error(), "only one jump host") {
		t.Errorf("jump chain: %v", err)
	}
}

// ProxyCommand is honoured as ssh does: its tokens expanded (%h the
// HostName, %p the port, %r the user, %n the name, %% a %), no jump host
// with it, "none" for none, and the inventory's proxy_jump wins over it.
func TestResolveProxyCommand(t *testing.T) {
	cfg, err := LoadConfig(writeConfig(t, `Host behind
  HostName behind.invalid
  Port 2222
  User bob
  ProxyCommand ssh -W %h:%p -l %r bastion %n 100%%

Host direct
  ProxyCommand none
  HostKeyAlias lab-direct
  IdentityAgent ~/.1password/agent.sock
  CertificateFile ~/.ssh/id_ed25519-cert.pub
`))
	if err != nil {
		t.Fatal(err)
	}
	inv := &inventory.Inventory{}
	for _, tc := range []struct {
		name  string
		entry inventory.Connection
		want  string
		jump  bool
	}{
		{"behind", inventory.Connection{}, "ssh -W behind.invalid:2222 -l bob bastion behind 100%", false},
		{"direct", inventory.Connection{}, "", false},
		{"behind", inventory.Connection{ProxyJump: "bastion"}, "", true},
	} {
		got, err := resolveAlias(inv, cfg, tc.name, tc.entry, inv.Defaults, false, 0)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		home, _ := os.UserHomeDir()
		if tc.name == "direct" && (len(got.Unhonoured) != 0 || !reflect.DeepEqual(got.CertificateFiles, []string{home + "/.ssh/id_ed25519-cert.pub"}) ||
			got.HostKeyAlias != "lab-direct" || got.IdentityAgent != home+"/.1password/agent.sock") {
			t.Errorf("direct: HostKeyAlias %q, IdentityAgent %q, certificates %q, keys not followed %q", got.HostKeyAlias, got.IdentityAgent, got.CertificateFiles, got.Unhonoured)
		}
		if got.ProxyCommand != tc.want || (got.Jump != nil) != tc.jump {
			t.Errorf("%s %+v: ProxyCommand %q, jump %v; want %q, %v", tc.name, tc.entry, got.ProxyCommand, got.Jump != nil, tc.want, tc.jump)
		}
	}
}

// A HostKeyAlias names the host key as ssh uses it, verbatim: the line
// known_hosts holds (or gets) for it is the alias itself, with no port
// added, also when it is the [host]:port that ssh writes for a port that
// is not 22.
func TestKeyName(t *testing.T) {
	for _, tc := range []struct {
		alias     string
		port      int
		want, rec string
	}{
		{"", 2222, "127.0.0.1:2222", "[127.0.0.1]:2222"},
		{"", 22, "127.0.0.1:22", "127.0.0.1"},
		{"behind-key", 2222, "behind-key:22", "behind-key"},
		{"[127.0.0.1]:23002", 2222, "127.0.0.1:23002", "[127.0.0.1]:23002"},
		{"[::1]:2200", 22, "[::1]:2200", "[::1]:2200"},
	} {
		tg := Target{Hostname: "127.0.0.1", Port: tc.port, HostKeyAlias: tc.alias}
		if got := tg.keyName(); got != tc.want {
			t.Errorf("alias %q, port %d: looked up as %q, want %q", tc.alias, tc.port, got, tc.want)
		}
		if got := knownhosts.Normalize(tg.keyName()); got != tc.rec {
			t.Errorf("alias %q, port %d: recorded as %q, want %q", tc.alias, tc.port, got, tc.rec)
		}
	}
}
