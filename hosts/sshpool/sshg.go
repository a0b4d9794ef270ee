package sshpool

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/gpudispatch/gpudispatch/inventory"
)

// OpenSSH resolves its own configuration best: Match blocks (host,
// originalhost, user, localuser, exec...), Include, first value wins. Where
// its client is installed, a host's settings are what `ssh -G` prints for
// it, given the inventory entry's HostName, Port and User (-o, which win as
// on ssh's command line, and which Match blocks see) and, after the user's
// ssh_config, the inventory's default User and Port (which apply where
// ssh_config sets none). What ssh -G prints but leaves unexpanded (%
// tokens in IdentityFile, CertificateFile, ProxyCommand; ~) is expanded
// here, as ssh does when it connects.

// sshGTimeout bounds one ssh -G: it runs no network but Match exec
// commands.
const sshGTimeout = 20 * time.Second

// resolved is what ssh -G printed for a host: each key (lower case) and
// its values in order (IdentityFile and CertificateFile may repeat).
type resolved map[string][]string

// sshG runs ssh -G for name with the ssh_config at path.
func sshG(ssh, path, name string, entry, defaults inventory.Connection) (resolved, error) {
	wrapper := "Include " + strconv.Quote(path) + "\nHost *\n"
	if defaults.User != "" {
		wrapper += "  User " + strconv.Quote(defaults.User) + "\n"
	}
	if defaults.Port != 0 {
		wrapper += "  Port " + strconv.Itoa(defaults.Port) + "\n"
	}
	args := []string{"-G", "-F", "/dev/stdin"}
	if entry.Hostname != "" {
		args = append(args, "-o", "HostName="+entry.Hostname)
	}
	if entry.Port != 0 {
		args = append(args, "-o", "Port="+strconv.Itoa(entry.Port))
	}
	if entry.User != "" {
		args = append(args, "-o", "User="+entry.User)
	}
	ctx, cancel := context.WithTimeout(context.Background(), sshGTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, ssh, append(args, "--", name)...)
	cmd.Stdin = strings.NewReader(wrapper)
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	if err := cmd.Run(); err != nil {
		msg := strings.Join(strings.Fields(strings.ReplaceAll(errs.String(), "\n", " / ")), " ")
		return nil, fmt.Errorf("ssh_config %s: ssh -G %s: %v: %s (set ssh_config: none in the inventory to skip it)", path, name, err, msg)
	}
	r := resolved{}
	for line := range strings.Lines(out.String()) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok {
			r[k] = append(r[k], v)
		}
	}
	r.dropDefaults()
	return r, nil
}

// dropDefaults removes what ssh -G prints when nothing set it, so that the
// caller applies its own defaults (from $HOME, which ssh does not read).
func (r resolved) dropDefaults() {
	builtin := map[string]bool{}
	for _, f := range []string{"id_rsa", "id_ecdsa", "id_ecdsa_sk", "id_ed25519", "id_ed25519_sk", "id_xmss", "id_dsa"} {
		builtin["~/.ssh/"+f] = true
	}
	ids := r["identityfile"]
	all := len(ids) > 0
	for _, f := range ids {
		all = all && builtin[f]
	}
	if all {
		delete(r, "identityfile")
	}
	home := ""
	if u, err := user.Current(); err == nil {
		home = u.HomeDir
	}
	if r.get("userknownhostsfile") == home+"/.ssh/known_hosts "+home+"/.ssh/known_hosts2" {
		delete(r, "userknownhostsfile")
	}
	if r.get("globalknownhostsfile") == "/etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2" {
		delete(r, "globalknownhostsfile")
	}
	for k, dflt := range map[string]string{"connecttimeout": "none", "serveraliveinterval": "0", "serveralivecountmax": "3",
		"addressfamily": "any", "canonicalizehostname": "false", "proxyusefdpass": "no", "stricthostkeychecking": "ask",
		"hashknownhosts": "no", "identitiesonly": "no"} {
		if r.get(k) == dflt {
			delete(r, k)
		}
	}
}

// get is key's first value, or "".
func (r resolved) get(key string) string {
	if v := r[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}
