package perf

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/wire"
)

// The stalled subscriber's credits: a small bounded queue, so that it is
// full within a few frame slots and stays full.
const (
	stalledQueued   = 4
	stalledInFlight = 1
)

// isolationLimit bounds every other client's RPC p99 with the stalled
// subscriber over its p99 without it.
const isolationLimit = 1.2

// SideTraffic is what the two isolation passes add to the one-agent
// schedule: a side publisher posting one small message (no artifact) per
// frame slot to a topic of its own and, in the second pass only, a bounded
// subscriber of that topic that never takes a message.
//
// The stalled subscriber cannot subscribe to the frame topic: once its
// bounded queue is full the router refuses every publication to that topic
// (BACKPRESSURE, as bounded mode promises), which would stop the frames to
// everyone and compare a loaded pass with an idle one.
type SideTraffic struct {
	Topic    string `json:"topic"`
	Stalled  bool   `json:"stalledSubscriber"`
	Queued   int    `json:"stalledQueued,omitempty"`
	InFlight int    `json:"stalledInFlight,omitempty"`
	// The side publisher's publications: admitted, and refused with
	// BACKPRESSURE once the stalled subscriber's queue was full.
	Admitted uint64 `json:"admitted"`
	Refused  uint64 `json:"refusedBackpressure"`
}

// Isolation is the stalled-subscriber comparison: two one-agent passes run
// one after the other, identical but for the stalled subscriber.
type Isolation struct {
	Without *Schedule      `json:"without"`
	With    *Schedule      `json:"with"`
	Rows    []IsolationRow `json:"rows"`
}

// IsolationRow is one client's p99 in both passes. Rows with a Limit are
// targets (every agent's RPC round trip); the others are for comparison.
type IsolationRow struct {
	Client       string  `json:"client"`
	WithoutP99Ns int64   `json:"withoutP99Ns"`
	WithP99Ns    int64   `json:"withP99Ns"`
	Ratio        float64 `json:"ratio"` // with / without
	Limit        float64 `json:"limit,omitempty"`
	Measured     bool    `json:"measured"`
	Met          bool    `json:"met,omitempty"`
}

// Met reports whether every target row was measured and met.
func (iso *Isolation) Met() bool {
	for _, r := range iso.Rows {
		if r.Limit > 0 && (!r.Measured || !r.Met) {
			return false
		}
	}
	return true
}

// compareIsolation builds the rows from the two passes.
func compareIsolation(without, with *Schedule) *Isolation {
	iso := &Isolation{Without: without, With: with}
	row := func(name string, limit float64, a, b *Hist) {
		r := IsolationRow{Client: name, Limit: limit}
		x, y := a.Summary(), b.Summary()
		r.WithoutP99Ns, r.WithP99Ns = int64(x.P99), int64(y.P99)
		if x.Count > 0 && y.Count > 0 && x.P99 > 0 {
			r.Measured, r.Ratio = true, float64(y.P99)/float64(x.P99)
			r.Met = limit > 0 && r.Ratio <= limit
		}
		iso.Rows = append(iso.Rows, r)
	}
	for i := range min(len(without.RPCByAgent), len(with.RPCByAgent)) {
		row(fmt.Sprintf("producer → agent %d: RPC round trip", i+1), isolationLimit, without.RPCByAgent[i], with.RPCByAgent[i])
	}
	row("producer: publish admission of frames", 0, without.Publish, with.Publish)
	row("fast consumers: delivery, before Publish to first byte", 0, without.DeliveryFast, with.DeliveryFast)
	row("fast consumers: frame latency, fill start to every line touched", 0, without.FrameLatency, with.FrameLatency)
	return iso
}

// runIsolation runs the two passes of the one-agent schedule; first is
// the index of the first pass in the run (for unique names).
func runIsolation(ctx context.Context, env scheduleEnv, first int) *Isolation {
	var passes [2]*Schedule
	for i, stalled := range []bool{false, true} {
		e := env
		e.index = first + i
		e.side = &sidePlan{stalled: stalled}
		e.label = "isolation, without the stalled subscriber"
		if stalled {
			e.label = "isolation, with the stalled subscriber"
		}
		passes[i] = runSchedule(ctx, e, 1)
		if ctx.Err() != nil {
			break
		}
	}
	if passes[1] == nil {
		return nil
	}
	return compareIsolation(passes[0], passes[1])
}

// sidePlan asks a schedule for side traffic.
type sidePlan struct{ stalled bool }

// sideClients are a schedule's side publisher and stalled subscriber.
type sideClients struct {
	topic    string
	pub      *client.Client
	stalled  *client.Subscription // nil in the pass without it
	admitted atomic.Uint64
	refused  atomic.Uint64
}

// connectSide declares the side topic, connects the side publisher and,
// when asked, subscribes the stalled subscriber before any publication.
func (s *schedule) connectSide(ctx context.Context, dial func(string) (*client.Client, error)) error {
	sc := &sideClients{topic: fmt.Sprintf("perf.side.s%d", s.env.index)}
	var err error
	if sc.pub, err = dial("side-publisher"); err != nil {
		return err
	}
	if _, err := sc.pub.DeclareTopic(ctx, sc.topic, wire.RetainNone); err != nil {
		return fmt.Errorf("declare %s: %w", sc.topic, err)
	}
	if s.env.side.stalled {
		c, err := dial("stalled")
		if err != nil {
			return err
		}
		// Never read: its messages stay in its inbox, its credit stays taken.
		if sc.stalled, err = c.Subscribe(ctx, sc.topic, client.Bounded(), client.Queued(stalledQueued), client.InFlight(stalledInFlight)); err != nil {
			return fmt.Errorf("subscribe the stalled subscriber: %w", err)
		}
	}
	s.side = sc
	return nil
}

// startSide starts the side publisher, one small publication per frame
// slot; the returned stop ends it, records its counts and unsubscribes the
// stalled subscriber so that the drain finds nothing queued. Without side
// traffic both do nothing.
func (s *schedule) startSide(ctx context.Context) (stop func()) {
	sc := s.side
	if sc == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tk := time.NewTicker(framePeriod)
		defer tk.Stop()
		payload := wire.RawJSON(`{"side":true}`)
		for {
			select {
			case <-tk.C:
			case <-done:
				return
			case <-ctx.Done():
				return
			}
			_, err := sc.pub.Publish(ctx, sc.topic, payload)
			switch {
			case err == nil:
				sc.admitted.Add(1)
			case errors.Is(err, wire.ErrBackpressure):
				sc.refused.Add(1) // the stalled subscriber's queue is full: expected
			case ctx.Err() == nil:
				s.errs.Add("side publisher", err)
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		side := &SideTraffic{Topic: sc.topic, Admitted: sc.admitted.Load(), Refused: sc.refused.Load()}
		if sc.stalled != nil {
			side.Stalled, side.Queued, side.InFlight = true, stalledQueued, stalledInFlight
			sc.stalled.Close()
		}
		s.out.Side = side
	}
}
