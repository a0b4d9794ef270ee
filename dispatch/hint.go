package dispatch

import (
	"io"
	"os"
	"regexp"
)

// A job that exits 127 because its shell did not find conda, module or
// python most often ran in an environment the user did not mean: a
// non-interactive login shell does not run conda init's block of
// ~/.bashrc (Ubuntu's returns early when not interactive), nor Lmod's
// set-up, and a venv is active only where it was activated. Such a job's
// failure gets a hint that names what to set (hint).

// notFound finds bash's word for a command it could not find, among those
// that a hint is for.
var notFound = regexp.MustCompile(`(?m): (conda|mamba|module|python3?|pip3?): command not found$`)

// hintTail is how much of the end of a job's stderr is looked at.
const hintTail = 8 << 10

// exitNotFound is bash's exit status for a command it did not find.
const exitNotFound = 127

// hint says what to set when the job that wrote stderrPath on host (local:
// this machine) exited 127 for want of conda, module or python, or "".
func hint(stderrPath, host string, local bool) string {
	f, err := os.Open(stderrPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > hintTail {
		f.Seek(st.Size()-hintTail, io.SeekStart)
	}
	b, err := io.ReadAll(io.LimitReader(f, hintTail))
	if err != nil {
		return "" // no hint for a log that cannot be read
	}
	m := notFound.FindSubmatch(b)
	if m == nil {
		return ""
	}
	return hintFor(string(m[1]), host, local)
}

// hintFor is the hint for the command cmd that was not found.
func hintFor(cmd, host string, local bool) string {
	switch {
	case local:
		return "hint: " + cmd + " was not found in the environment gpudispatch was started with, which is the one local jobs get: start gpudispatch where your env is active (conda activate ENV, source venv/bin/activate, module load ...)"
	case cmd == "conda" || cmd == "mamba":
		return "hint: " + cmd + " is not set up in a non-interactive login shell on " + host + " (conda init puts it below ~/.bashrc's interactive guard): set conda: ENV for the host in the inventory, or [conda=ENV] on the job line, and gpudispatch finds conda and activates ENV"
	case cmd == "module":
		return "hint: module is not set up in a non-interactive login shell on " + host + ": set modules: [NAME, ...] for the host in the inventory, and gpudispatch loads them"
	}
	return "hint: " + cmd + " is not on the job's PATH on " + host + ": set conda: ENV or venv: DIR for the host in the inventory (gpudispatch hosts --check shows what a job gets there)"
}
