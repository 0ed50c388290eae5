package router

import (
	"math"
	"math/bits"
	"slices"
	"sync/atomic"
	"time"
)

// latencyBuckets is how many finite buckets a Histogram has: upper bounds
// of 1 µs doubling up to 2^20 µs (about 1.05 s), then one for the rest.
// Doubling keeps the index one bit count, so an observation is a clock
// read and two atomic adds; the router times every command with it.
const latencyBuckets = 21

// histogram counts durations into latencyBuckets+1 buckets. Safe for
// concurrent use; observations are lock-free.
type histogram struct {
	counts [latencyBuckets + 1]atomic.Uint64
	sumNs  atomic.Uint64
}

func (h *histogram) observe(d time.Duration) {
	if d < 0 {
		d = 0 // a clock step back; count it, as nothing
	}
	ns := uint64(d)
	i := 0
	if ns > 1000 {
		i = min(bits.Len64((ns-1)/1000), latencyBuckets)
	}
	h.counts[i].Add(1)
	h.sumNs.Add(ns)
}

// snapshot reads the counts. Concurrent observations may land on either
// side of the read; Count is the sum of the buckets read, so the snapshot
// is consistent with itself.
func (h *histogram) snapshot() Histogram {
	s := Histogram{Buckets: make([]HistogramBucket, latencyBuckets+1)}
	for i := range s.Buckets {
		n := h.counts[i].Load()
		s.Count += n
		s.Buckets[i] = HistogramBucket{UpperBound: BucketBound(i), Count: n}
	}
	s.Sum = time.Duration(h.sumNs.Load())
	return s
}

// BucketBound is the upper bound of bucket i of a Histogram: 1 µs << i,
// and for the last bucket a negative duration, meaning no bound.
func BucketBound(i int) time.Duration {
	if i >= latencyBuckets {
		return -1
	}
	return time.Microsecond << i
}

// Histogram is a latency distribution the router measured: per bucket, how
// many observations were at most its upper bound and above the previous
// bucket's (not cumulative). The last bucket has no bound (UpperBound -1).
type Histogram struct {
	Buckets []HistogramBucket `json:"buckets"`
	Count   uint64            `json:"count"`
	Sum     time.Duration     `json:"sumNs"`
}

// HistogramBucket is one bucket of a Histogram.
type HistogramBucket struct {
	UpperBound time.Duration `json:"upperBoundNs"` // -1: no bound
	Count      uint64        `json:"count"`
}

// Quantile estimates the q-quantile (0 < q <= 1) as the upper bound of the
// bucket that holds it, so within a factor of two; 0 when empty, and the
// last finite bound when it falls in the unbounded bucket.
func (h Histogram) Quantile(q float64) time.Duration {
	if h.Count == 0 {
		return 0
	}
	rank := max(uint64(math.Ceil(q*float64(h.Count))), 1) // the smallest rank covering q of them
	var seen uint64
	for i, b := range h.Buckets {
		seen += b.Count
		if seen >= rank {
			if b.UpperBound < 0 {
				return BucketBound(i - 1)
			}
			return b.UpperBound
		}
	}
	return BucketBound(latencyBuckets - 1)
}

// Latencies are the distributions the router times itself.
type Latencies struct {
	// Admission: from the moment the shell hands a decoded command to the
	// routing core until it has left the lock (waiting for the lock
	// included), that is, what the router adds to a command before any
	// reply or delivery can be written.
	Admission Histogram `json:"admission"`
	// LaneWait: from the step that readied a connection's frames until the
	// write of the batch that carries them begins. A connection whose
	// reader is slow shows here as its writes wait behind earlier ones.
	LaneWait Histogram `json:"laneWait"`
}

// Latencies returns the router's latency distributions since it started.
func (r *Router) Latencies() Latencies {
	return Latencies{Admission: r.admission.snapshot(), LaneWait: r.laneWait.snapshot()}
}

// Since is what h counted after prev, an earlier snapshot of the same
// histogram: the distribution over the interval between them.
func (h Histogram) Since(prev Histogram) Histogram {
	out := Histogram{Buckets: slices.Clone(h.Buckets), Count: h.Count, Sum: h.Sum}
	if len(prev.Buckets) != len(h.Buckets) || prev.Count > h.Count {
		return out // not an earlier snapshot of this one: all of h
	}
	for i, b := range prev.Buckets {
		out.Buckets[i].Count -= min(b.Count, out.Buckets[i].Count)
	}
	out.Count, out.Sum = h.Count-prev.Count, h.Sum-prev.Sum
	return out
}
