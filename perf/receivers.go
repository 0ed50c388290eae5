package perf

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/flybus/flybus/client"
)

// consumer is one latest-mode subscriber.
type consumer struct {
	c    *client.Client
	sub  *client.Subscription
	slow bool

	mu        sync.Mutex
	seen      int
	coalesced uint64
	maxSeq    int
	closedAt  time.Time // when the message of maxSeq was closed
}

// agent is one service the producer calls every frame.
type agent struct {
	svc  *client.Service
	name string

	mu       sync.Mutex
	maxSeq   int
	closedAt time.Time
}

// framePayload is the published message's payload; T is the wall clock
// (UnixNano) just before Publish.
type framePayload struct {
	Seq int   `json:"seq"`
	T   int64 `json:"t"`
}

// agentReply is an agent's outcome: its handler time, subtracted from the
// round trip to give the part the bus costs.
type agentReply struct {
	Sum       int   `json:"sum"`
	HandlerNs int64 `json:"handlerNs"`
}

// serve is an agent's loop: take the frame through a view, touch every
// line, reply, let go.
func (s *schedule) serve(ctx context.Context, ag *agent) {
	receive(ctx, s, "agent", ag.svc.Next, client.ErrClosed, func(req *client.Request) {
		t0 := time.Now()
		sum, err := s.touchAttachment(ctx, req.Artifact)
		var in framePayload
		if derr := req.Decode(&in); derr != nil {
			s.errs.Add("agent payload", derr)
		}
		if err != nil {
			s.errs.Add("agent view", err)
		} else {
			s.out.AgentAccess.Add(time.Since(t0))
			reply := agentReply{Sum: int(sum), HandlerNs: int64(time.Since(t0))}
			if _, err := req.Reply(ctx, reply); err != nil && ctx.Err() == nil {
				s.errs.Add("agent reply", err)
			}
		}
		req.Close()
		ag.finished(in.Seq, time.Now())
	})
}

// receive hands each value next returns to handle until next fails. The
// error that ends the loop is counted, under what, unless it is the
// expected end: ctx done, or closed, the handle's own closing.
func receive[T any](ctx context.Context, s *schedule, what string, next func(context.Context) (T, error), closed error, handle func(T)) {
	for {
		v, err := next(ctx)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, closed) {
				s.errs.Add(what, err)
			}
			return
		}
		handle(v)
	}
}

// finished records that the agent let go of frame seq at t.
func (ag *agent) finished(seq int, t time.Time) {
	ag.mu.Lock()
	defer ag.mu.Unlock()
	if seq > ag.maxSeq {
		ag.maxSeq, ag.closedAt = seq, t
	}
}

// touchAttachment views the "frame" attachment, reads every line and
// closes the view and the artifact.
func (s *schedule) touchAttachment(ctx context.Context, extract func(string) (*client.Artifact, error)) (byte, error) {
	a, err := extract("frame")
	if err != nil {
		return 0, err
	}
	defer a.Close()
	v, err := a.View(ctx)
	if err != nil {
		return 0, err
	}
	sum := Touch(v.Bytes())
	return sum, v.Close()
}

// consume is a consumer's loop. Access is timed from the message in hand
// to the view, artifact and message closed, less the slow consumer's
// sleep; delivery from just before Publish to the first byte read.
func (s *schedule) consume(ctx context.Context, c *consumer) {
	receive(ctx, s, "consumer", c.sub.Next, client.ErrSubscriptionClosed, func(m *client.Message) {
		// Decoded first: access closes the message, and a closed handle
		// refuses use.
		var p framePayload
		derr := m.Decode(&p)
		first, touched, ok := s.access(ctx, c, m)
		closed := time.Now()
		if derr != nil {
			s.errs.Add("consumer payload", derr)
		} else if ok {
			if c.slow {
				s.out.DeliverySlow.Add(time.Duration(first.UnixNano() - p.T))
			} else {
				s.out.DeliveryFast.Add(time.Duration(first.UnixNano() - p.T))
				if start, found := s.fills.get(p.Seq); found {
					s.out.FrameLatency.Add(touched.Sub(start))
				}
			}
		}
		c.mu.Lock()
		c.seen++
		c.coalesced += m.Replaced
		if p.Seq > c.maxSeq {
			c.maxSeq, c.closedAt = p.Seq, closed
		}
		c.mu.Unlock()
	})
}

// access reads every line of a message's frame through a view and closes
// the view, the artifact and the message, timing it all but the slow
// consumer's work. It returns when the first byte was read and when the
// last line was.
func (s *schedule) access(ctx context.Context, c *consumer, m *client.Message) (first, touched time.Time, ok bool) {
	defer m.Close()
	t0 := time.Now()
	a, err := m.Artifact("frame")
	if err != nil {
		s.errs.Add("consumer artifact", err)
		return first, touched, false
	}
	defer a.Close()
	tv := time.Now()
	v, err := a.View(ctx)
	viewed := time.Since(tv)
	if err != nil {
		s.errs.Add("consumer view", err)
		return first, touched, false
	}
	b := v.Bytes()
	sum := b[0]
	first = time.Now()
	sum += Touch(b[TouchStride:])
	touched = time.Now()
	if c.slow {
		time.Sleep(SlowConsumerDelay) // the slow consumer's work on the frame
	}
	t2 := time.Now()
	verr := v.Close()
	a.Close()
	m.Close()
	closed := time.Now()
	sinkByte.Add(uint32(sum))
	if verr != nil {
		s.errs.Add("consumer view close", verr)
		return first, touched, false
	}
	s.out.Access.Add(touched.Sub(t0) + closed.Sub(t2))
	s.out.View.Add(viewed)
	return first, touched, true
}
