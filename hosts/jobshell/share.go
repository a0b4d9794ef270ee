package jobshell

import (
	"context"
	"strings"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
)

// State is what a job shell that read a machine's login profile and set up
// a Prelude hands on (login "share" in shell.sh), so that the machine's
// other shells for that Prelude copy it instead of reading the profile
// again: on a server whose /etc/profile.d loads Lmod, a login profile
// costs tens of milliseconds of CPU, once per slot otherwise.
type State struct {
	// At is when the reader began to read the profile, in microseconds
	// since 1970: a copy finds a profile file changed since then stale.
	At string
	// Dir is the directory the reader was in once set up.
	Dir string
	// Vars is its variables (declare -p) and umask; Saved is its functions,
	// aliases, traps and options, as a job's fork takes them back.
	Vars, Saved string
	// Path is its PATH, for what looks for a command as a job would (a
	// GPU lock holder's nvidia-smi). A copy is not sent it: it is in Vars.
	Path string
	// Odiff is the options it set otherwise than a bash has them as it
	// starts (the same for every bash of the machine): a copy takes them
	// rather than compare a hundred lines again.
	Odiff string
	// Reader is the reader's tag: a copy takes its reference file (as old
	// as At) while it is there, rather than make one of its own.
	Reader string
}

// parts is the state's parts a copy reads, in its order: Saved as the
// reader splits it (splitSaved).
func (st *State) parts() []string {
	funcs, rest, opts := splitSaved(st.Saved)
	return []string{st.At, st.Dir, st.Vars, funcs, rest, opts, st.Odiff, st.Reader}
}

// Markers in what a shell saves of its profile's set-up (_g_saved in
// shell.sh): functions, the aliases marker, aliases and traps, the options
// marker, options.
const (
	aliasesMark = "#gpudispatch-aliases\n"
	optsMark    = "\n#opts\n"
)

// splitSaved cuts a State's Saved as shell.sh cuts it for a job's fork:
// the functions (the starter's), the aliases and traps (each job's), the
// options. Bash takes a millisecond or two to cut a few kilobytes with
// its patterns: a copy is given the parts.
func splitSaved(s string) (funcs, rest, opts string) {
	rest = s
	if before, after, ok := strings.Cut(rest, optsMark); ok {
		rest, opts = before+"\n", after
	}
	if before, after, ok := strings.Cut(rest, aliasesMark); ok {
		funcs, rest = before, after
	}
	return funcs, rest, opts
}

// stateOf is the State a shell handed on with its hello: the record's
// fields (its parts, then its PATH and Odiff), or nil when they are not a
// state's (a copy is given at least a byte of each part; a PATH and
// Odiff may be empty).
func stateOf(f []string) *State {
	if len(f) != 6 {
		return nil
	}
	total := 0
	for i, x := range f {
		if x == "" && i < 4 {
			return nil
		}
		total += len(x)
	}
	if total > maxState {
		return nil
	}
	return &State{At: f[0], Dir: f[1], Vars: f[2], Saved: f[3], Path: f[4], Odiff: f[5]}
}

// sharing is the state of a machine's login shell for one Prelude, as its
// first shell reads it: done is closed once that shell is set up, handed
// the state on (st), or could not. why is set when its set-up outlasted
// its limit: the shells that waited for it are unfit as it was, rather
// than each waiting that long again.
type sharing struct {
	done chan struct{}
	st   *State
	why  string
}

// reader says how a new shell for the Prelude whose key is key starts:
// reading the profile and handing its state on (share, the first), or
// copying what the first hands on (wait for from, then from.st; nil: the
// first could not, and this one reads the profile too).
func (ss *Shells) reader(key string) (from *sharing, share bool) {
	if ss.sup.Login != LoginPerSlot {
		return nil, false
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if s := ss.shared[key]; s != nil {
		return s, false
	}
	s := &sharing{done: make(chan struct{})}
	ss.shared[key] = s
	return s, true
}

// handOn waits until the sharing shell sh is set up, or ends, and keeps
// what it handed on for the Prelude whose key is key. A shell that ends
// before it is set up (unfit, or cut off), or whose profile changed a
// limit, hands nothing on: the next new shell reads the profile and tries
// again.
func (ss *Shells) handOn(key string, s *sharing, sh *shell) {
	select {
	case <-sh.out.ready:
		if s.st = sh.out.handedState(); s.st != nil {
			s.st.Reader = sh.tag
		}
	case <-sh.ended:
		if spawn.Signal(sh.err) == "USR2" {
			s.why, _ = ss.setUpEnded(&LostError{Err: sh.err})
		}
	}
	if s.st == nil {
		ss.forget(key, s)
	}
	close(s.done)
}

// forget drops s, the sharing of the Prelude whose key is key, when it is
// still the one kept: its state is stale, or was never handed on.
func (ss *Shells) forget(key string, s *sharing) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.shared[key] == s {
		delete(ss.shared, key)
	}
}

// start starts a new shell for the job tagged tag, to set up p: the
// machine's first for p reads the login profile and hands its state on;
// the others, started meanwhile or later, copy it once it is handed on,
// and read the profile themselves when it is not.
func (ss *Shells) start(ctx context.Context, tag string, p executor.Prelude) (*shell, error) {
	key := p.Key()
	// Counted as starting before it is the reader: a command that waits
	// meanwhile waits for it (await).
	ss.mu.Lock()
	ss.starting[key]++
	ss.mu.Unlock()
	from, share := ss.reader(key)
	sh, err := startShell(ctx, ss.spawn, tag, key)
	if err == nil {
		ss.track(sh, tag != "")
	}
	ss.mu.Lock()
	ss.starting[key]--
	ss.changedLocked()
	ss.mu.Unlock()
	switch {
	case err != nil && share:
		ss.forget(key, from)
		close(from.done)
		return nil, err
	case err != nil:
		return nil, err
	case share:
		sh.pending, sh.from = header(ss.sup, p, true, nil), from
		go ss.handOn(key, from, sh)
	case from != nil:
		st, why := copied(ctx, from)
		if why != "" {
			sh.close()
			return nil, &executor.UnfitError{Why: why}
		}
		if st != nil {
			sh.from = from
		}
		sh.pending = header(ss.sup, p, false, st)
	default:
		sh.pending = header(ss.sup, p, false, nil)
	}
	return sh, nil
}

// LoginPath is the PATH the machine's login shell sets, as the first of
// its shells that set up nothing read it, once that shell handed its state
// on.
func (ss *Shells) LoginPath() (string, bool) {
	ss.mu.Lock()
	s := ss.shared[executor.Prelude{}.Key()]
	ss.mu.Unlock()
	if s == nil {
		return "", false
	}
	select {
	case <-s.done:
	default:
		return "", false
	}
	if s.st == nil || s.st.Path == "" {
		return "", false
	}
	return s.st.Path, true
}

// copied waits for the state s hands on, and returns it; nil when it
// hands none (the shell then reads the profile itself) or ctx ends. why
// says the first shell's set-up outlasted its limit.
func copied(ctx context.Context, s *sharing) (st *State, why string) {
	select {
	case <-s.done:
		return s.st, s.why
	case <-ctx.Done():
		return nil, ""
	}
}
