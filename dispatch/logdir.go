package dispatch

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// ClaimName is the file in a log dir that its coordinator holds a lock on
// for as long as it runs, and that says who it is.
const ClaimName = "gpudispatch.lock"

// errWouldBlock is lockFile's answer when another process holds the lock.
var errWouldBlock = errors.New("locked by another process")

// logDirClaim is a log dir held by this coordinator: one live coordinator per
// log dir, so that two never write one journal. Its lock dies with the
// process, so a run that was killed leaves no claim behind. mode is what
// new files there get (see fileMode).
type logDirClaim struct {
	f    *os.File
	mode fs.FileMode
}

// claimLogDir checks that no other user can turn dir against this one
// (CheckLogDir), before it writes anything, makes it when it is missing
// (0700: the user's alone), and claims it; it fails, naming the other, when
// another live gpudispatch holds it.
func claimLogDir(dir string) (*logDirClaim, error) {
	if err := CheckLogDir(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("log dir: %w", err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("log dir: %w", err)
	}
	mode := fileMode(st.Mode())
	path := filepath.Join(dir, ClaimName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|noFollow, mode)
	if err != nil {
		return nil, fmt.Errorf("log dir: %w", err)
	}
	if err := checkOwnFile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("log dir: %w", err)
	}
	switch err := lockFile(f); {
	case errors.Is(err, errWouldBlock):
		who, _ := os.ReadFile(path)
		f.Close()
		return nil, fmt.Errorf("log dir %s is in use by another gpudispatch (%s): wait for it to end, or give this one another -o", dir, bytes.TrimSpace(who))
	case err != nil:
		f.Close()
		return nil, fmt.Errorf("log dir: locking %s: %w", path, err)
	}
	host, _ := os.Hostname()
	who := fmt.Sprintf("pid %d on %s, started %s", os.Getpid(), host, time.Now().Format(time.DateTime))
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(who+"\n"), 0)
	}
	return &logDirClaim{f: f, mode: mode}, nil
}

// release lets the log dir go: at once, even while a process forked a
// moment ago still holds a copy of the claim's descriptor (closing ours
// alone would not; a test's next run on the log dir once found it in
// use by the run before).
func (c *logDirClaim) release() {
	unlockFile(c.f)
	c.f.Close()
}

// treeKey names the log dir whose journal is at path among those whose
// jobs run in a snapshot's tree on a host (executor.Prelude.Tree): hex
// digits made from the log dir's first run, so that its later runs and
// --resume find the tree its jobs wrote in, and a new log dir (or one
// removed and made again) gets a clean one, wherever it is.
func treeKey(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	for {
		line, err := readLine(r)
		if err != nil {
			return "", fmt.Errorf("%s: no run recorded: %w", path, err)
		}
		if !bytes.Contains(line, []byte(`"event":"run"`)) {
			continue
		}
		var e Event
		if json.Unmarshal(line, &e) == nil && e.Event == EventRun && e.Run != "" {
			sum := sha256.Sum256([]byte("gpudispatch log dir\x00" + e.Run))
			return hex.EncodeToString(sum[:8]), nil
		}
	}
}
