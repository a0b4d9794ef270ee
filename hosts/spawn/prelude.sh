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
