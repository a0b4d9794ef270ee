package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// slowLab is a lab with a hung host (it takes TCP and never speaks SSH),
// nodehung, a good one, node1, and one that answers 5 s late, nodelate
// (node2 behind a slow proxy), all `gpus: auto` but the hung one's.
func slowLab(t *testing.T) (*sshtest.Lab, string, int) {
	t.Helper()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	l.Late(l.Hosts[1], "nodelate", 5*time.Second)
	port := silentListener(t)
	f, _ := os.OpenFile(l.SSHConfig, os.O_APPEND|os.O_WRONLY, 0)
	fmt.Fprintf(f, "\nHost nodehung\n  HostName 127.0.0.1\n  Port %d\n", port)
	f.Close()
	inv := filepath.Join(l.Dir, "slow.yaml")
	os.WriteFile(inv, []byte(fmt.Sprintf("ssh_config: %s\nhosts:\n  - name: nodehung\n    gpus: [0]\n  - name: node1\n    gpus: auto\n  - name: nodelate\n    gpus: auto\n", l.SSHConfig)), 0o644)
	return l, inv, port
}

// firstStart is how long after launch the first job of the journal in
// logDir started.
func firstStart(t *testing.T, logDir string, launch time.Time) time.Duration {
	t.Helper()
	for _, e := range journal(t, logDir) {
		if e["event"] == "started" {
			at, err := time.Parse(time.RFC3339Nano, e["time"].(string))
			if err != nil {
				t.Fatal(err)
			}
			return at.Sub(launch)
		}
	}
	t.Fatal("no job started")
	return 0
}

// A hung host and a slow one stall nothing. The run starts on the first
// host that is ready, long before --connect-timeout (20 s) would give the
// hung one up; a job pinned to the slow host, and one pinned to its GPU 0
// (which only its nvidia-smi can vouch for), wait for it and run there;
// it takes other jobs too once it answers; and the run ends without
// waiting for the hung host, naming it. The same for --resume and serve.
func TestSSHSlowHostsStallNothing(t *testing.T) {
	t.Parallel()
	l, inv, port := slowLab(t)
	logDir := filepath.Join(l.Dir, "logs")
	logJournalOnFailure(t, logDir)
	var jobs strings.Builder
	for i := 0; i < 12; i++ {
		jobs.WriteString("sleep 1; echo $FAKE_HOST\n")
	}
	jobs.WriteString("@nodelate echo $FAKE_HOST\n@nodelate:0 echo $FAKE_HOST\n")
	launch := time.Now()
	r := labRun(t, l, jobs.String(), "-i", inv, "-o", "logs", "--connect-timeout", "20s")
	took := time.Since(launch)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	first := firstStart(t, logDir, launch)
	t.Logf("first job started %v after launch; the run took %v", first, took)
	if first > 5*time.Second || took > 19*time.Second {
		t.Errorf("the first job started %v after launch and the run took %v: it waited for a host", first, took)
	}
	ran := map[string]int{}
	for i := 1; i <= 14; i++ {
		ran[strings.TrimSpace(readFile(t, filepath.Join(logDir, strconv.Itoa(i)+".out")))]++
	}
	if ran["node1"] == 0 || ran["node2"] < 3 || ran["node1"]+ran["node2"] != 14 {
		t.Errorf("jobs ran %v; want node1 and, once it answered, nodelate (node2) with its two pinned jobs", ran)
	}
	for i := 13; i <= 14; i++ {
		if got := readFile(t, filepath.Join(logDir, strconv.Itoa(i)+".out")); got != "node2\n" {
			t.Errorf("job %d, pinned to nodelate, ran on %q", i, got)
		}
	}
	if want := fmt.Sprintf("@127.0.0.1:%d) was still being opened as the run ended (connecting", port); !strings.Contains(r.stderr, "gpudispatch: warning: nodehung (") || !strings.Contains(r.stderr, want) {
		t.Errorf("the run does not name the hung host (want %q):\n%s", want, r.stderr)
	}

	// --resume: the jobs that succeeded are skipped, the one that is new
	// runs at once.
	launch = time.Now()
	r = labRun(t, l, jobs.String()+"echo new\n", "-i", inv, "-o", "logs", "--connect-timeout", "20s", "--resume")
	if took := time.Since(launch); r.code != 0 || took > 19*time.Second {
		t.Errorf("--resume: exit %d after %v\n%s", r.code, took, r.stderr)
	}

	// serve: the socket is there, and a submitted job runs, at once.
	launch = time.Now()
	serve := labCmd(t, l, "", "serve", "-i", inv, "-o", "served", "--connect-timeout", "20s")
	startCmd(t, serve)
	for _, err := os.Stat(filepath.Join(l.Dir, "served", "gpudispatch.sock")); err != nil && time.Since(launch) < 20*time.Second; _, err = os.Stat(filepath.Join(l.Dir, "served", "gpudispatch.sock")) {
		time.Sleep(20 * time.Millisecond)
	}
	s := labRun(t, l, "", "submit", "-o", "served", "--wait", "--", "echo $FAKE_HOST")
	took = time.Since(launch)
	t.Logf("serve: a submitted job ended %v after launch", took)
	if s.code != 0 || took > 10*time.Second {
		t.Errorf("submit --wait: exit %d, %v after launch\n%s", s.code, took, s.stderr)
	}
	labRun(t, l, "", "stop", "-o", "served")
	serve.Wait()
}

// hosts waits for every host, and on a terminal says meanwhile which it
// waits for and what for, on a line it clears once all have answered.
func TestSSHHostsSaysWhatItWaitsFor(t *testing.T) {
	t.Parallel()
	l := sshtest.Start(t, sshtest.Options{Hosts: 2, GPUs: 1})
	l.Late(l.Hosts[1], "nodelate", 3*time.Second)
	inv := filepath.Join(l.Dir, "late.yaml")
	os.WriteFile(inv, []byte(fmt.Sprintf("ssh_config: %s\nhosts:\n  - name: node1\n    gpus: auto\n  - name: nodelate\n    gpus: auto\n", l.SSHConfig)), 0o644)
	cmd := labCmd(t, l, "", "hosts", "-i", inv, "--connect-timeout", "20s")
	var out bytes.Buffer
	cmd.Stdout = &out
	scr, copied := onPTY(t, cmd, 120, 24, false)
	want := "gpudispatch: 1/2 hosts answered; waiting for nodelate (connecting, "
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(scr.text(), want); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the screen never said %q:\n%s", want, scr.text())
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("hosts: %v\n%s", err, out.String())
	}
	<-copied
	if s := scr.text(); strings.Contains(s, "hosts answered") {
		t.Errorf("the waiting line stayed on the screen:\n%s", s)
	}
	if !strings.Contains(out.String(), "nodelate") || !strings.Contains(out.String(), "node1") {
		t.Errorf("hosts printed:\n%s", out.String())
	}
}
