package control

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch"
	"github.com/gpudispatch/gpudispatch/dispatch/executor"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// instant runs every job at once: "exit N" exits N, anything else waits
// until it is killed. It has no locks and no GPUs to look at.
type instant struct{}

func (instant) Run(ctx context.Context, _ string, c executor.Command, _, _ io.Writer) (int, error) {
	if c.Script == "exit 0" {
		return 0, nil
	}
	if c.Script == "exit 1" {
		return 1, nil
	}
	<-ctx.Done()
	return 143, context.Cause(ctx)
}
func (instant) WaitUp(ctx context.Context, _ string) error { <-ctx.Done(); return ctx.Err() }
func (instant) Reap(context.Context, string, string) error { return nil }
func (instant) LockGPU(context.Context, string, executor.GPUID, string) (executor.GPULock, error) {
	return nil, executor.ErrNoLocks
}
func (instant) ProbeGPUs(context.Context, string) ([]executor.GPU, error) { return nil, nil }
func (instant) Fetch(context.Context, string, executor.Return, string) (executor.Returned, error) {
	return executor.Returned{}, nil
}

// longDir is a log dir whose socket path is too long for a socket
// address, so that the /proc/self/fd path is used.
func longDir(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// serveRun starts a served run in logDir with its control socket.
func serveRun(t *testing.T, logDir string) (*Client, <-chan *dispatch.Summary) {
	t.Helper()
	inv := &inventory.Inventory{Hosts: []inventory.Host{{Name: "a", Local: true, GPUs: []int{0, 1}, SlotsPerGPU: 1}}}
	c := dispatch.NewControl()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan *dispatch.Summary, 1)
	listening := make(chan *Listener)
	go func() {
		s, err := dispatch.Run(ctx, dispatch.Options{
			Inventory: inv, Executor: instant{}, LogDir: logDir, Serve: true, Control: c,
			Started: func() error {
				l, err := Listen(logDir)
				if err != nil {
					return err
				}
				srv := Serve(l, c, logDir)
				t.Cleanup(srv.Close)
				listening <- l
				return nil
			},
		}, nil)
		if err != nil {
			t.Error(err)
		}
		done <- s
	}()
	l := <-listening
	t.Cleanup(func() { l.Close() })
	client, err := Dial(logDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	return client, done
}

func TestProtocol(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{t.TempDir(), longDir(t)} {
		client, done := serveRun(t, dir)
		ctx := context.Background()
		st, err := os.Stat(filepath.Join(dir, SocketName))
		if err != nil || st.Mode().Perm() != 0o600 || st.Mode().Type() != os.ModeSocket {
			t.Fatalf("socket: %v %v", st.Mode(), err)
		}
		got, err := client.Submit(ctx, dispatch.Batch{Text: "sleep\nexit 1\n@b x\n", Defaults: dispatch.Defaults{Priority: 2}})
		if err != nil || len(got.IDs) != 2 || len(got.Errors) != 1 || !strings.HasPrefix(got.Errors[0], "submit:3: unknown host") {
			t.Fatalf("submit: %+v %v", got, err)
		}
		evs, err := client.Wait(ctx, []string{"2"})
		if err != nil || len(evs) != 1 || evs[0].Event != dispatch.EventFailed {
			t.Fatalf("wait: %+v %v", evs, err)
		}
		if as, err := client.Retry(ctx, []string{"2"}); err != nil || as[0].Err != "" {
			t.Fatalf("retry: %+v %v", as, err)
		}
		if _, err := client.Wait(ctx, []string{"2"}); err != nil {
			t.Fatal(err)
		}
		if as, err := client.Cancel(ctx, []string{"1", "9"}); err != nil || as[0].Err != "" || as[1].Err == "" {
			t.Fatalf("cancel: %+v %v", as, err)
		}
		if a, err := client.SetPriority(ctx, "1", 3); err != nil || a.Err == "" {
			t.Fatalf("priority of an ended job: %+v %v", a, err)
		}
		s, err := client.Status(ctx)
		if err != nil || len(s.Jobs) != 3 {
			t.Fatalf("status: %+v %v", s, err)
		}
		if err := client.Stop(ctx, false); err != nil {
			t.Fatal(err)
		}
		if sum := <-done; !sum.Interrupted {
			t.Errorf("summary %+v", sum)
		}
	}
}

func TestNoServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A stale socket: bound, then its server gone.
	ln, err := net.Listen("unix", filepath.Join(dir, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	for _, d := range []string{dir, t.TempDir()} {
		c, err := Dial(d)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Status(context.Background()); !errors.Is(err, ErrNoServer) {
			t.Errorf("%s: %v", d, err)
		}
		c.Close()
	}
	// A new server replaces the stale socket.
	l, err := Listen(dir)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if _, err := os.Lstat(filepath.Join(dir, SocketName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket outlived its server: %v", err)
	}
}

func TestListenRefuses(t *testing.T) {
	t.Parallel()
	open := t.TempDir()
	os.Chmod(open, 0o777)
	if _, err := Listen(open); err == nil || !strings.Contains(err.Error(), "may be written by every user") {
		t.Errorf("world-writable log dir: %v", err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, SocketName), nil, 0o600)
	if _, err := Listen(dir); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("a file in the way: %v", err)
	}
}

// Wait answers when the job ends, not before.
func TestWaitBlocks(t *testing.T) {
	t.Parallel()
	client, done := serveRun(t, t.TempDir())
	ctx := context.Background()
	got, err := client.Submit(ctx, dispatch.Batch{Text: "sleep\n"})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := client.Wait(short, got.IDs); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait on a running job returned: %v", err)
	}
	client.Stop(ctx, true)
	<-done
}

// Adopt finds nothing to follow: the fake keeps no attempt.
func (instant) Adopt(context.Context, string, executor.Command, int64, int64, io.Writer, io.Writer) (int, time.Time, error) {
	return -1, time.Now(), executor.ErrJobLost
}
