package jobshell

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
)

// followScript is run by bash on the job's machine; see follow.sh.
//
//go:embed follow.sh
var followScript string

// followCode is what a follower runs: followScript after the exit
// statuses' names.
var followCode = spawn.Prelude + followScript

// FollowerName is a follower's $0.
const FollowerName = "gpudispatch-follow"

// errNotKept is follow.sh's exit status when the machine keeps nothing of
// the job.
const errNotKept = spawn.ExitGone

// Follow takes up the job tagged tag that a job shell started on the
// machine that start runs bash on, and whose shell this coordinator lost
// (or an earlier coordinator started): it streams the job's stdout and
// stderr past the first outOff and errOff bytes, from what its shell kept,
// and returns as Shells.Run does once the job has ended, with when it
// ended. When ctx ends the job is cancelled and Follow waits for its end.
// An error wraps executor.ErrJobLost when nothing of the job is kept, or
// its shell ended before it (the machine was restarted, or someone killed
// the shell); it is a *LostError when the follower itself was cut off.
// Once the job's end is home, what the machine kept of it is removed.
func Follow(ctx context.Context, start spawn.Func, tag string, outOff, errOff int64, grace time.Duration, stdout, stderr io.Writer) (code int, end time.Time, err error) {
	if !ValidTag(tag) {
		return -1, time.Time{}, fmt.Errorf("follow: bad tag %q", tag)
	}
	out, errs := newHeaded(stdout, true), newHeaded(stderr, false)
	p, err := start(ctx, spawn.Bootstrap(followCode, FollowerName, followArgs(tag, outOff, errOff, grace, false)...), out, errs)
	if err != nil {
		return -1, time.Time{}, err
	}
	stdin := &serialized{w: p.Stdin}
	go stdin.Write([]byte(followCode))
	ended := make(chan error, 1)
	go func() { ended <- p.Wait() }()
	var tail string
	outDone, errDone, cancelled := false, false, false
	done := ctx.Done()
	for !outDone || !errDone {
		select {
		case tail = <-out.end:
			outDone = true
		case <-errs.end:
			errDone = true
		case <-done:
			if errors.Is(context.Cause(ctx), executor.ErrDetached) {
				stdin.Close()
				return -1, time.Time{}, context.Cause(ctx)
			}
			cancelled, done = true, nil
			go stdin.Write([]byte("c"))
		case werr := <-ended:
			select {
			case tail = <-out.end:
				outDone = true
			default:
			}
			select {
			case <-errs.end:
				errDone = true
			default:
			}
			if outDone && errDone {
				break // the loop ends: the job's end came
			}
			lost := &LostError{Err: werr, OutBytes: outOff + out.abort(), ErrBytes: errOff + errs.abort()}
			code, exited := spawn.ExitStatus(werr)
			switch {
			case !exited:
				return -1, time.Time{}, lost
			case code == errNotKept:
				return -1, time.Time{}, fmt.Errorf("%w: the host keeps nothing of attempt %s (it never started there, or the host was started again)", executor.ErrJobLost, tag)
			case code == 0:
				return -1, time.Time{}, fmt.Errorf("%w: the job shell of job %s ended before it (the machine restarted, or someone killed it)", executor.ErrJobLost, tag)
			}
			return -1, time.Time{}, fmt.Errorf("following job %s: %w", tag, lost)
		}
	}
	stdin.Write([]byte("d"))
	stdin.Close()
	e, err := parseEnd(tail)
	if err != nil {
		return -1, time.Time{}, err
	}
	if cancelled {
		return e.code, e.at, fmt.Errorf("job stopped: %w", context.Cause(ctx))
	}
	if err := e.err(); err != nil {
		return e.code, e.at, err
	}
	if werr := cmp.Or(out.writeErr(), errs.writeErr()); werr != nil {
		return e.code, e.at, fmt.Errorf("writing the job's output: %w", werr)
	}
	return e.code, e.at, nil
}

// headed is a follower's output stream: a first line that holds the job's
// end mark, then the job's stream, split at the mark as a shell's stream
// is.
type headed struct {
	mu         sync.Mutex
	started    bool // the head came
	head       []byte
	s          *stream
	w          io.Writer
	wantStatus bool
	end        chan string // the stream's end, once the head came
}

func newHeaded(w io.Writer, wantStatus bool) *headed {
	return &headed{s: &stream{}, w: w, wantStatus: wantStatus, end: make(chan string, 1)}
}

func (h *headed) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(p)
	if !h.started {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			h.head = append(h.head, p...)
			return n, nil
		}
		line := string(append(h.head, p[:i]...))
		h.head, p, h.started = nil, p[i+1:], true
		mark, _, _ := strings.Cut(line, " ")
		h.s.startInto(h.end, h.w, mark, h.wantStatus)
	}
	if len(p) > 0 {
		h.s.Write(p)
	}
	return n, nil
}

// abort is stream.abort, before or after the head.
func (h *headed) abort() int64 { return h.s.abort() }

func (h *headed) writeErr() error { return h.s.writeErr() }

