// Package live is the terminal view of a run: a progress bar with
// counts, rate and ETA, and one line per slot with its job and how long it
// has run, redrawn in place while the run goes on. Lines that must stay (a
// failed job, a host that went down, a warning) are printed above the view,
// so nothing else ever writes over it.
//
// The view is a Bubble Tea program (github.com/charmbracelet/bubbletea) in
// inline mode, which does the redrawing, the terminal's size and resizes.
// It reads no input: standard input may be the job file, or the terminal the
// user types jobs on, and Ctrl-C stays the run's own drain/cancel signal.
//
// The model knows the run only from its events (dispatch.Event), the same
// ones the journal gets, so it needs no access to the run's state.
package live
