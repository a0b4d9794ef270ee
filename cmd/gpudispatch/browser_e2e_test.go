package main

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// browser starts headless Debian chromium for a test, at width × height.
// It skips the test when there is no chromium, unless
// GPUDISPATCH_REQUIRE_BROWSER is set.
func browser(t *testing.T, width, height int) context.Context {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv("GPUDISPATCH_REQUIRE_BROWSER") != "" {
			t.Fatal("GPUDISPATCH_REQUIRE_BROWSER is set and there is no chromium on PATH (apt-get install chromium)")
		}
		t.Skip("no chromium on PATH: apt-get install chromium, or set GPUDISPATCH_REQUIRE_BROWSER to make this a failure")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(width, height), chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTime(); cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// servePage starts gpudispatch serve on two fake GPUs with its web page,
// and returns the page's URL (with its token) and the log dir.
func servePage(t *testing.T, dir string) (cmd *exec.Cmd, pageURL, logDir string) {
	t.Helper()
	sshtest.NvidiaSMI(t, dir, "0, GPU-a, Fake A100 80GB, 81920, 30412, 87\n1, GPU-b, Fake A100 80GB, 81920, 12, 0\n", "")
	logDir = filepath.Join(dir, "logs")
	cmd = exec.Command(binary, "serve", "--gpus", "0,1", "-o", logDir, "--listen", "127.0.0.1:0")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, homeBinFirst(dir), lockEnv(dir))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pageURL = readPageURL(t, stderr)
	return cmd, pageURL, logDir
}

// waitJS waits until the JavaScript expression is true in the page.
func waitJS(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		html, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("main")))
		t.Fatalf("%s: %v\n%s", what, err, html)
	}
}

// has is the JavaScript test that the text of the element selector names
// contains each of words.
func has(selector string, words ...string) string {
	el := fmt.Sprintf("document.querySelector(%q)", selector)
	conds := []string{"!!" + el}
	for _, w := range words {
		conds = append(conds, fmt.Sprintf("%s.textContent.includes(%q)", el, w))
	}
	return strings.Join(conds, " && ")
}

