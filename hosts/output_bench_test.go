package hosts

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"

	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// BenchmarkOutputStream has one job write 1 GiB to stdout, streamed over
// the pooled connection into a file, and puts it next to OpenSSH's own
// client doing the same (`ssh host 'head -c 1G /dev/zero' > file`) in the
// same run (the target: at least half its rate, memory constant):
//
//	go test ./hosts -run '^$' -bench OutputStream -benchtime 2x
func BenchmarkOutputStream(b *testing.B) {
	if _, err := exec.LookPath("ssh"); err != nil {
		b.Skip("no ssh client to compare with")
	}
	b.Setenv("SSH_AUTH_SOCK", "")
	l := sshtest.Start(b, sshtest.Options{Hosts: 1, GPUs: 1})
	lab := openLab(b, l)
	r := lab.Runner("node1")
	const size = 1 << 30
	script := "head -c 1073741824 /dev/zero"
	dir := b.TempDir()
	var ours, theirs time.Duration
	var heapAfter uint64
	for i := range b.N {
		out, err := os.Create(filepath.Join(dir, "out"))
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		code, err := r.Run(context.Background(), executor.Command{Script: script}, out, os.Stderr)
		ours += time.Since(start)
		out.Close()
		if err != nil || code != 0 {
			b.Fatalf("run: %d %v", code, err)
		}
		if st, _ := os.Stat(out.Name()); st.Size() != size {
			b.Fatalf("log has %d bytes, want %d", st.Size(), size)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heapAfter = max(heapAfter, ms.HeapInuse)

		ssh := exec.Command("ssh", "-F", l.SSHConfig, "node1", script)
		f, err := os.Create(filepath.Join(dir, "ssh.out"))
		if err != nil {
			b.Fatal(err)
		}
		ssh.Stdout = f
		start = time.Now()
		if err := ssh.Run(); err != nil {
			b.Fatalf("ssh: %v (run %d)", err, i)
		}
		theirs += time.Since(start)
		f.Close()
	}
	mbps := func(d time.Duration) float64 { return float64(b.N) * size / (1 << 20) / d.Seconds() }
	b.ReportMetric(mbps(ours), "gpd-MiB/s")
	b.ReportMetric(mbps(theirs), "ssh-MiB/s")
	b.ReportMetric(float64(theirs)/float64(ours), "ratio")
	b.ReportMetric(float64(heapAfter)/(1<<20), "heap-MiB")
}
