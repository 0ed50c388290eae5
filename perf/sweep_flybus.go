package perf

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/wire"
)

// sweepDrainTimeout bounds the wait after the last send for every
// consumer to finish and the router to collect every frame.
const sweepDrainTimeout = 15 * time.Second

// flybusPoint runs one point against the router host and measures it.
type flybusPoint struct {
	host      routerHost
	sock      string
	storeRoot string
	index     int // the point's number, for unique names
	point     SweepPoint
	errs      ErrorLog
	clients   []*client.Client
	// fill and touch time each frame's write and each consumer's touch
	// (frames points).
	fill, touch *Hist
}

// runFlybusPoint measures p on the router; a setup failure is counted
// in the result's errors.
func runFlybusPoint(ctx context.Context, host routerHost, storeRoot string, index int, p SweepPoint) *PointResult {
	f := &flybusPoint{host: host, sock: host.info().Socket, storeRoot: storeRoot, index: index, point: p}
	r := &PointResult{Peer: "flybus", Mover: host.what()}
	defer func() {
		for _, c := range f.clients {
			c.Close()
		}
		r.ErrorCount, r.Errors = f.errs.Summary()
	}()
	var err error
	switch p.Kind {
	case PointFrames:
		err = f.frames(ctx, r)
	case PointPubSub:
		err = f.pubsub(ctx, r)
	case PointRPC:
		err = f.rpc(ctx, r)
	default:
		err = fmt.Errorf("unknown point kind %q", p.Kind)
	}
	if err != nil {
		f.errs.Add("setup", err)
	}
	return r
}

func (f *flybusPoint) dial(ctx context.Context, role string, cfg client.Config) (*client.Client, error) {
	cfg.ClientID, cfg.StoreRoot = fmt.Sprintf("sweep-p%d-%s", f.index, role), f.storeRoot
	c, err := client.ConnectUnix(ctx, f.sock, cfg)
	if err == nil {
		f.clients = append(f.clients, c)
	}
	return c, err
}

// meterCPU reads the router's and this process's CPU at the start of the
// measured interval; the returned function closes it into r.
func (f *flybusPoint) meterCPU(r *PointResult) func() {
	r0, err0 := f.host.cpu()
	h0, herr0 := SelfCPU()
	start := time.Now()
	return func() {
		r1, err1 := f.host.cpu()
		h1, herr1 := SelfCPU()
		r.WallNs = time.Since(start)
		if err := errors.Join(err0, err1, herr0, herr1); err != nil {
			r.CPUErr = err.Error()
			return
		}
		r.MoverCPU, r.ClientCPU = (r1 - r0).Seconds(), (h1 - h0).Seconds()
	}
}

// meterFaults reads the router's and this process's page faults at the
// start of the measured interval; the returned function closes them into
// r, per frame sent, so it runs once the producer is done.
func (f *flybusPoint) meterFaults(r *PointResult) func() {
	pid := f.host.info().PID
	read := func() (router, harness Faults, err error) {
		router, rerr := ProcessFaults(pid)
		harness, herr := ProcessFaults(os.Getpid())
		return router, harness, errors.Join(rerr, herr)
	}
	r0, h0, err0 := read()
	return func() {
		r1, h1, err1 := read()
		if err := errors.Join(err0, err1); err != nil {
			r.Faults = &PointFaults{Err: err.Error()}
			return
		}
		router, rerr := faultsOver(r0, r1, r.Sent)
		harness, herr := faultsOver(h0, h1, r.Sent)
		if err := errors.Join(rerr, herr); err != nil {
			r.Faults = &PointFaults{Err: err.Error()}
			return
		}
		r.Faults = &PointFaults{Router: router, Harness: harness}
	}
}

// sweepConsumer is one latest-mode subscriber of a frames point.
type sweepConsumer struct {
	sub       *client.Subscription
	seen      atomic.Uint64
	coalesced atomic.Uint64
	maxSeq    atomic.Int64
}

