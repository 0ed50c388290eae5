package router

import (
	"testing"
	"time"
)

func TestHistogramBuckets(t *testing.T) {
	var h histogram
	var sum time.Duration
	for _, c := range []struct {
		d      time.Duration
		bucket int
	}{
		{-time.Second, 0}, {0, 0}, {time.Microsecond, 0}, {time.Microsecond + 1, 1}, {2 * time.Microsecond, 1},
		{2*time.Microsecond + 1, 2}, {1000 * time.Microsecond, 10}, {1024 * time.Microsecond, 10},
		{1025 * time.Microsecond, 11}, {time.Second, 20}, {(1 << 20) * time.Microsecond, 20},
		{(1<<20)*time.Microsecond + 1, 21}, {time.Hour, 21},
	} {
		before := h.snapshot()
		h.observe(c.d)
		sum += max(c.d, 0)
		after := h.snapshot()
		for i := range after.Buckets {
			want := before.Buckets[i].Count
			if i == c.bucket {
				want++
			}
			if after.Buckets[i].Count != want {
				t.Errorf("%v: bucket %d holds %d, want %d", c.d, i, after.Buckets[i].Count, want)
			}
		}
		if i := c.bucket; i < latencyBuckets && c.d > after.Buckets[i].UpperBound {
			t.Errorf("%v landed in bucket %d bounded by %v", c.d, i, after.Buckets[i].UpperBound)
		}
	}
	s := h.snapshot()
	if s.Count != 13 || s.Buckets[latencyBuckets].UpperBound != -1 {
		t.Fatalf("count %d, last bound %v", s.Count, s.Buckets[latencyBuckets].UpperBound)
	}
	if s.Sum != sum {
		t.Errorf("sum %v, want %v", s.Sum, sum)
	}
}

func TestHistogramQuantile(t *testing.T) {
	var h histogram
	if q := h.snapshot().Quantile(0.5); q != 0 {
		t.Fatalf("empty: %v", q)
	}
	for range 90 {
		h.observe(3 * time.Microsecond) // bucket bounded by 4 µs
	}
	for range 10 {
		h.observe(300 * time.Millisecond) // bounded by 524,288 µs
	}
	s := h.snapshot()
	if q := s.Quantile(0.5); q != 4*time.Microsecond {
		t.Errorf("p50 %v", q)
	}
	if q := s.Quantile(0.9); q != 4*time.Microsecond {
		t.Errorf("p90 %v", q)
	}
	if q := s.Quantile(0.99); q != 524288*time.Microsecond {
		t.Errorf("p99 %v", q)
	}
	h.observe(time.Hour)
	if q := h.snapshot().Quantile(1); q != BucketBound(latencyBuckets-1) {
		t.Errorf("max in the unbounded bucket: %v", q)
	}
}

func TestHistogramSince(t *testing.T) {
	var h histogram
	h.observe(time.Microsecond)
	prev := h.snapshot()
	h.observe(time.Microsecond)
	h.observe(time.Second)
	d := h.snapshot().Since(prev)
	if d.Count != 2 || d.Buckets[0].Count != 1 || d.Buckets[20].Count != 1 || d.Sum != time.Second+time.Microsecond {
		t.Fatalf("since: %+v", d)
	}
	if all := h.snapshot().Since(Histogram{}); all.Count != 3 {
		t.Fatalf("since nothing: %d", all.Count)
	}
}
