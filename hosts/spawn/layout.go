package spawn

// CodeStore is where the content store of the snapshots of code is in the
// user's home on a machine, as the coordinator names it ("~" is the home
// there); Prelude gives the scripts the same ($_g_d_code). The spool
// ($_g_d_spool) is the scripts' alone: the coordinator never names it.
const CodeStore = "~/.gpudispatch/code"
