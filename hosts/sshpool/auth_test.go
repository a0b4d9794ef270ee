package sshpool

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

func newKeyFile(t *testing.T, dir, name string, passphrase string) (ed25519.PrivateKey, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var block *pem.Block
	if passphrase == "" {
		block, err = ssh.MarshalPrivateKey(priv, "")
	} else {
		block, err = ssh.MarshalPrivateKeyWithPassphrase(priv, "", []byte(passphrase))
	}
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	return priv, path
}

// serveAgent runs an ssh-agent holding keys on a socket and points
// SSH_AUTH_SOCK at it.
func serveAgent(t *testing.T, keys ...ed25519.PrivateKey) {
	t.Helper()
	ring := agent.NewKeyring()
	for _, k := range keys {
		if err := ring.Add(agent.AddedKey{PrivateKey: k}); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				agent.ServeAgent(ring, c)
			}()
		}
	}()
	t.Setenv("SSH_AUTH_SOCK", sock)
}

func TestSignersPassphraseKeyWithoutAgent(t *testing.T) {
	t.Setenv("SSH_AUTH_SOCK", "")
	dir := t.TempDir()
	_, locked := newKeyFile(t, dir, "locked", "secret")
	_, _, err := signers(Target{IdentityFiles: []string{locked}})
	if err == nil || !strings.Contains(err.Error(), "identity file "+locked+" is protected by a passphrase") || !strings.Contains(err.Error(), "ssh-add "+locked) {
		t.Fatalf("err = %v", err)
	}
	_, _, err = signers(Target{IdentityFiles: []string{filepath.Join(dir, "missing")}})
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing key: %v", err)
	}
}

// With IdentitiesOnly, of the agent's keys only those of the identity files
// are offered (many keys would use up sshd's MaxAuthTries); a passphrase key
// the agent holds is used through the agent.
func TestSignersAgentAndIdentitiesOnly(t *testing.T) {
	dir := t.TempDir()
	lockedPriv, locked := newKeyFile(t, dir, "locked", "secret")
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	serveAgent(t, lockedPriv, other)
	want, _ := ssh.NewSignerFromKey(lockedPriv)

	keys, closeAgent, err := signers(Target{IdentityFiles: []string{locked}, IdentitiesOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer closeAgent()
	if len(keys) != 1 || string(keys[0].PublicKey().Marshal()) != string(want.PublicKey().Marshal()) {
		t.Errorf("IdentitiesOnly: got %d keys", len(keys))
	}
	all, closeAll, err := signers(Target{IdentityFiles: []string{locked}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	if len(all) != 2 {
		t.Errorf("without IdentitiesOnly: got %d keys, want both of the agent's", len(all))
	}
}

// IdentityAgent picks the agent as ssh does: a socket of its own (macOS
// agents such as 1Password's or Secretive's), none, or SSH_AUTH_SOCK's.
func TestSignersIdentityAgent(t *testing.T) {
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	serveAgent(t, priv)
	sock := os.Getenv("SSH_AUTH_SOCK")
	t.Setenv("HOME", t.TempDir()) // no default identity files
	for _, tc := range []struct {
		agent, env string
		keys       int
	}{
		{"", sock, 1},
		{"SSH_AUTH_SOCK", sock, 1},
		{"none", sock, 0},
		{sock, "", 1}, // its own socket, SSH_AUTH_SOCK unset
	} {
		t.Setenv("SSH_AUTH_SOCK", tc.env)
		keys, closeAgent, err := signers(Target{IdentityAgent: tc.agent})
		if err == nil {
			closeAgent()
		} else if tc.keys > 0 {
			t.Fatalf("IdentityAgent %q: %v", tc.agent, err)
		}
		if len(keys) != tc.keys {
			t.Errorf("IdentityAgent %q with SSH_AUTH_SOCK %q: %d keys, want %d", tc.agent, tc.env, len(keys), tc.keys)
		}
	}
}
