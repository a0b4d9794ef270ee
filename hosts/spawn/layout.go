package spawn

// CodeStore is where the content store of the snapshots of code is in the
// user's home on a machine, as the coordinator names it ("~" is the home
// there); Prelude gives the scripts the same ($_g_d_code). The spool
// ($_g_d_spool) is the scripts' alone: the coordinator never names it.
const CodeStore = "~/.gpudispatch/code"

// FreePort is a script that prints a TCP port from 29500 up (torchrun's
// default and the ports after it, below Linux's ephemeral range) that no
// socket on the machine uses, in any state, by /proc/net/tcp and tcp6: a
// job over several hosts (or nodes of a batch system) gets it as its
// MASTER_PORT. It looks from a random place in the range (two jobs started
// together on one host do not pick the same one) and goes round it once.
// Plain sh and awk (mawk too), as the login shell may be any.
const FreePort = `cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk -v lo=29500 -v n=3000 -v r="$(od -An -N2 -tu2 /dev/urandom)" '
{ split($2, a, ":"); used[a[2]] = 1 }
END {
  for (i = 0; i < n; i++) {
    p = lo + (r + i) % n
    if (!(sprintf("%04X", p) in used)) { print p; exit 0 }
  }
  print "no free port from " lo " to " lo + n - 1 > "/dev/stderr"
  exit 1
}'
`
