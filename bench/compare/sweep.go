package compare

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flybus/flybus/perf"
	"github.com/nats-io/nats.go"
)

// The NATS side of `flybus perf --sweep`: one point per run of
// `compare sweep-point --point JSON`, its perf.PointResult printed as JSON.

// sweepDrainTimeout bounds the wait for the consumers after the sending.
const sweepDrainTimeout = 15 * time.Second

func runSweepPoint(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("sweep-point", flag.ContinueOnError)
	spec := fs.String("point", "", "the point, a perf.SweepPoint as `JSON`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var p perf.SweepPoint
	if err := json.Unmarshal([]byte(*spec), &p); err != nil {
		return fmt.Errorf("--point: %w", err)
	}
	if err := p.Validate(); err != nil {
		return err
	}
	r, err := RunNATSPoint(ctx, p)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(r)
}

// sweepLimits are the server's max_payload and max_pending and the
// subscribers' pending byte limit for a point: the defaults, raised so
// that a 4K frame fits and a few of them can wait (a connection past
// max_pending is cut off as a slow consumer; a subscriber past its
// pending limit drops, which the sweep counts).
func sweepLimits(p perf.SweepPoint) (payload int32, pending int64, subBytes int) {
	payload, pending, subBytes = natsMaxPayload, natsMaxPending, nats.DefaultSubPendingBytesLimit
	if p.Kind == perf.PointFrames {
		payload = max(payload, int32(p.FrameBytes+64<<10))
		pending = max(pending, 4*int64(p.FrameBytes))
		subBytes = max(subBytes, 4*p.FrameBytes)
	}
	return payload, pending, subBytes
}

// natsPoint is one point's server, connections and errors.
type natsPoint struct {
	p     perf.SweepPoint
	child *natsChild
	conns []*nats.Conn
	errs  perf.ErrorLog
}

// RunNATSPoint measures one sweep point through an embedded NATS server in
// a child process; the clients are nats.go connections of this process.
func RunNATSPoint(ctx context.Context, p perf.SweepPoint) (*perf.PointResult, error) {
	payload, pending, _ := sweepLimits(p)
	child, err := startNATSChildWith(payload, pending)
	if err != nil {
		return nil, err
	}
	n := &natsPoint{p: p, child: child}
	r := &perf.PointResult{Peer: "nats", Mover: "nats-server child process"}
	defer func() {
		for _, nc := range n.conns {
			nc.Close()
		}
		if err := child.stop(); err != nil {
			n.errs.Add("nats server child", err)
		}
		r.ErrorCount, r.Errors = n.errs.Summary()
	}()
	switch p.Kind {
	case perf.PointFrames:
		err = n.frames(ctx, r)
	case perf.PointPubSub:
		err = n.pubsub(ctx, r)
	case perf.PointRPC:
		err = n.rpc(ctx, r)
	default:
		err = fmt.Errorf("unknown point kind %q", p.Kind)
	}
	if err != nil {
		n.errs.Add("setup", err)
	}
	return r, nil
}

func (n *natsPoint) connect(name string) (*nats.Conn, error) {
	nc, err := nats.Connect(n.child.url, nats.Name(name), nats.MaxReconnects(0),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if !errors.Is(err, nats.ErrSlowConsumer) { // counted as dropped
				n.errs.Add(name, err)
			}
		}))
	if err == nil {
		n.conns = append(n.conns, nc)
	}
	return nc, err
}

// meterCPU reads the server's and this process's CPU at the start of the
// measured interval; the returned function closes it into r.
func (n *natsPoint) meterCPU(r *perf.PointResult) func() {
	c0, err0 := perf.ProcessCPU(n.child.pid)
	k0, kerr0 := perf.SelfCPU()
	start := time.Now()
	return func() {
		c1, err1 := perf.ProcessCPU(n.child.pid)
		k1, kerr1 := perf.SelfCPU()
		r.WallNs = time.Since(start)
		if err := errors.Join(err0, err1, kerr0, kerr1); err != nil {
			r.CPUErr = err.Error()
			return
		}
		r.MoverCPU, r.ClientCPU = (c1 - c0).Seconds(), (k1 - k0).Seconds()
	}
}

