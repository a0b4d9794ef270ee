package sshpool

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// plainCases are ssh_configs, and whether this package's parser resolves
// them where OpenSSH's client is installed.
var plainCases = []struct {
	name, config string
	plain        bool
}{
	{"empty", "", true},
	{"comments and blank lines", "# mine\n\n   # indented\nHost a\n  User b\n", true},
	{"key=value", "Host a\n  Port=2222\n  User = b\n", true},
	{"tokens where Resolve expands them", "Host *\n  HostName %h.lab\n  IdentityFile ~/.ssh/%r\n  ProxyCommand nc %h %p\n", true},
	{"keys Resolve does not read, any value", "Host *\n  ControlPath ~/.ssh/cm-%r@%h:%p\n  LocalForward 8888 localhost:8888\n  SendEnv \"LANG\"\n", true},
	{"Match", "Match host a\n  User b\n", false},
	{"Match all", "Match all\n  User b\n", false},
	{"Include", "Include ~/.ssh/lab.d/*\n", false},
	{"a key it does not know", "Host *\n  UseKeychain yes\n", false},
	{"a misspelt key", "Host *\n  Usr bob\n", false},
	{"quotes", "Host *\n  IdentityFile \"~/my keys/lab\"\n", false},
	{"a comment after a value", "Host a\n  Port 22 # the usual\n", false},
	{"an environment variable", "Host *\n  IdentityFile ${HOME}/.ssh/lab\n", false},
	{"a token Resolve does not expand", "Host *\n  User %u\n", false},
	{"ProxyJump and ProxyCommand", "Host a\n  ProxyJump b\nHost c\n  ProxyCommand nc %h %p\n", false},
	{"an IPv4 address", "Host a\n  HostName 10.0.0.12\nHost b\n  HostName fe80::1\n", true},
	{"a name of hex digits", "Host a\n  HostName dead.beef\n", true},
	{"an IPv4 address in short", "Host a\n  HostName 10.1\n  ProxyJump 0x7f.1\nHost b\n  HostName 010.0.0.1\n", true},
	{"CanonicalizeHostname", "CanonicalizeHostname yes\nHost a\n  User b\n", false},
}

func TestPlain(t *testing.T) {
	for _, c := range plainCases {
		if got := plain([]byte(c.config)); got != c.plain {
			t.Errorf("%s: plain = %v, want %v", c.name, got, c.plain)
		}
	}
}

// FuzzPlainResolvesAsSSHG: every ssh_config that plain lets the parser
// resolve, it resolves as ssh -G does, for names in and out of its
// blocks, wherever ssh -G resolves it (ssh refuses a bad value in a key
// gpudispatch does not read, which the parser does not look at).
func FuzzPlainResolvesAsSSHG(f *testing.F) {
	ssh, err := exec.LookPath("ssh")
	if err != nil {
		sshtest.Missing(f, "GPUDISPATCH_REQUIRE_SSHD", "no OpenSSH client here (apt-get install openssh-client)")
	}
	for _, c := range plainCases {
		f.Add(c.config)
	}
	for _, c := range sshGCorpus {
		f.Add(c.config)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, config string) {
		if !plain([]byte(config)) {
			return
		}
		path := filepath.Join(dir, "config")
		if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		parsed, err := loadConfig(path, ssh)
		if err != nil || parsed.ssh != "" {
			return // not parsed here: ssh -G resolves it
		}
		byG := &Config{path: path, ssh: ssh}
		for _, name := range []string{"a", "node1", "GPU-Box", "gpu9", "bastion"} {
			want, errG := Resolve(&inventory.Inventory{}, byG, inventory.Host{Name: name}, false)
			got, errP := Resolve(&inventory.Inventory{}, parsed, inventory.Host{Name: name}, false)
			switch {
			case errG != nil:
				continue
			case errP != nil:
				t.Errorf("%q: %s: %v; ssh -G resolves it", config, name, errP)
			case !reflect.DeepEqual(got, want):
				t.Errorf("%q: %s:\n got %+v, jump %+v\nwant %+v, jump %+v (ssh -G)", config, name, got, got.Jump, want, want.Jump)
			}
		}
	})
}

func TestInetAton(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"10.0.0.12", "10.0.0.12"}, {"0", "0.0.0.0"}, {"127.1", "127.0.0.1"}, {"0x7f.1", "127.0.0.1"},
		{"010.0.0.1", "8.0.0.1"}, {"10.1.2", "10.1.0.2"}, {"0X0", "0.0.0.0"}, {"4294967295", "255.255.255.255"},
		{"0x", "0.0.0.0"}, {"1.2.3.256", ""}, {"256.1", ""}, {"4294967296", ""}, {"08", ""}, {"1.2.3.4.5", ""},
		{"dead.beef", ""}, {"gpu1", ""}, {"", ""}, {"1..2", ""}, {"fe80::1", ""}, {"-1", ""}, {"+1", ""},
	} {
		got := ""
		if a, ok := inetAton(c.in); ok {
			got = a.String()
		}
		if got != c.want {
			t.Errorf("inetAton(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// A jump host named by its address, which ssh -G prints in brackets, is
// reached at that address, whichever resolves the ssh_config.
func TestJumpByAddress(t *testing.T) {
	ssh, err := exec.LookPath("ssh")
	if err != nil {
		sshtest.Missing(t, "GPUDISPATCH_REQUIRE_SSHD", "no OpenSSH client here (apt-get install openssh-client)")
	}
	path := filepath.Join(t.TempDir(), "config")
	os.WriteFile(path, []byte("Host inside1\n  ProxyJump 192.0.2.10\nHost inside2\n  ProxyJump alice@127.1:2222\n"), 0o600)
	parsed, err := loadConfig(path, "")
	if err != nil {
		t.Fatal(err)
	}
	for how, cfg := range map[string]*Config{"ssh -G": {path: path, ssh: ssh}, "parser": parsed} {
		for name, want := range map[string]string{"inside1": "root@192.0.2.10:22", "inside2": "alice@127.0.0.1:2222"} {
			got, err := Resolve(&inventory.Inventory{Defaults: inventory.Connection{User: "root"}}, cfg, inventory.Host{Name: name}, false)
			if err != nil || got.Jump == nil {
				t.Errorf("%s: %s: %v, jump %v", how, name, err, got.Jump)
				continue
			}
			if j := got.Jump.User + "@" + got.Jump.Addr(); j != want {
				t.Errorf("%s: %s: jump %s, want %s", how, name, j, want)
			}
		}
	}
}
