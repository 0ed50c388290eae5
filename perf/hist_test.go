package perf

import (
	"encoding/json"
	"sync"
	"testing"
	"time"
)

func TestHistPercentiles(t *testing.T) {
	tests := []struct {
		name          string
		samples       []time.Duration
		p50, p95, p99 time.Duration
	}{
		{"OneToHundred", seq(1, 100), 50, 95, 99},
		{"OneToTen", seq(1, 10), 5, 10, 10},
		{"Single", []time.Duration{7}, 7, 7, 7},
		{"Unsorted", []time.Duration{9, 1, 5, 3, 7}, 5, 9, 9},
		{"TwoHundred", seq(1, 200), 100, 190, 198},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHist(0)
			for _, d := range tt.samples {
				h.Add(d)
			}
			s := h.Summary()
			if s.Count != len(tt.samples) || s.P50 != tt.p50 || s.P95 != tt.p95 || s.P99 != tt.p99 {
				t.Fatalf("got n=%d p50=%d p95=%d p99=%d, want n=%d %d %d %d",
					s.Count, s.P50, s.P95, s.P99, len(tt.samples), tt.p50, tt.p95, tt.p99)
			}
		})
	}
}

func seq(from, to int) []time.Duration {
	var out []time.Duration
	for i := from; i <= to; i++ {
		out = append(out, time.Duration(i))
	}
	return out
}

func TestHistEmptyAndNil(t *testing.T) {
	if s := newHist(0).Summary(); s != (Summary{}) {
		t.Fatalf("empty histogram summary %+v", s)
	}
	var h *Hist
	if s := h.Summary(); s.Count != 0 {
		t.Fatalf("nil histogram summary %+v", s)
	}
}

func TestHistMinMaxMean(t *testing.T) {
	h := newHist(3)
	for _, d := range []time.Duration{30, 10, 20} {
		h.Add(d)
	}
	s := h.Summary()
	if s.Min != 10 || s.Max != 30 || s.Mean != 20 {
		t.Fatalf("min/max/mean %d/%d/%d, want 10/30/20", s.Min, s.Max, s.Mean)
	}
	if got := h.Samples(); got[0] != 30 || got[1] != 10 || got[2] != 20 {
		t.Fatalf("samples lost their order: %v", got)
	}
}

func TestHistConcurrentAdd(t *testing.T) {
	h := newHist(0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				h.Add(time.Duration(g*1000 + i))
			}
		})
	}
	wg.Wait()
	if n := h.Summary().Count; n != 8000 {
		t.Fatalf("count %d, want 8000", n)
	}
}

func TestHistJSONKeepsEverySample(t *testing.T) {
	h := newHist(0)
	for _, d := range seq(1, 100) {
		h.Add(d * time.Microsecond)
	}
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var raw histJSON
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	if raw.Count != 100 || len(raw.SamplesNs) != 100 || raw.P50Ns != 50_000 || raw.P99Ns != 99_000 {
		t.Fatalf("JSON %s", b)
	}
	var back Hist
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Summary() != h.Summary() {
		t.Fatalf("round trip %+v, want %+v", back.Summary(), h.Summary())
	}
}