// frames publishes the point's frames at its rate to its subscribers, each
// of which touches every line of every frame it gets.
func (n *natsPoint) frames(ctx context.Context, r *perf.PointResult) error {
	p := n.p
	_, _, subBytes := sweepLimits(p)
	const subject = "sweep.frames"
	prod, err := n.connect("producer")
	if err != nil {
		return err
	}
	delivery := &perf.Hist{}
	cons := make([]*natsConsumer, p.Consumers)
	for i := range cons {
		c := &natsConsumer{}
		if c.nc, err = n.connect(fmt.Sprintf("consumer%d", i+1)); err != nil {
			return err
		}
		c.sub, err = c.nc.Subscribe(subject, func(m *nats.Msg) {
			if len(m.Data) != p.FrameBytes {
				n.errs.Add("consumer", fmt.Errorf("message of %d bytes, want %d", len(m.Data), p.FrameBytes))
				return
			}
			sum := m.Data[0]
			first := time.Now()
			seq := int64(binary.LittleEndian.Uint64(m.Data[0:]))
			sent := int64(binary.LittleEndian.Uint64(m.Data[8:]))
			delivery.Add(time.Duration(first.UnixNano() - sent))
			sum += perf.Touch(m.Data[TouchStride:])
			sinkByte.Add(uint32(sum))
			c.seen.Add(1)
			if seq > c.lastSeq.Load() {
				c.lastSeq.Store(seq)
			}
			c.lastDone.Store(time.Now().UnixNano())
		})
		if err != nil {
			return err
		}
		if err := c.sub.SetPendingLimits(nats.DefaultSubPendingMsgsLimit, subBytes); err != nil {
			return err
		}
		if err := c.nc.Flush(); err != nil {
			return err
		}
		cons[i] = c
	}

	r.Planned = max(1, int(p.Seconds*float64(p.RateHz)+0.5))
	frame := perf.PatternOf(p.FrameBytes)
	period := time.Second / time.Duration(p.RateHz)
	done := n.meterCPU(r)
	tk := time.NewTicker(period)
	start := time.Now()
	last := 0
	for seq := 1; seq <= r.Planned; seq++ {
		var tick time.Time
		select {
		case tick = <-tk.C:
		case <-ctx.Done():
			n.errs.Add("producer", ctx.Err())
		}
		if ctx.Err() != nil {
			break
		}
		binary.LittleEndian.PutUint64(frame[0:], uint64(seq))
		binary.LittleEndian.PutUint64(frame[8:], uint64(time.Now().UnixNano()))
		if err := prod.Publish(subject, frame); err != nil {
			n.errs.Add("publish", err)
		} else {
			r.Sent++
			last = seq
		}
		if over := time.Since(tick) - period; over > 0 {
			r.Late++
			r.MaxOverrunNs = max(r.MaxOverrunNs, over)
		}
	}
	tk.Stop()
	if err := prod.Flush(); err != nil {
		n.errs.Add("flush", err)
	}
	r.SendNs = time.Since(start)
	if !drainNATS(ctx, cons, int64(last)) {
		n.errs.Add("drain", errors.New("consumers did not drain within the timeout"))
	}
	done()
	r.Latency = perf.LatencyOf(delivery)
	for _, c := range cons {
		r.Deliveries += uint64(c.seen.Load())
	}
	// Whatever a subscriber was sent and never handled was dropped: by
	// nats.go past its pending limits, or by the server cutting it off.
	if owed := uint64(r.Sent) * uint64(p.Consumers); owed > r.Deliveries {
		r.Dropped = owed - r.Deliveries
	}
	return nil
}

// smallTime reads the send time out of a small payload.
func smallTime(data []byte) (int64, error) {
	var m struct {
		T int64 `json:"t"`
	}
	err := json.Unmarshal(data, &m)
	return m.T, err
}