// followArgs are a follower's arguments (see follow.sh): the job's tag,
// the bytes of its stdout and stderr the coordinator has, the grace
// (seconds), and "kill" to stop the job rather than follow it. Then it is
// told, on its stdin, "c" to cancel the job and "d" once its end is home,
// a letter each (a record with no fields, as a job shell's "c" and "q").
func followArgs(tag string, outOff, errOff int64, grace time.Duration, kill bool) []string {
	args := []string{tag, strconv.FormatInt(outOff, 10), strconv.FormatInt(errOff, 10), strconv.FormatFloat(grace.Seconds(), 'f', 3, 64)}
	if kill {
		args = append(args, "kill")
	}
	return args
}

// Stop stops the job tagged tag on the machine that start runs bash on, as
// a cancel does (TERM to its group, KILL after grace), and returns once its
// group is gone: a job given up for lost is stopped when its machine
// answers again. Nothing is done when the machine keeps no such job, or
// was started again since.
func Stop(ctx context.Context, start spawn.Func, tag string, grace time.Duration) error {
	if !ValidTag(tag) {
		return fmt.Errorf("stop: bad tag %q", tag)
	}
	p, err := start(ctx, spawn.Bootstrap(followCode, FollowerName, followArgs(tag, 0, 0, grace, true)...), io.Discard, io.Discard)
	if err != nil {
		return err
	}
	p.Stdin.Write([]byte(followCode))
	p.Stdin.Close()
	err = p.Wait()
	if code, ok := spawn.ExitStatus(err); ok && (code == 0 || code == errNotKept) {
		return nil
	}
	return fmt.Errorf("stopping job %s: %w", tag, err)
}

// KeptScript lists what a machine keeps with no coordinator (kept.sh). A
// caller may run it in a bash of its own, after spawn.Prelude, with
// KeptArgs, giving each record it writes to KeptReport.Add: a GPU lock
// holder does so as it starts (gpulock.Prologue), which spares the
// machine a session.
//
//go:embed kept.sh
var KeptScript string

// keptCode is what a lister of its own runs: KeptScript after the prelude.
var keptCode = spawn.Prelude + KeptScript

// Kept is a job that a machine's job shells keep with no coordinator: it
// runs on, or it ended and its output waits for a coordinator (a run with
// --resume on its log dir).
type Kept struct {
	Tag     string    `json:"tag"`
	Running bool      `json:"running"`
	Since   time.Time `json:"since"`
	// GPUs is the job's CUDA_VISIBLE_DEVICES ("-": none).
	GPUs string `json:"gpus"`
	// About names the log dir, run, job and attempt.
	About string `json:"about"`
}

// KeptReport is what a machine keeps with no coordinator, and whether it
// would keep it.
type KeptReport struct {
	Jobs []Kept
	// KillsAtLogout is set when systemd-logind there kills the user's
	// processes as their last session ends (KillUserProcesses=yes) and the
	// user has no linger: a job left with no coordinator would die then.
	KillsAtLogout bool
	// LogindSilent is set when logind there did not answer within the
	// limit: whether it would kill them is not known.
	LogindSilent bool
}

// KeptArgs are the lister's arguments (see kept.sh): how long each ask of
// logind may take (limit), in seconds (at least one). It is sent nothing
// else.
func KeptArgs(limit time.Duration) []string {
	return []string{strconv.FormatFloat(max(limit, time.Second).Seconds(), 'f', 3, 64)}
}

// ListKept lists the jobs that the machine start runs bash on keeps with no
// coordinator. Each ask of the machine's logind (whether it would kill
// them) may take limit.
func ListKept(ctx context.Context, start spawn.Func, limit time.Duration) (KeptReport, error) {
	var out, errs strings.Builder
	p, err := start(ctx, spawn.Bootstrap(keptCode, "gpudispatch-kept", KeptArgs(limit)...), &out, &errs)
	if err != nil {
		return KeptReport{}, err
	}
	p.Stdin.Write([]byte(keptCode))
	p.Stdin.Close()
	if err := p.Wait(); err != nil {
		return KeptReport{}, fmt.Errorf("listing the jobs kept there: %w: %s", err, strings.TrimSpace(errs.String()))
	}
	var kept KeptReport
	r := bufio.NewReader(strings.NewReader(out.String()))
	for {
		f, err := spawn.ReadRecord(r)
		switch {
		case errors.Is(err, io.EOF):
			return kept, nil
		case err != nil:
			return kept, fmt.Errorf("listing the jobs kept there: %w", err)
		}
		kept.Add(f)
	}
}

// Add takes in a record of the lister (KeptScript); it ignores others.
func (k *KeptReport) Add(f []string) {
	switch {
	case len(f) == 2 && f[0] == "logind":
		k.KillsAtLogout = k.KillsAtLogout || f[1] == "kill-at-logout"
		k.LogindSilent = k.LogindSilent || f[1] == "silent"
	case len(f) == 6 && f[0] == "job":
		secs, _ := strconv.ParseInt(f[3], 10, 64)
		k.Jobs = append(k.Jobs, Kept{Tag: f[1], Running: f[2] == "running", Since: time.Unix(secs, 0), GPUs: f[4], About: f[5]})
	}
}
