package hosts

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/snapshot"
	"github.com/gpudispatch/gpudispatch/hosts/codestore"
	"github.com/gpudispatch/gpudispatch/hosts/spawn"
	"github.com/gpudispatch/gpudispatch/hosts/sshtest"
)

// BenchmarkSyncVsRsync puts a project of 10,000 files (200 MB) on 4 real
// OpenSSH hosts, then again with one file changed: a snapshot shipped by
// gpudispatch (taken here, then put on the hosts at once, over the run's
// pooled connections) against rsync -a to each host at once through a
// warm ControlMaster. gpudispatch's store shells are started ahead, as a
// run starts them while it opens its hosts. The ratios are rsync's time
// over gpudispatch's (above 1: gpudispatch is faster); the first
// snapshot's is of four copies each, each going first twice, the second
// snapshot's the median of five edits. Each first copy is a run into a
// new log dir; the second snapshots are runs into one log dir, whose
// working tree of the next snapshot is made from its last one. A run
// into a new log dir of a snapshot the hosts have (newlog: the log dir's
// own copy of the tree, on each host) is set against rsync into a new
// directory. The second snapshot is also
// shipped with no shell started ahead (gpd-cold-second-s: a submit's
// snapshot to a standing queue), and so through rsync's ControlMasters
// (gpd-mux-second-s).
//
//	go test ./hosts -run '^$' -bench SyncVsRsync -benchtime 1x
func BenchmarkSyncVsRsync(b *testing.B) {
	if _, err := exec.LookPath("rsync"); err != nil {
		b.Skip("rsync is not installed: nothing to compare with")
	}
	sshtest.Require(b)
	lab := sshtest.Start(b, sshtest.Options{Hosts: 4})
	pools := openLab(b, lab)
	proj := b.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 20_000)
	for i := range 10_000 {
		for j := range buf {
			buf[j] = byte(rng.Uint32())
		}
		p := filepath.Join(proj, fmt.Sprintf("d%02d/f%05d.bin", i%50, i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	ctl := filepath.Join(b.TempDir(), "cm-%C") // %h is 127.0.0.1 for every host
	sshArgs := fmt.Sprintf("ssh -F %s -o BatchMode=yes -o ControlMaster=auto -o ControlPath=%s -o ControlPersist=60", lab.SSHConfig, ctl)
	for _, h := range lab.Hosts {
		if out, err := exec.Command("sh", "-c", sshArgs+" "+h.Name+" true").CombinedOutput(); err != nil {
			b.Fatalf("warming the ControlMaster of %s: %v: %s", h.Name, err, out)
		}
	}
	// rsync copies into dest in each host's home (a fresh one is a first
	// copy). The path is absolute: a session of these hosts starts in the
	// user's home of /etc/passwd, which all of them share (only $HOME is
	// the host's), so a relative one had four hosts write one directory
	// that outlived the run, and rsync's "first" copy sent no content.
	rsync := func(dest string) time.Duration {
		settle()
		start := time.Now()
		each(b, lab, func(h *sshtest.Host) error {
			out, err := exec.Command("rsync", "-a", "-e", sshArgs, proj+"/", h.Name+":"+filepath.Join(h.Home, dest)+"/").CombinedOutput()
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
		return time.Since(start)
	}
	var took []time.Duration
	// pooled is the run's own connection to a host; mux, ssh's through the
	// ControlMaster rsync uses.
	pooled := func(h *sshtest.Host) spawn.Func { return pools.Runner(h.Name).(*Remote).spawn }
	mux := func(h *sshtest.Host) spawn.Func {
		return lab.Spawn(h.Name, "ControlMaster=auto", "ControlPath="+ctl, "ControlPersist=60")
	}
	// gpd ships through via, with the content store local here and dir on
	// the hosts (fresh ones: a first snapshot); warm: the hosts' store
	// shells are started ahead, as a run starts them while it opens its
	// hosts.
	gpd := func(via func(*sshtest.Host) spawn.Func, warm bool, local, dir, log string) time.Duration {
		stores := map[string]*codestore.Store{}
		for _, h := range lab.Hosts {
			stores[h.Name] = codestore.New(via(h), 0, dir)
			if warm {
				stores[h.Name].Warm()
			}
		}
		settle()
		start := time.Now()
		s, err := snapshot.Take(context.Background(), proj, local, snapshot.DefaultLimit)
		if err != nil {
			b.Fatal(err)
		}
		// As a run does.
		snapshot.PruneOften(local, codestore.DefaultKeep)
		took = append(took, time.Since(start))
		each(b, lab, func(h *sshtest.Host) error {
			// Neither pays a handshake: both connections are warm.
			_, _, err := stores[h.Name].Ensure(context.Background(), s.Code(), log)
			return err
		})
		elapsed := time.Since(start)
		// What the hosts do after they answered (a spare copy of the
		// tree for the next snapshot) is not in the time, and is over
		// before rsync's turn.
		for _, st := range stores {
			st.Close()
		}
		return elapsed
	}
	edit := func() {
		os.WriteFile(filepath.Join(proj, "d00/f00000.bin"), []byte(time.Now().String()), 0o644)
	}
	local := b.TempDir()
	for b.Loop() {
		// A first copy is mostly creating files on the hosts' disk, and
		// whoever goes second is slower (on this VM's ext4 right after a
		// mass deletion, such as the last run's clean-up, whoever creates
		// files first pays for finding free inodes instead): so each goes
		// first twice, in two ABBA rounds, into fresh stores and
		// directories, and the ratio is of the sums. The second
		// snapshots below start from the first round's.
		var gSum, rSum, takeSum time.Duration
		var pairs []float64
		first := func(i int, gpdAhead bool) {
			dest, store, cache := "rsynced", "", local
			if i > 0 {
				dest, store, cache = fmt.Sprintf("rsynced-%d", i), fmt.Sprintf("~/.gpudispatch/code-%d", i), b.TempDir()
			}
			var g, r time.Duration
			log := fmt.Sprintf("f%d", i)
			if gpdAhead {
				g, r = gpd(pooled, true, cache, store, log), rsync(dest)
			} else {
				r, g = rsync(dest), gpd(pooled, true, cache, store, log)
			}
			for _, h := range lab.Hosts {
				if _, err := os.Stat(filepath.Join(h.Home, dest, "d00/f00000.bin")); err != nil {
					b.Fatalf("rsync's copy is not in %s's home: %v", h.Name, err)
				}
			}
			gSum, rSum, takeSum = gSum+g, rSum+r, takeSum+took[len(took)-1]
			pairs = append(pairs, r.Seconds()/g.Seconds())
			b.Logf("first copy %d (gpudispatch ahead: %t): gpudispatch %.2f s, rsync %.2f s", i+1, gpdAhead, g.Seconds(), r.Seconds())
		}
		for i := range 4 {
			first(i, i == 0 || i == 3)
		}
		b.ReportMetric(rSum.Seconds()/gSum.Seconds(), "first-ratio")
		b.ReportMetric(slices.Min(pairs), "first-ratio-min")
		b.ReportMetric(slices.Max(pairs), "first-ratio-max")
		b.ReportMetric(takeSum.Seconds()/4, "take-first-s")
		b.ReportMetric(gSum.Seconds()/4, "gpd-first-s")
		b.ReportMetric(rSum.Seconds()/4, "rsync-first-s")
		// The second snapshot takes a fraction of a second, which the
		// VM's moods move by half: the median of five.
		var ratio, g2, r2, c2, m2, takes []float64
		for range 5 {
			edit()
			g, r := gpd(pooled, true, local, "", "f0"), rsync("rsynced")
			ratio, g2, r2 = append(ratio, r.Seconds()/g.Seconds()), append(g2, g.Seconds()), append(r2, r.Seconds())
			takes = append(takes, took[len(took)-1].Seconds())
			b.Logf("second snapshot %d: gpudispatch %.0f ms (its snapshot here %.0f ms), rsync %.0f ms", len(g2), g.Seconds()*1000, takes[len(takes)-1]*1000, r.Seconds()*1000)
			edit()
			c2 = append(c2, gpd(pooled, false, local, "", "f0").Seconds())
			edit()
			m2 = append(m2, gpd(mux, false, local, "", "f0").Seconds())
		}
		b.ReportMetric(median(ratio), "second-ratio")
		b.ReportMetric(median(takes), "take-second-s")
		b.ReportMetric(median(g2), "gpd-second-s")
		b.ReportMetric(median(r2), "rsync-second-s")
		b.ReportMetric(median(c2), "gpd-cold-second-s")
		b.ReportMetric(median(m2), "gpd-mux-second-s")
		b.ReportMetric(slices.Min(ratio), "second-ratio-min")
		b.ReportMetric(slices.Max(ratio), "second-ratio-max")
		// A run into a new log dir of the snapshot the hosts have: its
		// own copy of the tree on each host; rsync copies the project
		// into a new directory.
		g := gpd(pooled, true, local, "", "ee")
		r := rsync("rsynced-newlog")
		b.Logf("a new log dir of an unchanged snapshot: gpudispatch %.2f s, rsync into a new directory %.2f s", g.Seconds(), r.Seconds())
		b.ReportMetric(r.Seconds()/g.Seconds(), "newlog-ratio")
		b.ReportMetric(g.Seconds(), "gpd-newlog-s")
		b.ReportMetric(r.Seconds(), "rsync-newlog-s")
	}
}

// median is the middle of xs (an odd count).
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}

// settle writes out what the disk still owes (the project just made, the
// copies of the last step), so that no step pays for the one before it.
func settle() {
	syscall.Sync()
	time.Sleep(time.Second)
}

// each runs f for every host of lab at once.
func each(b *testing.B, lab *sshtest.Lab, f func(*sshtest.Host) error) {
	var wg sync.WaitGroup
	for _, h := range lab.Hosts {
		wg.Go(func() {
			if err := f(h); err != nil {
				b.Errorf("%s: %v", h.Name, err)
			}
		})
	}
	wg.Wait()
}
