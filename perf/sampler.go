package perf

import (
	"context"
	"sync"
	"time"
)

// sampleEvery is how often the harness reads the router's gauges during
// a schedule.
const sampleEvery = 10 * time.Millisecond

// sampler reads the router's stats every 10 ms and keeps the peaks.
type sampler struct {
	src    statsSource
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	last   routerSample
	peak   routerSample // field by field
	n      int
	errs   int
	latest error
}

func startSampler(ctx context.Context, src statsSource) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{src: src, cancel: cancel, done: make(chan struct{})}
	go s.loop(ctx)
	return s
}

func (s *sampler) loop(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		x, err := s.src.sample(ctx)
		if ctx.Err() != nil {
			return
		}
		s.record(x, err)
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

func (s *sampler) record(x routerSample, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.errs++
		s.latest = err
		return
	}
	s.n++
	s.last = x
	s.peak.Artifacts = max(s.peak.Artifacts, x.Artifacts)
	s.peak.ArtifactRoots = max(s.peak.ArtifactRoots, x.ArtifactRoots)
	s.peak.Queued = max(s.peak.Queued, x.Queued)
	s.peak.StoreBytes = max(s.peak.StoreBytes, x.StoreBytes)
	s.peak.StoreFiles = max(s.peak.StoreFiles, x.StoreFiles)
	s.peak.Owners = max(s.peak.Owners, x.Owners)
}

// current is the latest sample.
func (s *sampler) current() routerSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// stop ends sampling and returns the peaks, the number of samples and of
// failed reads, and the last failure.
func (s *sampler) stop() (peak routerSample, n, errs int, latest error) {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak, s.n, s.errs, s.latest
}
