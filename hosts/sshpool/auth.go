package sshpool

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// defaultIdentities are OpenSSH's, tried when nothing names a key.
var defaultIdentities = []string{"~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa"}

// signers collects the keys to offer t: ssh-agent's (only those matching
// t's identity files when IdentitiesOnly is set), then the identity files
// themselves. The returned closer releases the agent connection.
func signers(t Target) ([]ssh.Signer, func(), error) {
	files := t.IdentityFiles
	explicit := len(files) > 0
	if !explicit {
		for _, f := range defaultIdentities {
			files = append(files, expandTilde(f))
		}
	}
	var out []ssh.Signer
	closer := func() {}
	var agentKeys []ssh.Signer
	sock := os.Getenv("SSH_AUTH_SOCK")
	switch {
	case strings.EqualFold(t.IdentityAgent, "none"):
		sock = ""
	case t.IdentityAgent != "" && t.IdentityAgent != "SSH_AUTH_SOCK":
		sock = t.IdentityAgent
	}
	if sock != "" {
		if conn, err := net.Dial("unix", sock); err == nil {
			closer = func() { conn.Close() }
			agentKeys, _ = agent.NewClient(conn).Signers()
		}
	}
	var wanted [][]byte // public keys of the identity files, for IdentitiesOnly
	var fileErrs []error
	var fileSigners []ssh.Signer
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			if explicit || !errors.Is(err, os.ErrNotExist) {
				fileErrs = append(fileErrs, fmt.Errorf("identity file %s: %w", f, err))
			}
			continue
		}
		s, err := ssh.ParsePrivateKey(data)
		var pm *ssh.PassphraseMissingError
		switch {
		case errors.As(err, &pm):
			if pm.PublicKey != nil {
				wanted = append(wanted, pm.PublicKey.Marshal())
			}
			fileErrs = append(fileErrs, fmt.Errorf("identity file %s is protected by a passphrase and no ssh-agent holds it: run ssh-add %s", f, f))
		case err != nil:
			fileErrs = append(fileErrs, fmt.Errorf("identity file %s: %w", f, err))
		default:
			wanted = append(wanted, s.PublicKey().Marshal())
			fileSigners = append(fileSigners, s)
		}
	}
	for _, k := range agentKeys {
		if t.IdentitiesOnly && !containsKey(wanted, k.PublicKey().Marshal()) {
			continue // many agent keys would use up sshd's MaxAuthTries
		}
		out = append(out, k)
	}
	out = append(out, fileSigners...)
	certs, err := certSigners(t, files, append(agentKeys, fileSigners...))
	if err != nil {
		closer()
		return nil, nil, err
	}
	out = append(certs, out...)
	if len(out) == 0 {
		closer()
		if len(fileErrs) > 0 {
			return nil, nil, errors.Join(fileErrs...)
		}
		return nil, nil, errors.New("no key to log in with: start ssh-agent and ssh-add a key, or set identity_file in the inventory")
	}
	return out, closer, nil
}

// certSigners pairs t's certificates with the keys they certify, among
// keys: those CertificateFile names (a missing one is an error) and each
// identity file's FILE-cert.pub, as ssh does. They are offered first.
func certSigners(t Target, identities []string, keys []ssh.Signer) ([]ssh.Signer, error) {
	type certFile struct {
		path     string
		explicit bool
	}
	var files []certFile
	for _, f := range t.CertificateFiles {
		files = append(files, certFile{f, true})
	}
	for _, f := range identities {
		files = append(files, certFile{f + "-cert.pub", false})
	}
	var out []ssh.Signer
	for _, f := range files {
		data, err := os.ReadFile(f.path)
		if err != nil {
			if f.explicit {
				return nil, fmt.Errorf("certificate file %s: %w", f.path, err)
			}
			continue
		}
		pub, _, _, _, err := ssh.ParseAuthorizedKey(data)
		cert, ok := pub.(*ssh.Certificate)
		if err != nil || !ok {
			if f.explicit {
				return nil, fmt.Errorf("certificate file %s: not an OpenSSH certificate", f.path)
			}
			continue
		}
		for _, k := range keys {
			if !bytes.Equal(k.PublicKey().Marshal(), cert.Key.Marshal()) {
				continue
			}
			if s, err := ssh.NewCertSigner(cert, k); err == nil {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

func containsKey(keys [][]byte, k []byte) bool {
	for _, w := range keys {
		if bytes.Equal(w, k) {
			return true
		}
	}
	return false
}
