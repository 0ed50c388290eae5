package perf

import (
	"encoding/json"
	"slices"
	"sync"
	"time"
)

// Hist keeps every sample of one latency. It is safe for concurrent use.
// Percentiles use the nearest-rank method on the sorted samples, so a
// reported value is always one that was measured.
type Hist struct {
	mu      sync.Mutex
	samples []time.Duration
}

// newHist returns a histogram with room for n samples.
func newHist(n int) *Hist { return &Hist{samples: make([]time.Duration, 0, n)} }

// Add records one sample.
func (h *Hist) Add(d time.Duration) {
	h.mu.Lock()
	h.samples = append(h.samples, d)
	h.mu.Unlock()
}

// Samples returns a copy of the samples in the order they were added.
func (h *Hist) Samples() []time.Duration {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.samples)
}

// Summary is what the report prints of a histogram. The zero Summary
// (Count 0) means nothing was measured.
type Summary struct {
	Count         int
	Min, Max      time.Duration
	Mean          time.Duration
	P50, P95, P99 time.Duration
}

// Summary computes the percentiles of the samples so far.
func (h *Hist) Summary() Summary {
	if h == nil {
		return Summary{}
	}
	s := h.Samples()
	if len(s) == 0 {
		return Summary{}
	}
	slices.Sort(s)
	var total time.Duration
	for _, d := range s {
		total += d
	}
	return Summary{
		Count: len(s), Min: s[0], Max: s[len(s)-1], Mean: total / time.Duration(len(s)),
		P50: rank(s, 50), P95: rank(s, 95), P99: rank(s, 99),
	}
}

// rank is the nearest-rank percentile p (0 < p <= 100) of sorted samples:
// the smallest sample with at least p percent of the samples at or below it.
func rank(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	i := int(p*float64(n)/100+0.9999999) - 1 // ceil(p*n/100) - 1
	return sorted[max(0, min(i, n-1))]
}

// histJSON is a histogram as the JSON report stores it: the summary and
// every sample, in nanoseconds.
type histJSON struct {
	Count     int     `json:"count"`
	P50Ns     int64   `json:"p50Ns"`
	P95Ns     int64   `json:"p95Ns"`
	P99Ns     int64   `json:"p99Ns"`
	MinNs     int64   `json:"minNs"`
	MaxNs     int64   `json:"maxNs"`
	MeanNs    int64   `json:"meanNs"`
	SamplesNs []int64 `json:"samplesNs"`
}

// MarshalJSON writes the summary and the raw samples.
func (h *Hist) MarshalJSON() ([]byte, error) {
	s := h.Summary()
	raw := h.Samples()
	out := histJSON{Count: s.Count, P50Ns: int64(s.P50), P95Ns: int64(s.P95), P99Ns: int64(s.P99),
		MinNs: int64(s.Min), MaxNs: int64(s.Max), MeanNs: int64(s.Mean), SamplesNs: make([]int64, len(raw))}
	for i, d := range raw {
		out.SamplesNs[i] = int64(d)
	}
	return json.Marshal(out)
}

// UnmarshalJSON restores the raw samples; the summary is recomputed.
func (h *Hist) UnmarshalJSON(b []byte) error {
	var in histJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.samples = make([]time.Duration, len(in.SamplesNs))
	for i, ns := range in.SamplesNs {
		h.samples[i] = time.Duration(ns)
	}
	return nil
}
