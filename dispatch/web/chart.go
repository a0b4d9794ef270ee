package web

import (
	"strconv"
	"strings"
	"time"

	"github.com/gpudispatch/gpudispatch/dispatch/executor"
)

// chartSpan is how far back a GPU's chart goes, and chartPoints how many
// samples it keeps at most (one per SampleEvery, 5 s by default).
const (
	chartSpan   = time.Hour
	chartPoints = 720
)

// point is one sample of a GPU: its memory used and its utilisation, in
// percent (-1: nvidia-smi did not say).
type point struct {
	at        time.Time
	mem, util int
}

// gpuPlace names a GPU of a host, for its history.
type gpuPlace struct {
	host string
	gpu  int
}

// record adds the sample of host's gpus taken at to the GPUs' histories,
// and forgets what is older than chartSpan. The caller holds s.mu.
func (s *Server) record(host string, gpus []executor.GPU, at time.Time) {
	for _, g := range gpus {
		if g.Error != "" {
			continue
		}
		mem := -1
		if g.MemoryTotalMB > 0 && g.MemoryUsedMB >= 0 {
			mem = g.MemoryUsedMB * 100 / g.MemoryTotalMB
		}
		k := gpuPlace{host, g.Index}
		h := append(s.history[k], point{at, mem, g.Utilization})
		i := 0
		for i < len(h) && (at.Sub(h[i].at) > chartSpan || len(h)-i > chartPoints) {
			i++
		}
		s.history[k] = h[i:]
	}
}

// chart is a GPU's last hour as two lines, memory used and utilisation:
// SVG points, x in seconds since its first sample (Span the last one's),
// y in percent from the top. It changes only when a sample comes, so
// that the page's part changes only then.
type chart struct {
	Mem, Util string
	Span      int
}

// chartOf draws the history of a GPU, or nil with fewer than two
// samples.
func chartOf(h []point) *chart {
	if len(h) < 2 {
		return nil
	}
	first := h[0].at
	line := func(val func(point) int) string {
		var b strings.Builder
		for _, p := range h {
			v := val(p)
			if v < 0 {
				continue // not said: the line skips it
			}
			b.WriteString(strconv.FormatFloat(p.at.Sub(first).Seconds(), 'f', 0, 64))
			b.WriteByte(',')
			b.WriteString(strconv.Itoa(100 - min(v, 100)))
			b.WriteByte(' ')
		}
		return strings.TrimSpace(b.String())
	}
	span := max(int(h[len(h)-1].at.Sub(first).Seconds()), 1)
	return &chart{Mem: line(func(p point) int { return p.mem }), Util: line(func(p point) int { return p.util }), Span: span}
}