// In a real browser: the page opens at its URL and goes live; a job
// appears on its GPU and finishes without a reload; a job added through the
// form runs and its page shows its output; a running job is cancelled with
// its button. The screenshot is checked (and kept with
// GPUDISPATCH_SCREENSHOT=path.png); on a 375 px phone nothing runs off the
// side.
func TestBrowserPage(t *testing.T) {
	ctx := browser(t, 1000, 900)
	dir := t.TempDir()
	cmd, pageURL, logDir := servePage(t, dir)
	defer logJournalOnFailure(t, logDir)

	if err := chromedp.Do(ctx, chromedp.Navigate(pageURL)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the page goes live", has("#conn", "live"))
	// A mark that a reload would wipe: every change below must come live.
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void]("window.notReloaded = true")); err != nil {
		t.Fatal(err)
	}

	gate := filepath.Join(dir, "go1")
	submit(t, dir, logDir, fmt.Sprintf("while [ ! -e %s ]; do sleep 0.1; done; echo first-done\n", gate))
	waitJS(t, ctx, "job 1 appears on a GPU", has("#hosts", "job 1", "first-done", "Fake A100 80GB", "30412/81920 MiB"))
	os.WriteFile(gate, nil, 0o644)
	waitJS(t, ctx, "job 1 finishes", has("#finished", "job 1", "succeeded"))
	waitJS(t, ctx, "the counts follow", has("#progress", "1/1 done"))
	waitJS(t, ctx, "all of it without a reload", "window.notReloaded === true")

	// A job added through the form.
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS(".add textarea"), "echo added-by-the-form\n@nohost echo x")); err != nil {
		t.Fatal(err)
	}
	clickToPage(t, ctx, ".add button")
	waitJS(t, ctx, "the form's answer", has("main", "queued: job 2", "web:2:", "nohost"))
	waitJS(t, ctx, "job 2 finishes", has("#finished", "job 2", "succeeded"))
	clickToPage(t, ctx, `#finished a[href$="/jobs/2"]`)
	waitJS(t, ctx, "job 2's page shows its output", has("#stdout", "added-by-the-form"))

	// Two long jobs take both GPUs; a third waits; one is cancelled with its
	// button and the third runs.
	if err := chromedp.Do(ctx, chromedp.Navigate(pageURL)); err != nil {
		t.Fatal(err)
	}
	// A stand-in for training, on the jobs' PATH (~/bin).
	if err := os.WriteFile(filepath.Join(dir, "bin", "python"), []byte("#!/bin/sh\nexec sleep 300\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	submit(t, dir, logDir, "[name=train-a] python train.py --lr 0.1\n[name=train-b] python train.py --lr 0.01\n")
	waitJS(t, ctx, "two jobs run", has("#hosts", "train-a", "train-b"))
	// The timeline: a bar per job on its slot's row, coloured by outcome,
	// linking to the job; a running job's bar grows.
	waitJS(t, ctx, "the timeline draws the jobs", `(function () {
		var one = document.querySelector('#timeline a[href$="/jobs/1"] rect.ok');
		var two = document.querySelector('#timeline a[href$="/jobs/2"] rect.ok');
		var run = document.querySelector('#timeline a[href$="/jobs/train-a"] rect.run[data-start]');
		if (!one || !two || !run || !(+run.getAttribute("width") > 0)) return false;
		var label = one.closest(".tl-row").querySelector(".tl-label").textContent;
		return /^localhost:[01]$/.test(label) && one.querySelector("title").textContent.indexOf("job 1, succeeded") === 0;
	})()`)
	submit(t, dir, logDir, "[name=eval] echo eval-done\n[name=report priority=2] echo report-done\n")
	waitJS(t, ctx, "two wait, in priority order", has("#queue", "report", "eval", "first in line")+
		` && document.querySelector("#queue").textContent.indexOf("report") < document.querySelector("#queue").textContent.indexOf("eval")`)
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	checkScreenshot(t, shot, "")
	clickToPage(t, ctx, `#hosts form[action$="/jobs/train-a/cancel"] button`)
	waitJS(t, ctx, "train-a is cancelled", has("#finished", "train-a", "cancelled"))
	waitJS(t, ctx, "eval runs in its place", has("#finished", "eval", "succeeded"))

	// A filter in the URL shows only what it names, on first load and in
	// every live update after it.
	if err := chromedp.Do(ctx, chromedp.Navigate(strings.TrimSuffix(pageURL, "/")+"/?state=cancelled")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "only the cancelled job shows", `(function () {
		var a = document.querySelector('#finished li[data-id="train-a"]');
		return !!a && !a.hidden && !document.querySelector('#finished li[data-id="eval"]');
	})()`)
	submit(t, dir, logDir, "[name=after-filter] echo x\n")
	waitJS(t, ctx, "a job that ends later stays hidden", `(function () {
		var x = document.querySelector('#finished li[data-id="after-filter"]');
		var a = document.querySelector('#finished li[data-id="train-a"]');
		return !!x && x.hidden && !!a && !a.hidden;
	})()`)
	events := journal(t, logDir)
	if count(events, "cancelled") != 1 {
		t.Errorf("%d cancelled events, want 1 (train-a)", count(events, "cancelled"))
	}

	// A file a job brought back is a link on its page, which opens it.
	submit(t, dir, logDir, "[name=ret return=out.txt] echo returned-bytes > out.txt\n")
	waitJS(t, ctx, "ret finishes, its file listed", `!!document.querySelector('#finished a[href$="/jobs/ret/returned/out.txt"]')`)
	if err := chromedp.Do(ctx, chromedp.Navigate(strings.TrimSuffix(pageURL, "/")+"/jobs/ret")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "ret's page links its file", `!!document.querySelector('a[href$="/jobs/ret/returned/out.txt"]')`)
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`fetch(document.querySelector('a[href$="/jobs/ret/returned/out.txt"]').href).then(function (r) { return r.text(); })`,
		chromedp.EvalAwaitPromise))
	if err != nil || got != "returned-bytes\n" {
		t.Errorf("the returned file reads %q, %v", got, err)
	}

	// Cancel every waiting job the filter shows: asked, then done.
	submit(t, dir, logDir, "[name=w1] python w.py\n[name=w2] python w.py\n")
	if err := chromedp.Do(ctx, chromedp.Navigate(strings.TrimSuffix(pageURL, "/")+"/?name=w*")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "w2 waits", `!!document.querySelector('#queue li[data-id="w2"]')`)
	clickToPage(t, ctx, `form[action$="/bulk/cancel"] button`)
	waitJS(t, ctx, "the confirmation lists w2 alone", has("main", "Cancel these 1 waiting jobs?", "w2"))
	clickToPage(t, ctx, `form[action$="/bulk/cancel"] button`)
	waitJS(t, ctx, "w2 is cancelled, and the page is filtered again", has(".note", "job w2:")+
		` && location.search.indexOf("name=w") >= 0 && !!document.querySelector('#finished li[data-id="w2"][data-state="cancelled"]')`)
	// Retry every failed job shown: w2 again, and not the other failures.
	if err := chromedp.Do(ctx, chromedp.Navigate(strings.TrimSuffix(pageURL, "/")+"/?state=unsuccessful&name=w*")); err != nil {
		t.Fatal(err)
	}
	clickToPage(t, ctx, `form[action$="/bulk/retry"] button`)
	waitJS(t, ctx, "the confirmation lists w2 alone", has("main", "Run these 1 jobs again?", "w2")+` && !document.querySelector("main").textContent.includes("train-a")`)
	clickToPage(t, ctx, `form[action$="/bulk/retry"] button`)
	waitJS(t, ctx, "w2 waits again", has(".note", "job w2:")+` && !!document.querySelector('#queue li[data-id="w2"]')`)

	// A phone: one column, nothing wider than the screen.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(375, 800, chromedp.EmulateMobile)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "nothing wider than 375 px", "document.documentElement.scrollWidth <= 375")
	phone, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	checkScreenshot(t, phone, "-phone")

	if out, err := exec.Command(binary, "stop", "-o", logDir, "--now").CombinedOutput(); err != nil {
		t.Fatalf("stop: %v\n%s", err, out)
	}
	waitExit(t, cmd, &bytes.Buffer{}, time.Minute)
}

