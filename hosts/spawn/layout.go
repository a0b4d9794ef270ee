package spawn

// Where gpudispatch keeps its files in the user's home on a machine, as
// the coordinator names them ("~" is the home there). Prelude gives the
// scripts the same ($_g_d_spool, $_g_d_code).
const (
	// Spool is the job shells' spool: their stream files and job records.
	Spool = "~/.gpudispatch/jobs"
	// CodeStore is the content store of the snapshots of code.
	CodeStore = "~/.gpudispatch/code"
)
