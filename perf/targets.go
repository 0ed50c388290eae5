package perf

import (
	"fmt"
	"time"
)

// Basis says which measurement of a baseline a target's verdict is taken
// against: the tight loop, or the same operation paced at 60 Hz.
type Basis string

// The two bases of a verdict.
const (
	BasisBackToBack Basis = "back to back"
	BasisPaced      Basis = "paced"
)

// Target is one of the performance targets of docs/design.md checked on one
// schedule: a figure's p50 under a multiple of a baseline's p50, both from
// the same run. Basis says which measurement of the baseline the verdict
// (Met) uses; both ratios are kept, the other one for comparison.
type Target struct {
	Name     string  `json:"name"`     // "seal round trip p50 < 1x copy() p50"
	Limit    float64 `json:"limit"`    // the multiple the ratio must stay under
	Basis    Basis   `json:"basis"`    // which ratio Met is taken on
	Measured bool    `json:"measured"` // false: a side was not measured
	Ratio    float64 `json:"ratio"`    // figure p50 / back-to-back baseline p50
	Met      bool    `json:"met"`
	// PacedRatio is figure p50 / paced baseline p50; 0 when there is none.
	// PacedMet is PacedRatio < Limit: the verdict when Basis is paced, for
	// comparison otherwise.
	PacedRatio float64 `json:"pacedRatio,omitempty"`
	PacedMet   bool    `json:"pacedMet,omitempty"`
	// The p50s compared (for the CPU target, CPU per frame), in ns.
	FigureNs        int64  `json:"figureNs"`
	BaselineNs      int64  `json:"baselineNs"`
	PacedBaselineNs int64  `json:"pacedBaselineNs,omitempty"`
	Note            string `json:"note,omitempty"`
}

// sealTarget checks the seal round trip, which only a producer that waits
// for Seal measures (--seal-wait).
func sealTarget(s *Schedule, b *Baselines) Target {
	t := ratioTarget("seal round trip p50 < 1x copy() p50", 1, s.Seal, b.Copy)
	if !t.Measured && len(s.ProducerPath) > 0 && s.ProducerPath[0] != "seal" {
		t.Note = "not measured: the producer pipelined its seal with the publish (run with --seal-wait)"
	}
	return t
}

// ratioTarget is a target whose verdict is against the back-to-back baseline.
func ratioTarget(name string, limit float64, fig *Hist, base Baseline) Target {
	return basisTarget(name, limit, BasisBackToBack, fig, base)
}

// pacedTarget is a target whose verdict is against the paced baseline.
func pacedTarget(name string, limit float64, fig *Hist, base Baseline) Target {
	return basisTarget(name, limit, BasisPaced, fig, base)
}

func basisTarget(name string, limit float64, basis Basis, fig *Hist, base Baseline) Target {
	t := Target{Name: name, Limit: limit, Basis: basis, Note: "not measured"}
	f := fig.Summary()
	if f.Count == 0 {
		return t
	}
	t.FigureNs = int64(f.P50)
	if b := base.Hot.Summary(); b.Count > 0 && b.P50 > 0 {
		t.BaselineNs = int64(b.P50)
		t.Ratio = float64(f.P50) / float64(b.P50)
	}
	if p := base.Paced.Summary(); p.Count > 0 && p.P50 > 0 {
		t.PacedBaselineNs = int64(p.P50)
		t.PacedRatio = float64(f.P50) / float64(p.P50)
		t.PacedMet = t.PacedRatio < limit
	}
	switch {
	case basis == BasisPaced && t.PacedRatio > 0:
		t.Measured, t.Met = true, t.PacedMet
	case basis == BasisBackToBack && t.Ratio > 0:
		t.Measured, t.Met = true, t.Ratio < limit
	}
	if t.Measured {
		t.Note = ""
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
		sealTarget(s, b),
		allocate,
		// The RPC has two verdicts: the paced one is the conditions it runs
		// in, the back-to-back one keeps the kernel's best case in view.
		pacedTarget("RPC round trip p50 < 1.5x paced "+topo+" two-hop ping-pong p50", 1.5, s.RPC, pp.Two),
		ratioTarget("RPC round trip p50 < 3x back-to-back "+topo+" two-hop ping-pong p50", 3, s.RPC, pp.Two),
		pacedTarget("publish admission p50 < 1.3x paced "+topo+" ping-pong p50", 1.3, s.Publish, pp.One),
		pacedTarget("producer's critical path (Allocate returned to Publish answered) p50 < 1.5x paced "+topo+
			" ping-pong p50", 1.5, s.CriticalPath, pp.One),
		access,
		ratioTarget(fmt.Sprintf("producer fill %s p50 < 1.2x pwrite p50", fillName(fill)), 1.2, s.Fill, b.Pwrite),
	}
	// The target is 0.25x; 0.1x is the stretch, shown in the note.
	nats := Target{Name: "router CPU per frame < 0.25x an embedded NATS server's", Limit: 0.25, Basis: BasisBackToBack}
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
		if nats.Ratio < 0.1 {
			nats.Note = "the 0.1x stretch is met too"
		} else {
			nats.Note = "the 0.1x stretch is not"
		}
	}
	return append(out, nats)
}