// frames runs the producer at the point's rate to its consumers.
func (f *flybusPoint) frames(ctx context.Context, r *PointResult) error {
	p := f.point
	setup, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	prod, err := f.dial(setup, "producer", client.Config{AllocateAhead: 1})
	if err != nil {
		return err
	}
	topic := fmt.Sprintf("perf.sweep.p%d", f.index)
	if _, err := prod.DeclareTopic(setup, topic, wire.RetainNone); err != nil {
		return fmt.Errorf("declare %s: %w", topic, err)
	}
	cons := make([]*sweepConsumer, p.Consumers)
	for i := range cons {
		c, err := f.dial(setup, fmt.Sprintf("consumer%d", i+1), client.Config{OpenAhead: true})
		if err != nil {
			return err
		}
		sub, err := c.Subscribe(setup, topic, client.InFlight(1))
		if err != nil {
			return fmt.Errorf("subscribe: %w", err)
		}
		cons[i] = &sweepConsumer{sub: sub}
	}
	loops, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	delivery := newHist(p.planned() * p.Consumers)
	f.fill, f.touch = newHist(p.planned()), newHist(p.planned()*p.Consumers)
	for _, c := range cons {
		wg.Go(func() { f.consumeFrames(loops, c, delivery) })
	}

	r.Planned = p.planned()
	frame := PatternOf(p.FrameBytes)
	faults := f.meterFaults(r)
	done := f.meterCPU(r)
	last := f.produceFrames(ctx, prod, topic, frame, r)
	deadline := time.Now().Add(sweepDrainTimeout)
	f.awaitConsumers(ctx, cons, last, deadline)
	done()
	faults()
	// Checked after the interval: each look at the router's stats is a
	// /metrics scrape, which costs the router CPU of its own.
	f.awaitCollected(ctx, prod, deadline)
	r.Latency, r.Fill, r.Touch = LatencyOf(delivery), LatencyOf(f.fill), LatencyOf(f.touch)
	for _, c := range cons {
		r.Deliveries += c.seen.Load()
		r.Coalesced += c.coalesced.Load()
	}
	return nil
}

// PatternOf is a frame of n bytes for the sweep's producers: the 60 Hz
// harness's gradient when n is its size, else a byte ramp that is not the
// same on every page. The producer stamps the first 16 bytes.
func PatternOf(n int) []byte {
	if n == FrameBytes {
		return FramePattern()
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i ^ i>>9)
	}
	return b
}

// produceFrames publishes the point's frames on its rate's ticks and
// returns the last sequence number published. As in the 60 Hz harness, a
// frame whose work overruns its slot is late and the ticker drops ticks.
func (f *flybusPoint) produceFrames(ctx context.Context, prod *client.Client, topic string, frame []byte, r *PointResult) int {
	period := time.Second / time.Duration(f.point.RateHz)
	tk := time.NewTicker(period)
	defer tk.Stop()
	start := time.Now()
	defer func() { r.SendNs = time.Since(start) }()
	var payload []byte
	last := 0
	for seq := 1; seq <= r.Planned; seq++ {
		var tick time.Time
		select {
		case tick = <-tk.C:
		case <-ctx.Done():
			f.errs.Add("producer", ctx.Err())
			return last
		}
		if f.frameOnce(ctx, prod, topic, frame, seq, &payload) {
			r.Sent++
			last = seq
		}
		if over := time.Since(tick) - period; over > 0 {
			r.Late++
			r.MaxOverrunNs = max(r.MaxOverrunNs, over)
		}
	}
	return last
}

// frameOnce allocates, fills, seals (without waiting) and publishes one
// frame, then lets go of it.
func (f *flybusPoint) frameOnce(ctx context.Context, prod *client.Client, topic string, frame []byte, seq int, payload *[]byte) bool {
	w, err := prod.Allocate(ctx, int64(len(frame)), "application/octet-stream")
	if err != nil {
		f.errs.Add("allocate", err)
		return false
	}
	binary.LittleEndian.PutUint64(frame, uint64(seq))
	start := time.Now()
	if _, err := w.Write(frame); err != nil {
		f.errs.Add("fill", err)
		w.Close()
		return false
	}
	f.fill.Add(time.Since(start))
	a, err := w.Seal(ctx, client.NoWait())
	if err != nil {
		f.errs.Add("seal", err)
		return false
	}
	defer a.Close()
	b := append((*payload)[:0], `{"seq":`...)
	b = strconv.AppendInt(b, int64(seq), 10)
	b = append(b, `,"t":`...)
	b = strconv.AppendInt(b, time.Now().UnixNano(), 10)
	b = append(b, '}')
	*payload = b
	if _, err := prod.Publish(ctx, topic, wire.RawJSON(b), client.Attach("frame", a)); err != nil {
		f.errs.Add("publish", err)
		return false
	}
	return true
}

