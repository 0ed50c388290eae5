package perf

import (
	"fmt"
	"strings"
	"time"
)

// FrameBudget is the sum of the baselines that a frame's latency, from
// the start of the producer's fill to a fast consumer having touched every
// line, is printed beside: what the kernel charges for the same way with
// no bus logic on it.
//
//	sum = pwrite + RoundTrips x (one-hop ping-pong, paced) + touch
//
// Every term is a p50 of this run. The round trips are always the paced
// ping-pong: the schedule meets a socket once per frame slot, never in a
// tight loop. The fill and the touch are summed twice, back to back (Sum)
// and paced (PacedSum).
type FrameBudget struct {
	Measured bool `json:"measured"`
	// RoundTrips counts the one-hop round trips on the path after the
	// fill; Trips says what each is.
	RoundTrips int      `json:"roundTrips"`
	Trips      []string `json:"trips"`
	// Touch names the consumer's touch baseline: a fresh mapping (map,
	// touch, unmap) in files mode, where every View maps the file; a frame
	// already mapped in pool mode, where a View slices a cached mapping.
	Touch         string `json:"touch"`
	PwriteNs      int64  `json:"pwriteNs"`
	PwritePacedNs int64  `json:"pwritePacedNs"`
	HopPacedNs    int64  `json:"hopPacedNs"`
	TouchNs       int64  `json:"touchNs"`
	TouchPacedNs  int64  `json:"touchPacedNs"`
	SumNs         int64  `json:"sumNs"`
	PacedSumNs    int64  `json:"pacedSumNs"`
}

// pathTrips names the one-hop round trips a frame's way takes after the
// fill, given the requests the producer sent (producer, in order, each
// answered before the next) and the store mode.
//
// Every request but the last is a whole round trip: the producer waits
// for its answer. The last one, the publish, is half of one: the router
// sends the delivery on as soon as the request arrives, and its answer
// goes back to the producer off the consumer's way; the delivery's leg to
// the consumer is the other half. In files mode the consumer's View then
// asks the router to open the file (artifact.open, a whole round trip); in
// pool mode it slices a mapping of the slot made at its first view.
func pathTrips(producer []string, pool bool) []string {
	if len(producer) == 0 {
		return nil
	}
	last := len(producer) - 1
	trips := append([]string(nil), producer[:last]...)
	trips = append(trips, producer[last]+" to the router, then the delivery to the consumer")
	if !pool {
		trips = append(trips, "artifact.open")
	}
	return trips
}

// frameBudget sums a schedule's frame-latency baselines; the ping-pong is
// the one of the router's topology.
func frameBudget(b *Baselines, s *Schedule, embedded, pool bool) FrameBudget {
	if b == nil {
		b = &Baselines{}
	}
	pp, _ := b.matching(embedded)
	fb := FrameBudget{Trips: pathTrips(s.ProducerPath, pool), Touch: "map+touch+unmap", TouchNs: p50(b.MapTouch.Hot),
		TouchPacedNs: p50(b.MapTouch.Paced)}
	if pool {
		fb.Touch, fb.TouchNs, fb.TouchPacedNs = "touch of a mapped frame", p50(b.Touch.Hot), p50(b.Touch.Paced)
	}
	fb.RoundTrips = len(fb.Trips)
	fb.PwriteNs, fb.PwritePacedNs, fb.HopPacedNs = p50(b.Pwrite.Hot), p50(b.Pwrite.Paced), p50(pp.One.Paced)
	if fb.RoundTrips == 0 || fb.PwriteNs == 0 || fb.PwritePacedNs == 0 || fb.HopPacedNs == 0 || fb.TouchNs == 0 || fb.TouchPacedNs == 0 {
		return fb
	}
	hops := int64(fb.RoundTrips) * fb.HopPacedNs
	fb.SumNs = fb.PwriteNs + hops + fb.TouchNs
	fb.PacedSumNs = fb.PwritePacedNs + hops + fb.TouchPacedNs
	fb.Measured = true
	return fb
}

// p50 is a histogram's median in ns, 0 when empty.
func p50(h *Hist) int64 { return int64(h.Summary().P50) }

// text is the sum and how it was made, for the report.
func (fb FrameBudget) text() string {
	if !fb.Measured {
		return "not measured"
	}
	ns := func(n int64) time.Duration { return time.Duration(n) }
	return fmt.Sprintf("%s (paced %s) = pwrite %s (paced %s) + %d x paced ping-pong %s (%s) + %s %s (paced %s)",
		msText(ns(fb.SumNs)), msText(ns(fb.PacedSumNs)), dur(ns(fb.PwriteNs)), dur(ns(fb.PwritePacedNs)),
		fb.RoundTrips, dur(ns(fb.HopPacedNs)), strings.Join(fb.Trips, "; "), fb.Touch, dur(ns(fb.TouchNs)),
		dur(ns(fb.TouchPacedNs)))
}