// A colleague's service on another port of 127.0.0.1 gets nothing of the
// page's token from the browser that has the page open: the page sets no
// cookie (a browser sends a loopback host's cookies to every port of it),
// and a request the colleague's page makes to ours, or sends back to its
// own server, carries no token. Before the token left the cookie, the
// colleague's server received it and ran commands as the page's user.
func TestBrowserTokenStaysOnItsPort(t *testing.T) {
	ctx := browser(t, 800, 600)
	dir := t.TempDir()
	_, pageURL, logDir := servePage(t, dir)
	defer logJournalOnFailure(t, logDir)
	if err := chromedp.Do(ctx, chromedp.Navigate(pageURL)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the page goes live", has("#conn", "live"))
	u, _ := url.Parse(pageURL)
	token := strings.Split(strings.TrimPrefix(u.Path, "/t/"), "/")[0]

	// The colleague's server: its page loads an image from itself and
	// one from the gpudispatch page's port, without the token.
	var mu sync.Mutex
	var seen []string
	pixel := make(chan struct{}, 1)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s %s Cookie=%q Referer=%q", r.Method, r.URL, r.Header.Get("Cookie"), r.Header.Get("Referer")))
		mu.Unlock()
		if r.URL.Path == "/pixel" {
			select {
			case pixel <- struct{}{}:
			default:
			}
			return
		}
		fmt.Fprintf(w, `<!doctype html><img src="/pixel"><img src="http://%s/">`, u.Host)
	}))
	defer evil.Close()
	if err := chromedp.Do(ctx, chromedp.Navigate(evil.URL+"/")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-pixel:
	case <-time.After(30 * time.Second):
		t.Fatal("the colleague's page never loaded its image")
	}
	cookies, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{pageURL, evil.URL + "/"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(cookies.Cookies) > 0 {
		t.Errorf("the browser holds cookies for 127.0.0.1: %+v", cookies.Cookies[0])
	}
	mu.Lock()
	defer mu.Unlock()
	var cookie string
	for _, r := range seen {
		if strings.Contains(r, token) {
			t.Errorf("the colleague's server received the token: %s", r)
		}
		if _, c, ok := strings.Cut(r, "Cookie="); ok {
			cookie += strings.Split(c, " Referer=")[0]
		}
	}
	// What the colleague would do with what it got: add a job.
	req, _ := http.NewRequest("POST", "http://"+u.Host+"/add", strings.NewReader("text=id"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Cookie", strings.Trim(cookie, `"`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("the colleague's POST /add: %s, want 403", resp.Status)
	}
	if n := count(journal(t, logDir), "queued"); n != 0 {
		t.Errorf("%d jobs queued, want none", n)
	}
}

// clickToPage clicks what selector names and waits for the page it leads
// to (a link, or a form's answer) to load.
func clickToPage(t *testing.T, ctx context.Context, selector string) {
	t.Helper()
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(selector)))
	if err != nil {
		t.Fatalf("click %s: %v", selector, err)
	}
	if resp.Status != 200 {
		t.Fatalf("click %s: HTTP %d", selector, resp.Status)
	}
}

// submit queues job lines with gpudispatch submit and args, from the
// environment serve was started with (its jobs get it, on this machine).
func submit(tb testing.TB, dir, logDir, lines string, args ...string) {
	tb.Helper()
	c := exec.Command(binary, append([]string{"submit", "-o", logDir}, args...)...)
	c.Dir = dir
	c.Env = append(os.Environ(), "HOME="+dir, homeBinFirst(dir), lockEnv(dir))
	c.Stdin = strings.NewReader(lines)
	if out, err := c.CombinedOutput(); err != nil {
		tb.Fatalf("submit: %v\n%s", err, out)
	}
}

// checkScreenshot fails unless shot is a PNG with something drawn on it:
// many colours, and much of it not white. With GPUDISPATCH_SCREENSHOT set
// it is written there, with suffix before its extension (the manual's
// pictures, docs/web.md: page.png, page-phone.png).
func checkScreenshot(t *testing.T, shot []byte, suffix string) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	colours, inked := map[[3]uint32]bool{}, 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colours[[3]uint32{r >> 8, g >> 8, bl >> 8}] = true
			if r>>8 < 200 || g>>8 < 200 || bl>>8 < 200 {
				inked++
			}
		}
	}
	total := (b.Dx() / 2) * (b.Dy() / 2)
	if len(colours) < 20 || inked*100 < total*2 {
		t.Errorf("the screenshot looks blank: %d colours, %d of %d pixels inked", len(colours), inked, total)
	}
	path := filepath.Join(t.TempDir(), "page"+suffix+".png")
	if p := os.Getenv("GPUDISPATCH_SCREENSHOT"); p != "" {
		path = strings.TrimSuffix(p, ".png") + suffix + ".png"
	}
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%dx%d, %d colours)", path, b.Dx(), b.Dy(), len(colours))
}
