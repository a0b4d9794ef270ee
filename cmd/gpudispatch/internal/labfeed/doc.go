// Package labfeed opens a run's hosts and feeds the run what changes in
// its lab, so that the command's code is flags and wiring only.
//
// Start opens every host in the background and returns once one is up
// (a dry run, once every host has answered), with the warnings a user
// should read about those that cannot be used; a run with no usable host
// does not start. Settle waits for every host, keeping a line on a
// terminal that says which hosts it still waits for, and what for. A
// Feed turns what happens afterwards into dispatch.Updates, one at a
// time, each with the hosts as the lab has them then (so that none undoes
// an earlier one): hosts that finish being opened, and edits of the
// inventory file (whose hosts it opens). Absent names each host that is
// not up, and why, with its address.
package labfeed
