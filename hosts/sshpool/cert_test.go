package sshpool

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// newKey writes a new ed25519 private key to path and returns its signer.
func newKey(t *testing.T, path string) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A key that sshd does not know logs in with a certificate of a CA it
// trusts: the one ssh_config's CertificateFile names, or the key's own
// FILE-cert.pub, as ssh finds it.
func TestCertificateLogin(t *testing.T) {
	t.Setenv("SSH_AUTH_SOCK", "")
	dir := t.TempDir()
	ca := newKey(t, filepath.Join(dir, "ca"))
	os.WriteFile(filepath.Join(dir, "ca.pub"), ssh.MarshalAuthorizedKey(ca.PublicKey()), 0o644)
	l := sshtest.Start(t, sshtest.Options{Hosts: 1, GPUs: 1, UserCA: filepath.Join(dir, "ca.pub")})
	me, _ := user.Current()
	key := filepath.Join(dir, "user_key")
	userKey := newKey(t, key)
	cert := &ssh.Certificate{Key: userKey.PublicKey(), CertType: ssh.UserCert, KeyId: "test",
		ValidPrincipals: []string{me.Username}, ValidAfter: uint64(time.Now().Add(-time.Minute).Unix()), ValidBefore: ssh.CertTimeInfinity,
		Permissions: ssh.Permissions{Extensions: map[string]string{"permit-pty": ""}}}
	if err := cert.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, certFile, line string }{
		{"CertificateFile", filepath.Join(dir, "lab.cert"), "  CertificateFile " + filepath.Join(dir, "lab.cert") + "\n"},
		{"FILE-cert.pub", key + "-cert.pub", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(filepath.Join(dir, "lab.cert"))
			os.Remove(key + "-cert.pub")
			os.WriteFile(tc.certFile, ssh.MarshalAuthorizedKey(cert), 0o644)
			cfg, _ := os.ReadFile(l.SSHConfig)
			text := strings.Replace(string(cfg), "IdentityFile "+l.ClientKey, "IdentityFile "+key+"\n"+tc.line, 1)
			path := filepath.Join(dir, "ssh_config")
			os.WriteFile(path, []byte(text), 0o644)
			ps, pools, _ := openAliases(t, aliasInventory(t, path, []string{"node1"}))
			defer ps.Close()
			if pools["node1"] == nil {
				t.Fatal("no pool")
			}
			if out, err := run(pools["node1"], "echo $FAKE_HOST"); err != nil || out != "node1\n" {
				t.Errorf("%q, %v", out, err)
			}
		})
	}
	// Without the certificate the key is refused: the test proves the
	// certificate logged in.
	os.Remove(key + "-cert.pub")
	cfg, _ := os.ReadFile(l.SSHConfig)
	path := filepath.Join(dir, "plain_config")
	os.WriteFile(path, []byte(strings.Replace(string(cfg), "IdentityFile "+l.ClientKey, "IdentityFile "+key, 1)), 0o644)
	c, _ := LoadConfig(path)
	target, err := Resolve(aliasInventory(t, path, []string{"node1"}), c, aliasInventory(t, path, []string{"node1"}).Hosts[0], false)
	if err != nil {
		t.Fatal(err)
	}
	ps := NewPools(5*time.Second, time.Second)
	defer ps.Close()
	if _, _, err := ps.Acquire(t.Context(), target); err == nil {
		t.Error("the key without its certificate logged in")
	}
}
