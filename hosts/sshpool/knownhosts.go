package sshpool

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/skeema/knownhosts"
	"golang.org/x/crypto/ssh"
	xknownhosts "golang.org/x/crypto/ssh/knownhosts"
)

// ErrHostKeyChanged means a host presented a key other than the one
// known_hosts records for it: possibly an attack, always refused.
var ErrHostKeyChanged = errors.New("host key changed")

// ErrHostKeyUnknown means known_hosts has no key for the host and accepting
// new keys was not asked for.
var ErrHostKeyUnknown = errors.New("host key unknown")

// hostKeyCheck returns the host key callback for t and the key algorithms
// to ask for: those known_hosts has for the host, so that the server does
// not offer a key type the file lacks (golang/go#29286). The host is looked
// up by its resolved address, also behind a jump host, where the connection's
// remote address is not its own.
func (d *dialer) hostKeyCheck(t Target) (ssh.HostKeyCallback, []string, error) {
	var existing []string
	for _, f := range t.KnownHosts {
		if _, err := os.Stat(f); err == nil {
			existing = append(existing, f)
		}
	}
	var db *knownhosts.HostKeyDB
	if len(existing) > 0 {
		var err error
		if db, err = knownhosts.NewDB(existing...); err != nil {
			return nil, nil, fmt.Errorf("known_hosts: %w", err)
		}
	}
	addr := t.keyName()
	var algos []string
	if db != nil {
		algos = db.HostKeyAlgorithms(addr)
	}
	cb := func(_ string, remote net.Addr, key ssh.PublicKey) error {
		var err error = &xknownhosts.KeyError{}
		if db != nil {
			// Always check the address as resolved: behind a jump host the
			// remote address is not the target's.
			err = db.HostKeyCallback()(addr, remote, key)
		}
		switch {
		case err == nil:
			return nil
		case knownhosts.IsHostKeyChanged(err):
			var ke *xknownhosts.KeyError
			errors.As(err, &ke)
			var want []string
			for _, k := range ke.Want {
				want = append(want, fmt.Sprintf("%s (%s:%d)", ssh.FingerprintSHA256(k.Key), k.Filename, k.Line))
			}
			return fmt.Errorf("%w: %s presented %s %s, but known_hosts has %s. Someone may be intercepting the connection, or the host was reinstalled; if you know it was, remove the old line and connect once with --accept-new-host-keys",
				ErrHostKeyChanged, addr, key.Type(), ssh.FingerprintSHA256(key), strings.Join(want, ", "))
		case knownhosts.IsHostUnknown(err):
			if !t.AcceptNew {
				return fmt.Errorf("%w: %s presented %s %s, which no known_hosts file (%s) records; check the fingerprint, then run with --accept-new-host-keys (or set StrictHostKeyChecking accept-new in ssh_config) to record it",
					ErrHostKeyUnknown, addr, key.Type(), ssh.FingerprintSHA256(key), strings.Join(t.KnownHosts, ", "))
			}
			return d.recordHostKey(t, key)
		}
		return err
	}
	return cb, algos, nil
}

// recordHostKey appends the host's key to the first known_hosts file, as
// OpenSSH's accept-new does: [host]:port when the port is not 22, hashed
// when ssh_config says HashKnownHosts yes.
func (d *dialer) recordHostKey(t Target, key ssh.PublicKey) error {
	if len(t.KnownHosts) == 0 {
		return errors.New("no known_hosts file to record the host key in")
	}
	file := t.KnownHosts[0]
	name := knownhosts.Normalize(t.keyName())
	if t.HashKnownHosts {
		name = xknownhosts.HashHostname(name)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("recording host key: %w", err)
	}
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("recording host key: %w", err)
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, knownhosts.Line([]string{name}, key)); err != nil {
		return fmt.Errorf("recording host key in %s: %w", file, err)
	}
	return nil
}
