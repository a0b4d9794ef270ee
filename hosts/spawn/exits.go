package spawn

import _ "embed"

// Exit statuses of the scripts gpudispatch runs on a machine, as the
// coordinator reads them. Prelude gives the scripts the same numbers by
// name ($_g_x_usage, ...); a test checks that the two agree, and that no
// script spells one as a bare number.
//
// Prelude also names the status a script ends with when what the
// coordinator sent is not what it takes ($_g_x_usage): the coordinator
// reads it as any failure, and has no name for it.
const (
	// ExitGone: what the script was to work on is not there, or changed
	// under it (a job no longer kept, a workdir gone, a base another
	// build replaced meanwhile).
	ExitGone = 3
	// ExitTimedOut: what it waited for did not answer in time (the
	// status timeout(1) itself exits with).
	ExitTimedOut = 124
	// ExitUnread: it could not read what the coordinator sent.
	ExitUnread = 125
	// ExitUnsafe: it could not make, or would not use, its files (a
	// directory not its user's, a lock dir others could redirect, an
	// environment it cannot activate).
	ExitUnsafe = 126
	// ExitNotFound: a command it needs is not installed (bash's own
	// status for a command not found).
	ExitNotFound = 127
)

// Prelude is what every script is sent first: the scripts' side of the
// exit statuses and of the layout (Spool, CodeStore), as shell
// assignments.
//
//go:embed prelude.sh
var Prelude string
