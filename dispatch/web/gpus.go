package web

import (
	"context"
	"sync"
	"time"
)

// sampleGPUs asks every up host's nvidia-smi what its GPUs do, every
// SampleEvery while someone looks at the page, until ctx ends. All viewers
// share the sample.
func (s *Server) sampleGPUs(ctx context.Context) {
	if s.o.Probe == nil {
		return
	}
	t := time.NewTicker(s.o.SampleEvery)
	defer t.Stop()
	for {
		if s.watched() {
			s.sampleOnce(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.wake:
		}
	}
}

// watched reports whether a page is open, or was looked at lately.
func (s *Server) watched() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.clients) > 0 || time.Since(s.lastSeen) < 2*s.o.SampleEvery
}

// sampleOnce asks each host that is up and not a Slurm cluster, all at
// once, each for at most SampleEvery.
func (s *Server) sampleOnce(ctx context.Context) {
	octx, cancel := context.WithTimeout(ctx, overviewWait)
	o, err := s.o.Control.Overview(octx, 0)
	cancel()
	if err != nil {
		return
	}
	var wg sync.WaitGroup
	for _, h := range o.Hosts {
		if h.Cluster || h.Down || h.Removed {
			continue
		}
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, s.o.SampleEvery)
			defer cancel()
			gpus, err := s.o.Probe(pctx, h.Name)
			now := time.Now()
			s.mu.Lock()
			s.samples[h.Name] = sample{gpus: gpus, err: err, at: now}
			if err == nil {
				s.record(h.Name, gpus, now)
			}
			s.mu.Unlock()
		})
	}
	wg.Wait()
	s.poke()
}
