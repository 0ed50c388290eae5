package perf

import (
	"fmt"
	"time"
)

// Target is one of the performance targets of docs/design.md checked on one
// schedule: a figure's p50 under a multiple of its baseline's p50. The
// verdict (Met) is against the baseline measured back to back, as the
// targets were written; PacedMet is the same check against the baseline
// paced at 60 Hz, the conditions the figure was measured in.
type Target struct {
	Name     string  `json:"name"`     // "seal round trip p50 < 1x copy() p50"
	Limit    float64 `json:"limit"`    // the multiple the ratio must stay under
	Measured bool    `json:"measured"` // false: a side was not measured
	Ratio    float64 `json:"ratio"`    // figure p50 / back-to-back baseline p50
	Met      bool    `json:"met"`
	// PacedRatio is figure p50 / paced baseline p50; 0 when there is none.
	PacedRatio float64 `json:"pacedRatio,omitempty"`
	PacedMet   bool    `json:"pacedMet,omitempty"`
	// The p50s compared (for the CPU target, CPU per frame), in ns.
	FigureNs        int64  `json:"figureNs"`
	BaselineNs      int64  `json:"baselineNs"`
	PacedBaselineNs int64  `json:"pacedBaselineNs,omitempty"`
	Note            string `json:"note,omitempty"`
}

func ratioTarget(name string, limit float64, fig *Hist, base Baseline) Target {
	t := Target{Name: name, Limit: limit}
	f, b := fig.Summary(), base.Hot.Summary()
	if f.Count == 0 || b.Count == 0 || b.P50 <= 0 {
		t.Note = "not measured"
		return t
	}
	t.FigureNs, t.BaselineNs = int64(f.P50), int64(b.P50)
	t.Ratio = float64(f.P50) / float64(b.P50)
	t.Measured, t.Met = true, t.Ratio < limit
	if p := base.Paced.Summary(); p.Count > 0 && p.P50 > 0 {
		t.PacedBaselineNs = int64(p.P50)
		t.PacedRatio = float64(f.P50) / float64(p.P50)
		t.PacedMet = t.PacedRatio < limit
	}
	return t
}

func fillName(f Fill) string {
	if f == FillMap {
		return "through Bytes"
	}
	return "through Write"
}

// checkTargets evaluates every docs/design.md target on one schedule; ping-pong
// targets use the ping-pong of the router's topology.
func checkTargets(b *Baselines, s *Schedule, fill Fill, embedded bool) []Target {
	return checkTargetsFor(b, s, fill, embedded, false)
}

// checkTargetsFor is checkTargets for a store mode: a pooled store's
// allocate is a lookup and its views slice a mapping made once, so their
// targets are tighter and the access baseline is a touch of a mapped frame.
func checkTargetsFor(b *Baselines, s *Schedule, fill Fill, embedded, pool bool) []Target {
	if b == nil {
		b = &Baselines{}
	}
	pp, topo := b.matching(embedded)
	allocate := ratioTarget("allocate round trip p50 < 3x "+topo+" ping-pong p50", 3, s.Allocate, pp.One)
	access := ratioTarget("consumer access p50 < 1.2x map+touch+unmap p50", 1.2, s.Access, b.MapTouch)
	if pool {
		allocate = ratioTarget("pool: allocate round trip p50 < 1.5x "+topo+" ping-pong p50", 1.5, s.Allocate, pp.One)
		access = ratioTarget("pool: consumer access p50 < 1.5x touch of a mapped frame p50", 1.5, s.Access, b.Touch)
	}
	out := []Target{
		ratioTarget("seal round trip p50 < 1x copy() p50", 1, s.Seal, b.Copy),
		allocate,
		ratioTarget("RPC round trip p50 < 3x "+topo+" two-hop ping-pong p50", 3, s.RPC, pp.Two),
		ratioTarget("publish admission p50 < 2x "+topo+" ping-pong p50", 2, s.Publish, pp.One),
		access,
		ratioTarget(fmt.Sprintf("producer fill %s p50 < 1.2x pwrite p50", fillName(fill)), 1.2, s.Fill, b.Pwrite),
	}
	nats := Target{Name: "router CPU per frame < 0.1x an embedded NATS server's", Limit: 0.1}
	switch {
	case s.NATSRouterCPUPerFrameUs == nil:
		nats.Note = "not measured here: bench/compare measures NATS on the same schedule"
	case embedded || s.RouterCPU.Err != "" || s.RouterCPU.PerFrameUs == 0 || *s.NATSRouterCPUPerFrameUs <= 0:
		nats.Note = "not measured (needs the router's own process)"
	default:
		// Net of the harness's stats sampling, which a NATS run lacks.
		nats.FigureNs = int64(s.RouterCPU.NetPerFrameUs * float64(time.Microsecond))
		nats.BaselineNs = int64(*s.NATSRouterCPUPerFrameUs * float64(time.Microsecond))
		nats.Ratio = s.RouterCPU.NetPerFrameUs / *s.NATSRouterCPUPerFrameUs
		nats.Measured, nats.Met = true, nats.Ratio < nats.Limit
	}
	return append(out, nats)
}
