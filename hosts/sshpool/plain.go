package sshpool

import (
	"bufio"
	"bytes"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A plain ssh_config, most users' (Host blocks of a few settings), is
// resolved by this package's parser even where OpenSSH's client is
// installed: ssh -G would say the same (TestResolveMatchesSSHG,
// FuzzPlainResolvesAsSSHG) and costs each host a process, ~6 ms of CPU and
// as long a wait before it connects (0.6 s of CPU for 100 hosts). Anything
// the parser could read otherwise than ssh goes to ssh -G: bytes that are
// not UTF-8, control characters, several words where ssh reads one, Match,
// Include, a key it does not know, quotes, a comment after a value, an
// environment variable, a % token but where Resolve expands it, both
// ProxyJump and ProxyCommand (ssh takes whichever comes first),
// CanonicalizeHostname (ssh reads the file again).

// readKeys are the ssh_config keys (lower case) that Resolve reads, true
// for those whose % tokens it expands as ssh does.
var readKeys = map[string]bool{
	"host": false, "hostname": true, "port": false, "user": false, "identityfile": true, "identitiesonly": false,
	"userknownhostsfile": false, "globalknownhostsfile": false, "stricthostkeychecking": false, "hashknownhosts": false,
	"hostkeyalias": true, "identityagent": false, "certificatefile": true, "connecttimeout": false,
	"serveraliveinterval": false, "serveralivecountmax": false, "proxyjump": false, "proxycommand": true,
	"proxyusefdpass": false, "addressfamily": false, "bindaddress": false, "bindinterface": false,
}

// manyWords are the keys read whose value may be several words.
var manyWords = map[string]bool{"host": true, "proxycommand": true, "userknownhostsfile": true, "globalknownhostsfile": true}

// otherKeys are common ssh_config keys (lower case) that change nothing
// Resolve reads: their values do not matter here.
var otherKeys = map[string]bool{
	"forwardagent": true, "forwardx11": true, "forwardx11trusted": true, "compression": true,
	"controlmaster": true, "controlpath": true, "controlpersist": true, "loglevel": true,
	"addkeystoagent": true, "requesttty": true, "localforward": true, "remoteforward": true,
	"dynamicforward": true, "sendenv": true, "setenv": true, "tcpkeepalive": true,
	"preferredauthentications": true, "pubkeyauthentication": true, "passwordauthentication": true,
	"kbdinteractiveauthentication": true, "batchmode": true, "checkhostip": true, "visualhostkey": true,
	"updatehostkeys": true, "exitonforwardfailure": true, "gssapiauthentication": true,
}

// plain reports whether the ssh_config text is one that this package's
// parser resolves as ssh -G does.
func plain(text []byte) bool {
	if !utf8.Valid(text) || bytes.ContainsFunc(text, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' }) {
		return false
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		// KEY VALUE, KEY=VALUE or KEY = VALUE.
		key, value := line, ""
		if i := strings.IndexAny(line, " \t="); i >= 0 {
			key, value = line[:i], strings.TrimLeft(line[i:], " \t")
			value = strings.TrimSpace(strings.TrimPrefix(value, "="))
		}
		key = strings.ToLower(key)
		if otherKeys[key] {
			continue
		}
		tokens, read := readKeys[key]
		if !read || strings.ContainsAny(value, "\"#$") || strings.Contains(value, "%") && !tokens ||
			!manyWords[key] && len(strings.Fields(value)) > 1 {
			return false
		}
		seen[key] = true
	}
	return sc.Err() == nil && !(seen["proxyjump"] && seen["proxycommand"])
}