// consumeFrames views and touches every frame delivered, recording the
// delivery latency from just before the publish to the first byte read.
func (f *flybusPoint) consumeFrames(ctx context.Context, c *sweepConsumer, delivery *Hist) {
	for {
		m, err := c.sub.Next(ctx)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, client.ErrSubscriptionClosed) && !errors.Is(err, client.ErrClosed) {
				f.errs.Add("consumer", err)
			}
			return
		}
		var in framePayload
		if err := m.Decode(&in); err != nil {
			f.errs.Add("consumer payload", err)
		}
		if err := viewAndTouch(ctx, m, in.T, delivery, f.touch); err != nil {
			f.errs.Add("consumer view", err)
		}
		c.seen.Add(1)
		c.coalesced.Add(m.Replaced)
		if int64(in.Seq) > c.maxSeq.Load() {
			c.maxSeq.Store(int64(in.Seq))
		}
	}
}

// viewAndTouch reads every line of a message's frame and closes it all;
// touch gets the time from having the view to the last line read.
func viewAndTouch(ctx context.Context, m *client.Message, sentNs int64, delivery, touch *Hist) error {
	defer m.Close()
	a, err := m.Artifact("frame")
	if err != nil {
		return err
	}
	defer a.Close()
	v, err := a.View(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	b := v.Bytes()
	sum := b[0]
	first := time.Now()
	sum += Touch(b[min(len(b), TouchStride):])
	end := time.Now()
	// Recorded after the touch, so that it does not wait on the shared
	// histograms' lock.
	delivery.Add(time.Duration(first.UnixNano() - sentNs))
	touch.Add(end.Sub(start))
	sinkByte.Add(uint32(sum))
	return v.Close()
}

// awaitConsumers waits until every consumer has the last frame. A latest
// subscription always gets its newest frame, so every consumer reaches
// last unless something failed.
func (f *flybusPoint) awaitConsumers(ctx context.Context, cons []*sweepConsumer, last int, deadline time.Time) {
	for _, c := range cons {
		for c.maxSeq.Load() < int64(last) {
			if ctx.Err() != nil || time.Now().After(deadline) {
				f.errs.Add("drain", fmt.Errorf("a consumer did not reach frame %d (at %d)", last, c.maxSeq.Load()))
				return
			}
			time.Sleep(drainPoll)
		}
	}
}

// awaitCollected waits until the router holds no artifact but the
// producer's allocation prepared ahead, so that the next point starts
// from a clean store.
func (f *flybusPoint) awaitCollected(ctx context.Context, prod *client.Client, deadline time.Time) {
	prepared := int64(prod.Stats().PreparedWriters)
	for {
		x, err := f.host.stats().sample(ctx)
		if err == nil && int64(x.Artifacts) <= prepared {
			return
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			f.errs.Add("drain", fmt.Errorf("the router still tracks %d artifacts after the last frame (%v)", x.Artifacts, err))
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// smallMessage is the small points' payload: when it was sent, padded to
// the point's size.
type smallMessage struct {
	T int64 `json:"t"`
}

// SmallPayload writes a JSON object of exactly size bytes (at least
// minSmallPayload) holding t into buf: {"t":T,"pad":"xxx..."}.
func SmallPayload(buf []byte, t int64, size int) []byte {
	b := append(buf[:0], `{"t":`...)
	b = strconv.AppendInt(b, t, 10)
	b = append(b, `,"pad":"`...)
	for len(b) < size-2 {
		b = append(b, 'x')
	}
	return append(b, `"}`...)
}

// pubsub runs the point's publishers, each publishing as soon as its last
// publish was answered, to one bounded subscriber.
func (f *flybusPoint) pubsub(ctx context.Context, r *PointResult) error {
	p := f.point
	setup, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	sc, err := f.dial(setup, "subscriber", client.Config{})
	if err != nil {
		return err
	}
	topic := fmt.Sprintf("perf.sweep.small.p%d", f.index)
	if _, err := sc.DeclareTopic(setup, topic, wire.RetainNone); err != nil {
		return fmt.Errorf("declare %s: %w", topic, err)
	}
	sub, err := sc.Subscribe(setup, topic, client.Bounded())
	if err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	pubs := make([]*client.Client, p.Senders)
	for i := range pubs {
		if pubs[i], err = f.dial(setup, fmt.Sprintf("publisher%d", i+1), client.Config{}); err != nil {
			return err
		}
	}
	expect := int(p.Seconds * 200_000) // room for the samples of a fast router
	delivery, rtt := newHist(expect), newHist(expect)
	var received atomic.Uint64
	loops, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	wg.Go(func() {
		for {
			m, err := sub.Next(loops)
			if err != nil {
				if loops.Err() == nil && !errors.Is(err, client.ErrSubscriptionClosed) && !errors.Is(err, client.ErrClosed) {
					f.errs.Add("subscriber", err)
				}
				return
			}
			var in smallMessage
			if err := json.Unmarshal(m.Payload, &in); err != nil {
				f.errs.Add("subscriber payload", err)
			} else {
				delivery.Add(time.Duration(time.Now().UnixNano() - in.T))
			}
			m.Close()
			received.Add(1)
		}
	})

	var sent, refused atomic.Uint64
	done := f.meterCPU(r)
	start := time.Now()
	until := start.Add(time.Duration(p.Seconds * float64(time.Second)))
	var senders sync.WaitGroup
	for _, pc := range pubs {
		senders.Go(func() {
			buf := make([]byte, 0, p.PayloadBytes)
			for time.Now().Before(until) && ctx.Err() == nil {
				buf = SmallPayload(buf, time.Now().UnixNano(), p.PayloadBytes)
				t0 := time.Now()
				_, err := pc.Publish(ctx, topic, wire.RawJSON(buf))
				switch {
				case err == nil:
					rtt.Add(time.Since(t0))
					sent.Add(1)
				case errors.Is(err, wire.ErrBackpressure):
					refused.Add(1) // the subscriber's queue is full: try again
				default:
					if ctx.Err() == nil {
						f.errs.Add("publish", err)
					}
					return
				}
			}
		})
	}
	senders.Wait()
	r.SendNs = time.Since(start)
	deadline := time.Now().Add(sweepDrainTimeout)
	for received.Load() < sent.Load() && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(drainPoll)
	}
	done()
	if got, want := received.Load(), sent.Load(); got < want {
		f.errs.Add("drain", fmt.Errorf("the subscriber received %d of %d messages", got, want))
	}
	r.Sent, r.Deliveries, r.Refused = int(sent.Load()), received.Load(), refused.Load()
	r.Latency, r.RoundTrip = LatencyOf(delivery), LatencyOf(rtt)
	return nil
}

// rpc runs the point's callers, each calling as soon as its last result
// arrived, against one service served by as many goroutines as callers.
func (f *flybusPoint) rpc(ctx context.Context, r *PointResult) error {
	p := f.point
	setup, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	svcClient, err := f.dial(setup, "service", client.Config{})
	if err != nil {
		return err
	}
	name := fmt.Sprintf("perf.sweep.rpc.p%d", f.index)
	svc, err := svcClient.Register(setup, name)
	if err != nil {
		return fmt.Errorf("register %s: %w", name, err)
	}
	callers := make([]*client.Client, p.Senders)
	for i := range callers {
		if callers[i], err = f.dial(setup, fmt.Sprintf("caller%d", i+1), client.Config{}); err != nil {
			return err
		}
	}
	loops, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	// Serve may run in several goroutines, up to the service's in-flight
	// bound: one per caller, so no caller waits for another's handler.
	for range p.Senders {
		wg.Go(func() {
			err := svc.Serve(loops, func(ctx context.Context, req *client.Request) {
				if _, err := req.Reply(ctx, req.Payload); err != nil && ctx.Err() == nil {
					f.errs.Add("reply", err)
				}
			})
			if err != nil && loops.Err() == nil {
				f.errs.Add("serve", err)
			}
		})
	}

	rtt := newHist(int(p.Seconds * 100_000))
	var calls atomic.Uint64
	done := f.meterCPU(r)
	start := time.Now()
	until := start.Add(time.Duration(p.Seconds * float64(time.Second)))
	var senders sync.WaitGroup
	for _, cc := range callers {
		senders.Go(func() {
			buf := make([]byte, 0, p.PayloadBytes)
			for time.Now().Before(until) && ctx.Err() == nil {
				buf = SmallPayload(buf, time.Now().UnixNano(), p.PayloadBytes)
				t0 := time.Now()
				res, err := cc.CallAndWait(ctx, name, "Echo", wire.RawJSON(buf))
				if err != nil {
					if ctx.Err() == nil {
						f.errs.Add("call", err)
					}
					return
				}
				rtt.Add(time.Since(t0))
				res.Close()
				calls.Add(1)
			}
		})
	}
	senders.Wait()
	r.SendNs = time.Since(start)
	done()
	r.Sent = int(calls.Load())
	r.Deliveries = calls.Load()
	r.Latency = LatencyOf(rtt)
	return nil
}
