//go:build unix

package main

import (
	"bufio"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// hostileBinary is a copy of this test binary that another user may run
// (see hostileRole).
func hostileBinary(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(sshtest.SharedDir(t), "hostile.test")
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// hostile is a hostile program running as another user.
type hostile struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

// startHostile runs the hostile role env names as u; it runs until the
// test ends.
func startHostile(t *testing.T, u sshtest.User, bin string, env ...string) *hostile {
	t.Helper()
	c := u.Command("/", bin)
	c.Env = append(os.Environ(), env...)
	h := &hostile{cmd: c, lines: make(chan string, 16)}
	var err error
	if h.stdin, err = c.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.Stderr = os.Stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	t.Cleanup(func() { h.stdin.Close(); c.Wait() })
	return h
}

// line is the hostile program's next line of output.
func (h *hostile) line(t *testing.T, within time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-h.lines:
		if !ok {
			t.Fatal("the hostile program ended")
		}
		return l
	case <-time.After(within):
		t.Fatalf("the hostile program said nothing within %s", within)
		return ""
	}
}

// Another user opens 20,000 connections to the page's port (idle, half a
// header, a refused request) and tries the control socket: submit, the
// job and the page keep working, and the server holds no more descriptors
// and memory than its caps allow.
func TestE2EFloodFromAnotherUser(t *testing.T) {
	u := sshtest.NewUser(t, "gpdflood")
	bin := hostileBinary(t)
	dir := t.TempDir()
	serve, pageURL, logDir := servePage(t, dir)
	pu, _ := url.Parse(pageURL)
	f := startHostile(t, u, bin, "GPUDISPATCH_TEST_FLOOD="+pu.Host, "GPUDISPATCH_TEST_FLOOD_SOCKET="+filepath.Join(logDir, "gpudispatch.sock"))
	if l := f.line(t, 30*time.Second); !strings.Contains(l, "permission denied") {
		t.Errorf("the other user's connect to the control socket: %s", l)
	}
	var opened string
	for !strings.HasPrefix(opened, "opened ") {
		opened = f.line(t, 5*time.Minute)
		t.Log("flood: " + opened)
	}
	if n, _ := strconv.Atoi(strings.TrimPrefix(opened, "opened ")); n < 5000 {
		t.Fatalf("the flood opened only %d connections: it proves nothing", n)
	}
	// The flood holds its connections while the user works.
	submit(t, dir, logDir, "echo after-the-flood\n")
	waitForFile(t, filepath.Join(logDir, "1.out"), func(s string) bool { return s == "after-the-flood\n" })
	c := &http.Client{Timeout: time.Minute}
	resp, err := c.Get(pageURL)
	if err != nil {
		t.Fatalf("the page during the flood: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "after-the-flood") {
		t.Errorf("the page during the flood: %s\n%s", resp.Status, body)
	}
	fds, _ := os.ReadDir("/proc/" + strconv.Itoa(serve.Process.Pid) + "/fd")
	if len(fds) > 1024+256 {
		t.Errorf("serve holds %d descriptors during the flood, want at most the page's cap (1024) and its own", len(fds))
	}
	status, _ := os.ReadFile("/proc/" + strconv.Itoa(serve.Process.Pid) + "/status")
	for line := range strings.Lines(string(status)) {
		if kb, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.Fields(kb)[0])
			t.Logf("serve's memory during the flood: %d MB, %d descriptors", n/1024, len(fds))
			if n > 200*1024 {
				t.Errorf("serve uses %d MB during the flood", n/1024)
			}
		}
	}
}

// A colleague cannot pose as the user's gpudispatch: serve refuses a log
// dir others may write to before writing anything; and a client sends
// nothing to a socket in such a dir, to a socket that is not the user's,
// or to a server that runs as another user.
func TestE2EImpostorSocket(t *testing.T) {
	m := sshtest.NewUser(t, "gpdmallory")
	bin := hostileBinary(t)
	shared := sshtest.SharedDir(t)
	dir := t.TempDir()
	secret := "python train.py --token=SECRET\n"

	// A log dir everyone may write to: serve refuses it, writing nothing.
	open := filepath.Join(shared, "lab")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	r := gpd(t, dir, "", "serve", "--gpus", "0", "-o", open)
	if r.code != 2 || !strings.Contains(r.stderr, "may be written by every user") {
		t.Errorf("serve in a world-writable log dir: exit %d\n%s", r.code, r.stderr)
	}
	if entries, _ := os.ReadDir(open); len(entries) > 0 {
		t.Errorf("serve wrote in a log dir it refused: %v", entries)
	}

	// mallory's server in that dir.
	planted := filepath.Join(open, "gpudispatch.sock")
	h := startHostile(t, m, bin, "GPUDISPATCH_TEST_IMPOSTOR="+planted)
	h.line(t, 30*time.Second)
	submitTo := func(logDir, want string) {
		t.Helper()
		c := exec.Command(binary, "submit", "-o", logDir)
		c.Dir, c.Stdin = dir, strings.NewReader(secret)
		out, err := c.CombinedOutput()
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("submit -o %s: %v\n%s\nwant a refusal saying %q", logDir, err, out, want)
		}
	}
	submitTo(open, "may be written by every user")

	// mallory's socket, moved into the user's own log dir.
	mine := filepath.Join(dir, "mine")
	os.Mkdir(mine, 0o700)
	if err := os.Rename(planted, filepath.Join(mine, "gpudispatch.sock")); err != nil {
		t.Fatal(err)
	}
	submitTo(mine, "belongs to gpdmallory")
	// Now the user's own socket, with mallory's server behind it.
	os.Lchown(filepath.Join(mine, "gpudispatch.sock"), os.Getuid(), os.Getgid())
	submitTo(mine, "runs as gpdmallory")

	if got, _ := os.ReadFile(planted + ".got"); len(got) > 0 {
		t.Errorf("mallory's server received %q", got)
	}
}

// status on a log dir whose journal another user wrote says so.
func TestE2EStatusOfAnotherUsersJournal(t *testing.T) {
	m := sshtest.NewUser(t, "gpdmallory")
	dir := t.TempDir()
	if r := gpd(t, dir, "echo hi\n", "--gpus", "0", "-o", "logs"); r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	if r := gpd(t, dir, "", "status", "logs"); strings.Contains(r.stderr, "not yours") {
		t.Errorf("status of the user's own journal warns:\n%s", r.stderr)
	}
	os.Chown(filepath.Join(dir, "logs", "journal.jsonl"), m.UID, m.GID)
	r := gpd(t, dir, "", "status", "logs")
	if !strings.Contains(r.stderr, "warning: the journal in logs is gpdmallory's, not yours") {
		t.Errorf("status of mallory's journal:\n%s", r.stderr)
	}
}