// pubsub runs the point's publishers, each publishing and flushing (a
// PING/PONG: the publish is known to have reached the server, as a
// flybus publish's reply says) as fast as it can, to one subscriber.
func (n *natsPoint) pubsub(ctx context.Context, r *perf.PointResult) error {
	p := n.p
	const subject = "sweep.small"
	sc, err := n.connect("subscriber")
	if err != nil {
		return err
	}
	delivery, rtt := &perf.Hist{}, &perf.Hist{}
	var received atomic.Uint64
	if _, err := sc.Subscribe(subject, func(m *nats.Msg) {
		if t, err := smallTime(m.Data); err != nil {
			n.errs.Add("subscriber payload", err)
		} else {
			delivery.Add(time.Duration(time.Now().UnixNano() - t))
		}
		received.Add(1)
	}); err != nil {
		return err
	}
	if err := sc.Flush(); err != nil {
		return err
	}
	pubs := make([]*nats.Conn, p.Senders)
	for i := range pubs {
		if pubs[i], err = n.connect(fmt.Sprintf("publisher%d", i+1)); err != nil {
			return err
		}
	}
	var sent atomic.Uint64
	done := n.meterCPU(r)
	start := time.Now()
	until := start.Add(time.Duration(p.Seconds * float64(time.Second)))
	var wg sync.WaitGroup
	for _, pc := range pubs {
		wg.Go(func() {
			buf := make([]byte, 0, p.PayloadBytes)
			for time.Now().Before(until) && ctx.Err() == nil {
				buf = perf.SmallPayload(buf, time.Now().UnixNano(), p.PayloadBytes)
				t0 := time.Now()
				if err := pc.Publish(subject, buf); err != nil {
					n.errs.Add("publish", err)
					return
				}
				if err := pc.Flush(); err != nil {
					n.errs.Add("flush", err)
					return
				}
				rtt.Add(time.Since(t0))
				sent.Add(1)
			}
		})
	}
	wg.Wait()
	r.SendNs = time.Since(start)
	deadline := time.Now().Add(sweepDrainTimeout)
	for received.Load() < sent.Load() && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(250 * time.Microsecond)
	}
	done()
	r.Sent, r.Deliveries = int(sent.Load()), received.Load()
	if uint64(r.Sent) > r.Deliveries {
		r.Dropped = uint64(r.Sent) - r.Deliveries
	}
	r.Latency, r.RoundTrip = perf.LatencyOf(delivery), perf.LatencyOf(rtt)
	return nil
}

// rpc runs the point's callers, each sending a request as soon as the last
// one was answered, to one echoing responder.
func (n *natsPoint) rpc(ctx context.Context, r *perf.PointResult) error {
	p := n.p
	const subject = "sweep.rpc"
	svc, err := n.connect("service")
	if err != nil {
		return err
	}
	if _, err := svc.Subscribe(subject, func(m *nats.Msg) {
		if err := m.Respond(m.Data); err != nil {
			n.errs.Add("reply", err)
		}
	}); err != nil {
		return err
	}
	if err := svc.Flush(); err != nil {
		return err
	}
	callers := make([]*nats.Conn, p.Senders)
	for i := range callers {
		if callers[i], err = n.connect(fmt.Sprintf("caller%d", i+1)); err != nil {
			return err
		}
	}
	rtt := &perf.Hist{}
	var calls atomic.Uint64
	done := n.meterCPU(r)
	start := time.Now()
	until := start.Add(time.Duration(p.Seconds * float64(time.Second)))
	var wg sync.WaitGroup
	for _, cc := range callers {
		wg.Go(func() {
			buf := make([]byte, 0, p.PayloadBytes)
			for time.Now().Before(until) && ctx.Err() == nil {
				buf = perf.SmallPayload(buf, time.Now().UnixNano(), p.PayloadBytes)
				t0 := time.Now()
				if _, err := cc.Request(subject, buf, 10*time.Second); err != nil {
					n.errs.Add("request", err)
					return
				}
				rtt.Add(time.Since(t0))
				calls.Add(1)
			}
		})
	}
	wg.Wait()
	r.SendNs = time.Since(start)
	done()
	r.Sent, r.Deliveries = int(calls.Load()), calls.Load()
	r.Latency = perf.LatencyOf(rtt)
	return nil
}
