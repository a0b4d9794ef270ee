# gpudispatch: what every script it runs on a machine is sent first. The
# coordinator's side is spawn/exits.go and spawn/layout.go; a test checks
# that the two agree.
#
# The exit statuses that mean something to the coordinator, by name:
_g_x_usage=2      # what the coordinator sent is not what the script takes
_g_x_gone=3       # what it was to work on is not there, or changed under it
_g_x_timedout=124 # what it waited for did not answer in time (timeout(1)'s own)
_g_x_unread=125   # it could not read what the coordinator sent
_g_x_unsafe=126   # it could not make, or would not use, its files
_g_x_notfound=127 # a command it needs is not installed (bash's own)
# Where gpudispatch keeps its files in the user's home there (all of them
# the user's alone): the job shells' spool (their stream files and job
# records), and the content store of the snapshots of code.
_g_d_spool=$HOME/.gpudispatch/jobs
_g_d_code=$HOME/.gpudispatch/code
# What the coordinator sends a script is framed in records (spawn.Record):
# eight digits that give the length of a header, the header (the fields'
# byte lengths, space-separated), then the fields with nothing between
# them. _g_record reads one record from stdin into the array _g_f, in three
# reads whatever its size; $1, when given, is how long to wait for its
# first byte (read -t: a record begun by then is read whole), and $2 the
# descriptor to read instead of stdin. It
# returns read's status when the read fails (more than 128: the wait ran
# out), 1 when stdin ended or the bytes are no record. _g_send writes its
# arguments as one record on stdout (one write); _g_encode sets the
# variable named $1 to the record of the other arguments.
_g_record() {
  local LC_ALL=C IFS=' ' _g_rn _g_rh='' _g_rb='' _g_rl _g_rt=0 _g_ra=0 _g_rs
  _g_f=()
  IFS= read -r -N 8 ${1:+-t "$1"} -u "${2:-0}" _g_rn
  _g_rs=$?
  if [ "$_g_rs" -gt 128 ] && [ -n "$_g_rn" ]; then
    # The wait ran out with the record begun: the rest of it is read, not
    # left to be taken for the start of the next one.
    IFS= read -r -N "$((8 - ${#_g_rn}))" -u "${2:-0}" _g_rl || return 1
    _g_rn+=$_g_rl _g_rs=0
  fi
  [ "$_g_rs" = 0 ] || return "$_g_rs"
  case $_g_rn in '' | *[!0-9]*) return 1 ;; esac
  _g_rn=$((10#$_g_rn))
  [ "$_g_rn" = 0 ] || IFS= read -r -N "$_g_rn" -u "${2:-0}" _g_rh || return 1
  for _g_rl in $_g_rh; do
    case $_g_rl in *[!0-9]*) return 1 ;; esac
    _g_rt=$((_g_rt + _g_rl))
  done
  [ "$_g_rt" = 0 ] || IFS= read -r -N "$_g_rt" -u "${2:-0}" _g_rb || return 1
  [ "${#_g_rb}" = "$_g_rt" ] || return 1
  for _g_rl in $_g_rh; do
    _g_f+=("${_g_rb:_g_ra:_g_rl}")
    _g_ra=$((_g_ra + _g_rl))
  done
}
_g_encode() {
  local LC_ALL=C _g_ev=$1 _g_sh='' _g_sx
  shift
  for _g_sx; do _g_sh+=${_g_sh:+ }${#_g_sx}; done
  printf -v "$_g_ev" '%08d%s' "${#_g_sh}" "$_g_sh"
  printf -v "$_g_ev" '%s' "${!_g_ev}" "$@"
}
_g_send() {
  local _g_so
  _g_encode _g_so "$@"
  printf '%s' "$_g_so"
}
