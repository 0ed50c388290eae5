package perf

import (
	"slices"
	"sync"
	"testing"
	"time"
)

func TestPathTrips(t *testing.T) {
	for _, c := range []struct {
		name     string
		producer []string
		pool     bool
		want     int
	}{
		{"seal then publish, files", sealThenPublish, false, 3},
		{"seal then publish, pool", sealThenPublish, true, 2},
		// The pipelined seal and publish the SDK is gaining: one request.
		{"pipelined, files", pipelinedSealPublish, false, 2},
		{"pipelined, pool", pipelinedSealPublish, true, 1},
		{"nothing published", nil, false, 0},
	} {
		got := pathTrips(c.producer, c.pool)
		if len(got) != c.want {
			t.Errorf("%s: %d round trips %q, want %d", c.name, len(got), got, c.want)
		}
		if c.want > 0 && slices.Contains(got, "artifact.open") == c.pool {
			t.Errorf("%s: %q: artifact.open counted %v in pool mode %v", c.name, got, !c.pool, c.pool)
		}
	}
}

func TestFrameBudget(t *testing.T) {
	us := time.Microsecond
	b, s := testBaselines(), testSchedule(1)
	files := frameBudget(b, s, false, false)
	// pwrite 100 + 3 x cross-process paced one hop 150 + map+touch+unmap 60;
	// paced: 400 + 450 + 100.
	if !files.Measured || files.RoundTrips != 3 || files.SumNs != int64(610*us) || files.PacedSumNs != int64(950*us) ||
		files.Touch != "map+touch+unmap" {
		t.Errorf("files: %+v", files)
	}
	// Pool: no artifact.open, and the touch of a mapped frame (10, paced 25).
	pool := frameBudget(b, s, false, true)
	if !pool.Measured || pool.RoundTrips != 2 || pool.SumNs != int64(410*us) || pool.PacedSumNs != int64(725*us) {
		t.Errorf("pool: %+v", pool)
	}
	// Embedded: the in-process one hop (paced 15).
	if e := frameBudget(b, s, true, false); e.HopPacedNs != int64(15*us) || e.SumNs != int64(205*us) {
		t.Errorf("embedded: %+v", e)
	}
	// A pipelined producer path takes one round trip off.
	s.ProducerPath = pipelinedSealPublish
	if p := frameBudget(b, s, false, false); p.RoundTrips != 2 || p.SumNs != int64(460*us) {
		t.Errorf("pipelined: %+v", p)
	}
	s.ProducerPath = nil
	if n := frameBudget(b, s, false, false); n.Measured || n.text() != "not measured" {
		t.Errorf("no frame published: %+v", n)
	}
	if n := frameBudget(&Baselines{}, testSchedule(1), false, false); n.Measured {
		t.Errorf("no baselines: %+v", n)
	}
}

func TestFillStarts(t *testing.T) {
	f := newFillStarts(3)
	t0 := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { f.set(2, t0) })
	wg.Wait()
	if got, ok := f.get(2); !ok || !got.Equal(t0) {
		t.Fatalf("get(2) = %v, %v", got, ok)
	}
	for _, seq := range []int{0, 1, 3, 4, -1} {
		if _, ok := f.get(seq); ok {
			t.Errorf("seq %d has a fill start", seq)
		}
	}
	f.set(99, t0) // beyond the plan: ignored
}
