package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkWebPage measures what open web pages cost a run, in one run of
// 1,000 jobs of `true` submitted at once to `serve` in local mode (8
// slots), three times: with no page open, with one, with 20. A page is a
// browser's worth of requests: the page, then its stream of updates
// (gzipped, as browsers take it), read until the server ends.
//   - jobs/s-0, jobs/s-20: the batch's rate without pages and with 20;
//   - ratio-20: jobs/s-20 / jobs/s-0 (1: the pages cost dispatch nothing);
//   - page-KB/s: bytes one page received per second of the run, on the wire;
//   - page-cpu-%: the coordinator's own CPU (not its jobs') with one page
//     open, minus without, per second of the run;
//   - page-cpu-%-of-20: the same with 20 pages, divided by 20.
//
// Run it with:
//
//	go test ./cmd/gpudispatch -run '^$' -bench WebPage -benchtime 1x
func BenchmarkWebPage(b *testing.B) {
	const jobs = 1000
	dir := b.TempDir()
	lines := strings.Repeat("true\n", jobs)
	type result struct {
		rate, cpu, seconds float64 // jobs/s; coordinator CPU seconds
		bytes              int64   // received by the first page
	}
	run := func(i, pages int) result {
		logs := filepath.Join(dir, fmt.Sprintf("logs-%d-%d", i, pages))
		serve := exec.Command(binary, "serve", "-q", "--gpus", "0,1,2,3,4,5,6,7", "-o", logs, "--listen", "127.0.0.1:0")
		serve.Dir = dir
		serve.Env = append(os.Environ(), lockEnv(dir), "HOME="+dir)
		stderr, err := serve.StderrPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := serve.Start(); err != nil {
			b.Fatal(err)
		}
		url := readPageURL(b, stderr)
		received := make([]atomic.Int64, max(pages, 1))
		var wg sync.WaitGroup
		for p := range pages {
			c := pageClient(b, url)
			wg.Go(func() { readPage(b, c, url, &received[p]) })
		}
		time.Sleep(time.Second) // the pages are open, and idle
		cpu0, bytes0 := cpuSeconds(b, serve.Process.Pid), received[0].Load()
		start := time.Now()
		submit(b, dir, logs, lines, "--wait")
		seconds := time.Since(start).Seconds()
		cpu, bytes := cpuSeconds(b, serve.Process.Pid)-cpu0, received[0].Load()-bytes0
		if out, err := exec.Command(binary, "stop", "-o", logs).CombinedOutput(); err != nil {
			b.Fatalf("stop: %v\n%s", err, out)
		}
		serve.Wait()
		wg.Wait()
		return result{rate: jobs / seconds, cpu: cpu, seconds: seconds, bytes: bytes}
	}
	var r0, r1, r20 result
	for i := 0; i < b.N; i++ {
		r0, r1, r20 = run(i, 0), run(i, 1), run(i, 20)
	}
	b.ReportMetric(r0.rate, "jobs/s-0")
	b.ReportMetric(r20.rate, "jobs/s-20")
	b.ReportMetric(r20.rate/r0.rate, "ratio-20")
	b.ReportMetric(float64(r1.bytes)/1024/r1.seconds, "page-KB/s")
	b.ReportMetric(100*(r1.cpu/r1.seconds-r0.cpu/r0.seconds), "page-cpu-%")
	b.ReportMetric(100*(r20.cpu/r20.seconds-r0.cpu/r0.seconds)/20, "page-cpu-%-of-20")
}

// readPageURL reads gpudispatch's standard error until it prints its web
// page's URL, and drains the rest.
func readPageURL(tb testing.TB, stderr io.Reader) string {
	tb.Helper()
	urls := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`web page: (http://\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
	}()
	select {
	case u := <-urls:
		return u
	case <-time.After(30 * time.Second):
		tb.Fatal("gpudispatch printed no web page URL")
		return ""
	}
}

// pageClient is a browser that opened the page's URL. It asks for gzip
// itself, so that what it counts is what the wire carries.
func pageClient(tb testing.TB, url string) *http.Client {
	tb.Helper()
	c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	resp, err := c.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return c
}

// readPage loads the page and reads its updates until the server ends
// them, counting the bytes received in n as they come.
func readPage(tb testing.TB, c *http.Client, url string, n *atomic.Int64) {
	for _, path := range []string{"", "events"} {
		req, _ := http.NewRequest("GET", url+path, nil)
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := c.Do(req)
		if err != nil {
			tb.Error(err)
			return
		}
		io.Copy(counter{n}, resp.Body)
		resp.Body.Close()
	}
}

// counter counts the bytes written to it.
type counter struct{ n *atomic.Int64 }

func (c counter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return len(p), nil
}

// cpuSeconds is the CPU time process pid used itself (user and system, all
// its threads; not its children's).
func cpuSeconds(tb testing.TB, pid int) float64 {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// Fields after the command's closing parenthesis: state is field 3,
	// utime 14, stime 15, in clock ticks (100 a second on Linux).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100
}
