# gpudispatch: the exit statuses of the scripts it runs on a machine, by
# name. Sent before each script; spawn/exits.go gives the coordinator the
# same numbers, and a test checks that the two agree.
_g_x_usage=2      # what the coordinator sent is not what the script takes
_g_x_gone=3       # what it was to work on is not there, or changed under it
_g_x_timedout=124 # what it waited for did not answer in time (timeout(1)'s own)
_g_x_unread=125   # it could not read what the coordinator sent
_g_x_unsafe=126   # it could not make, or would not use, its files
_g_x_notfound=127 # a command it needs is not installed (bash's own)
