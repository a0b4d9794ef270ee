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
// While it draws, the terminal echoes control characters as themselves,
// not as "^C": an echo two columns wide where the cursor is would shift
// the next line printed above the view onto a piece of the bar. The view
// is left as its progress line alone at the end, which the summary
// follows: no slot line stays in the scrollback.
//
// The model knows the run only from its events (dispatch.Event), the same
// ones the journal gets, so it needs no access to the run's state.
package live
