package web

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch"
	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// The files a job brought back are listed on the page and served from its
// return directory, read-only, as downloads: only those the run said came
// back, and no path or link leads out of the directory.
func TestReturnedFiles(t *testing.T) {
	t.Parallel()
	logs := t.TempDir()
	dir := filepath.Join(logs, "train")
	if err := os.MkdirAll(filepath.Join(dir, "out"), 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "out", "model.pt"), []byte("weights"), 0o600)
	os.WriteFile(filepath.Join(logs, "secret"), []byte("not yours"), 0o600)
	os.Symlink(filepath.Join(logs, "secret"), filepath.Join(dir, "out", "link"))
	s, err := New(Options{Control: dispatch.NewControl(), SampleEvery: time.Hour, ListLimit: 5})
	if err != nil {
		t.Fatal(err)
	}
	start, end := time.Now(), time.Now().Add(time.Second)
	out := filepath.Join(logs, "train.out")
	s.Report(dispatch.Event{Event: dispatch.EventStarted, Job: "train", Host: "n1", Start: &start, Stdout: out, Stderr: filepath.Join(logs, "train.err")})
	s.Report(dispatch.Event{Event: dispatch.EventFinished, Job: "train", Host: "n1", Start: &start, End: &end, Stdout: out, Return: []string{"out"}})
	s.Report(dispatch.Event{Event: dispatch.EventReturned, Job: "train", Stdout: out,
		Returned: []executor.ReturnedFile{{Path: "out/model.pt", Size: 7}, {Path: "out/link", Size: 9}}})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	get := func(path string) (int, string, string) {
		resp, err := http.Get(srv.URL + strings.TrimSuffix(s.Path(), "/") + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get("Content-Disposition")
	}
	if code, body, disp := get("/jobs/train/returned/out/model.pt"); code != 200 || body != "weights" || disp != "attachment" {
		t.Errorf("model.pt: %d %q %q", code, body, disp)
	}
	for _, path := range []string{"/jobs/train/returned/out/link", "/jobs/train/returned/../secret", "/jobs/train/returned/out/other"} {
		if code, body, _ := get(path); code == 200 || strings.Contains(body, "not yours") {
			t.Errorf("%s: %d %q", path, code, body)
		}
	}
	if code, body, _ := get("/jobs/train"); code != 200 || !strings.Contains(body, `/jobs/train/returned/out/model.pt">out/model.pt</a>`) {
		t.Errorf("the job's page does not list its files (%d):\n%s", code, body)
	}
}
