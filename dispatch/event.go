package dispatch

import (
	"slices"
	"strings"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// EventKind is what an Event says happened, as the journal writes it
// (its "event" field).
type EventKind string

// Kinds of event, as written in the journal.
const (
	EventQueued  EventKind = "queued"
	EventStarted EventKind = "started"
	// EventPending says that a job was handed to its host and has not
	// begun yet: the shell it runs in is being set up there (SettingUp;
	// the job holds its slot), or a batch system (a Slurm cluster) holds
	// it until it starts there, Message being the batch system's reason
	// each time it changes. EventStarted follows once it begins.
	EventPending   EventKind = "pending"
	EventFinished  EventKind = "finished" // exit status 0
	EventFailed    EventKind = "failed"   // non-zero exit, or could not start
	EventTimeout   EventKind = "timeout"
	EventLost      EventKind = "lost" // the host stopped answering mid-job
	EventRetried   EventKind = "retried"
	EventCancelled EventKind = "cancelled"
	EventRejected  EventKind = "rejected"
	// EventStopped says that an attempt ended Unstopped was stopped where
	// it ran, or found ended there (Tag names it).
	EventStopped EventKind = "stopped"
	// Host events name a host and no job.
	EventHostDown EventKind = "host_down" // cannot be reached; Error says why
	EventHostUp   EventKind = "host_up"   // reachable again; Message "opened": up at last after the run started, with its GPUs
	// EventBusy names the GPU a job found busy (locked by another run, or
	// with other people's work under SkipBusy) and the job, which waits.
	EventBusy EventKind = "gpu_busy"
	// EventWarning says what is wrong (Error) with a host (Host) or with
	// the run, without stopping its jobs: an inventory edit that does not
	// load, a host without flock.
	EventWarning EventKind = "warning"
	// EventReloaded says how an edit of the inventory changed the run
	// (Message).
	EventReloaded EventKind = "inventory"
	// EventPriority says that a waiting job's priority was changed (Spec
	// has the new one).
	EventPriority EventKind = "priority"
	// EventReturned says what came back of the files an attempt names for
	// return (Returned, Missing; Message: links not followed, files that
	// changed as they came), or why they could not be fetched (Error);
	// Stdout names the attempt.
	EventReturned EventKind = "returned"
	// EventRun is a run's first line in the journal: Resume says whether
	// it goes on with the runs before it (--resume, serve) or starts
	// afresh, which is where status's latest run begins.
	EventRun EventKind = "run"
)

// Event is one line of journal.jsonl and of --json output.
type Event struct {
	Time  time.Time `json:"time"`
	Event EventKind `json:"event"`
	// Run identifies the gpudispatch invocation (its start time), so a
	// journal appended to by --resume still tells runs apart.
	Run string `json:"run"`
	// Job is the job's id (name= or number); Seq its number in this run.
	// Both are empty in host events.
	Job string `json:"job,omitempty"`
	Seq int    `json:"seq,omitempty"`
	// Source is where the job was read: "cmds.txt:12" or "line 12".
	Source string `json:"source,omitempty"`
	// Text and Occurrence identify the job across runs (--resume).
	Text       string `json:"text,omitempty"`
	Occurrence int    `json:"occurrence,omitempty"`
	// TextBytes holds Text's exact bytes when they are not valid UTF-8,
	// which a JSON string cannot carry (base64).
	TextBytes []byte           `json:"text_bytes,omitempty"`
	Command   string           `json:"command,omitempty"`
	Host      string           `json:"host,omitempty"`
	GPUs      []executor.GPUID `json:"gpus,omitempty"`
	Attempt   int              `json:"attempt,omitempty"`
	// Exit is the exit status (128+n for signal n), when the job ran.
	Exit   *int       `json:"exit,omitempty"`
	Start  *time.Time `json:"start,omitempty"`
	End    *time.Time `json:"end,omitempty"`
	Stdout string     `json:"stdout,omitempty"`
	Stderr string     `json:"stderr,omitempty"`
	Error  string     `json:"error,omitempty"`
	// Message says what happened, for events that are not about a job; on
	// a gpu_busy event, the run that holds the GPU's lock, when that is why.
	Message string `json:"message,omitempty"`
	// SlurmJobID is the job's id in its Slurm cluster (pending, started
	// and final events of a job that ran there).
	SlurmJobID string `json:"slurm_job_id,omitempty"`
	// Tag names the attempt on its host (pending and started events): a
	// later run of the log dir finds it there by it (--resume).
	Tag string `json:"tag,omitempty"`
	// MemMB is the GPU memory the attempt declared on each of its GPUs
	// (started events of a job that declares it).
	MemMB int `json:"mem_mb,omitempty"`
	// Snapshot is the ID of the snapshot of the code the attempt runs in
	// (started and pending events of a run with sync).
	Snapshot string `json:"snapshot,omitempty"`
	// Tree names the log dir's working tree of that snapshot on its host
	// (see executor.Prelude.Tree); none for an attempt of a gpudispatch
	// that ran jobs in the snapshot's own tree.
	Tree string `json:"tree,omitempty"`
	// After, on a queued event, are the jobs it waits for before it joins
	// the queue (after= and after_any=, resolved).
	After []string `json:"after,omitempty"`
	// Return, on the final event of an attempt that returns files, are
	// the paths it names: an EventReturned follows once they are fetched
	// (a later run of the log dir fetches them when none does).
	Return []string `json:"return,omitempty"`
	// Returned and Missing, on an EventReturned, are the files that came
	// back (under ReturnDir) and the paths that named nothing.
	Returned []executor.ReturnedFile `json:"returned,omitempty"`
	Missing  []string                `json:"missing,omitempty"`
	// ByUser is set on a cancelled or retried event that someone asked for
	// (cancel, retry), rather than the run deciding it: serve --resume does
	// not bring back a job its user cancelled.
	ByUser bool `json:"by_user,omitempty"`
	// Hint says what to set, on a failed event of a job that exited 127
	// for want of conda, module or python.
	Hint string `json:"hint,omitempty"`
	// Unstopped is set on a lost or cancelled event whose attempt may run
	// on where it ran: its host could not be reached to stop it. The
	// coordinator of the log dir that next reaches the host stops it, and
	// records EventStopped.
	Unstopped bool `json:"unstopped,omitempty"`
	// NotStarted is set on a retried event whose attempt never began (its
	// host could not set up its environment, or refused it for a limit):
	// the attempt does not count, and what its started event said (where,
	// its logs) no longer holds.
	NotStarted bool `json:"not_started,omitempty"`
	// SettingUp is set on a pending event of a job whose shell is being
	// set up on its host (the login profile, workdir, env): it holds its
	// slot, and is said to have started once it begins.
	SettingUp bool `json:"setting_up,omitempty"`
	// Resume is set on a run event of a run that goes on with the earlier
	// ones.
	Resume bool `json:"resume,omitempty"`
	// Spec is how a served job was queued (on queued and priority events
	// of serve): with Text it rebuilds the job after a restart.
	Spec *JobSpec `json:"spec,omitempty"`
	// Parts, on the events of an attempt of a job over several hosts
	// ([nodes=N]), are its parts from rank 1 on (Host, GPUs, Stdout,
	// Stderr and Tag are part 0's). FailedPart, on the event that ends
	// such an attempt, is the part whose end ended it.
	Parts      []Part `json:"parts,omitempty"`
	FailedPart *int   `json:"failed_part,omitempty"`
}

// ranOn reports whether the attempt e is about runs on host, in whole or
// in part.
func (e Event) ranOn(host string) bool {
	return slices.ContainsFunc(e.Places(), func(p Place) bool { return p.Host == host })
}

// Place is a host and the GPUs of it where an attempt, or a part of one,
// runs (none on a Slurm cluster, where Slurm gives them).
type Place struct {
	Host string
	GPUs []executor.GPUID
}

// Places lists where e's attempt runs: its host and GPUs, then, for a job
// over several hosts, its other parts'. None for an event about no
// attempt.
func (e Event) Places() []Place { return places(e.Host, e.GPUs, e.Parts) }

func places(host string, gpus []executor.GPUID, parts []Part) []Place {
	if host == "" {
		return nil
	}
	out := []Place{{host, gpus}}
	for _, p := range parts {
		if p.Host != "" { // a part of a Slurm job: the cluster's place
			out = append(out, Place{p.Host, p.GPUs})
		}
	}
	return out
}

// Where says where places are: "node1:2", "hpc" (a Slurm cluster), or
// "node1:0,1+node2:0,1" for a job over several hosts; "" for none.
func Where(places []Place) string {
	s := make([]string, len(places))
	for i, p := range places {
		s[i] = p.Host
		if len(p.GPUs) > 0 {
			s[i] += ":" + executor.GPUIDs(p.GPUs)
		}
	}
	return strings.Join(s, "+")
}

// Part is one part, on one host, of an attempt of a job over several
// hosts: its rank (NODE_RANK), where it runs, its logs and its tag (no
// place and no tag on a Slurm cluster, where the parts are one batch
// job's).
type Part struct {
	Rank   int              `json:"rank"`
	Host   string           `json:"host"`
	GPUs   []executor.GPUID `json:"gpus,omitempty"`
	Stdout string           `json:"stdout,omitempty"`
	Stderr string           `json:"stderr,omitempty"`
	Tag    string           `json:"tag,omitempty"`
}

// JobSpec is where a job may run and in what order, as it was queued.
type JobSpec struct {
	Name     string `json:"name,omitempty"`
	Host     string `json:"host,omitempty"`
	GPU      int    `json:"gpu"` // -1: any
	GPUs     int    `json:"gpus"`
	Priority int    `json:"priority,omitempty"`
	// TimeoutSeconds is the job's own time limit (0: the run's).
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
	Prefer         string  `json:"prefer,omitempty"`
	PreferGPU      int     `json:"prefer_gpu"` // -1: any
	// EnvFile names the file of the log dir's .env directory that holds
	// the environment of the submit that queued the job, for its runs on
	// local hosts (Job.CallerEnv): the journal, which a group may read,
	// holds none of it. Env holds it in journals of an earlier gpudispatch.
	EnvFile string   `json:"env_file,omitempty"`
	Env     []string `json:"env,omitempty"`
	// After and AfterAny are the jobs it waits for (Job.After).
	After    []string `json:"after,omitempty"`
	AfterAny []string `json:"after_any,omitempty"`
	// Models, VRAMMB and Tags are the kind of GPU it needs (Job.Models),
	// its line's or its batch's or run's.
	Models []string `json:"models,omitempty"`
	VRAMMB int      `json:"vram_mb,omitempty"`
	Tags   []string `json:"tags,omitempty"`
	// Snapshot and SyncDir name the snapshot of the code the submit took
	// for the job (Job.Code).
	Snapshot string `json:"snapshot,omitempty"`
	SyncDir  string `json:"sync_dir,omitempty"`
}

// ReturnDir is where the files attempt e returns go: beside its logs, the
// logs' name without .out (LOGDIR/ID/, LOGDIR/ID.2/ for a second attempt).
func ReturnDir(e Event) string {
	return strings.TrimSuffix(e.Stdout, ".out")
}

// Reporter is told every event as it happens (terminal lines, --json).
type Reporter interface {
	Report(Event)
}
