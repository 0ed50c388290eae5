package perf

import (
	"context"
	"fmt"
	"time"
)

// drainPoll is how often the drain checks the clients and then the router.
const drainPoll = 250 * time.Microsecond

// drainTimeout bounds the wait, after the last frame, for every consumer
// and agent to finish it and for the router to collect every artifact.
const drainTimeout = 10 * time.Second

// drain waits until every consumer has closed the last published frame
// and every agent the last call it was sent, then until the router tracks
// no artifact but the producer's prepared one. The collection lag runs from the latest of those closes
// (and the producer's own) to the first stats reading with no artifact.
// It returns the drained reading, taken with every client still connected.
func (s *schedule) drain(ctx context.Context) (routerSample, bool) {
	deadline := time.Now().Add(drainTimeout)
	s.mu.Lock()
	last, lastRelease := s.lastPublished, s.lastClose
	agentLast := append([]int(nil), s.agentLast...)
	s.mu.Unlock()
	s.env.progress.phase("%s: draining", s.env.name(s.agents))

	for {
		done := true
		release := lastRelease
		for _, c := range s.cons {
			c.mu.Lock()
			if c.maxSeq < last {
				done = false
			}
			release = later(release, c.closedAt)
			c.mu.Unlock()
		}
		for i, ag := range s.agts {
			ag.mu.Lock()
			if ag.maxSeq < agentLast[i] {
				done = false
			}
			release = later(release, ag.closedAt)
			ag.mu.Unlock()
		}
		if done {
			lastRelease = release
			break
		}
		if err := ctx.Err(); err != nil {
			s.errs.Add("drain", err)
			return routerSample{}, false
		}
		if time.Now().After(deadline) {
			s.errs.Add("drain", fmt.Errorf("consumers or agents did not finish frame %d within %v", last, drainTimeout))
			x, _ := s.env.host.stats().sample(ctx)
			return x, false
		}
		time.Sleep(drainPoll)
	}
	// The producer's allocation prepared ahead (AllocateAhead) is a staging
	// artifact it holds until it closes; nothing else may be left.
	prepared := int64(s.producer.Stats().PreparedWriters)
	s.out.PreparedLive = prepared
	var x routerSample
	var err error
	for {
		x, err = s.env.host.stats().sample(ctx)
		now := time.Now()
		if err == nil && int64(x.Artifacts) <= prepared {
			s.out.CollectionLagNs = now.Sub(lastRelease)
			return s.settle(ctx, x, prepared), true
		}
		if ctx.Err() != nil {
			s.errs.Add("drain", ctx.Err())
			return x, false
		}
		if now.After(deadline) {
			if err != nil {
				s.errs.Add("drain", err)
			} else {
				s.errs.Add("drain", fmt.Errorf("%d artifacts still tracked %v after the last frame", x.Artifacts, drainTimeout))
			}
			return x, false
		}
		time.Sleep(drainPoll)
	}
}

// settleTimeout bounds the wait for the last replies and notices of the
// drain to leave the router's lanes.
const settleTimeout = 200 * time.Millisecond

// settle returns the first reading, within settleTimeout of x, in which
// nothing is queued, no root is held and no store byte reserved: the
// replies to the last consumes and releases may still be on their lanes
// when the last artifact goes. It returns the last reading if that never
// happens, so a leak shows.
func (s *schedule) settle(ctx context.Context, x routerSample, prepared int64) routerSample {
	deadline := time.Now().Add(settleTimeout)
	for x.Queued != 0 || x.ArtifactRoots != 0 || int64(x.StoreBytes) > prepared*FrameBytes || int64(x.Artifacts) > prepared {
		if time.Now().After(deadline) {
			return x
		}
		time.Sleep(time.Millisecond)
		y, err := s.env.host.stats().sample(ctx)
		if err != nil {
			return x
		}
		x = y
	}
	return x
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
