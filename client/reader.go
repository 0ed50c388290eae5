package client

import (
	"errors"
	"fmt"

	"github.com/flybus/flybus/internal/rawio"
	"github.com/flybus/flybus/wire"
)

// readLoop decodes router frames and dispatches them without ever waiting
// on user code: replies complete waiters, deliveries go onto per-handle
// queues, notices settle calls. Any violation of the router's side of the
// protocol closes the connection.
func (c *conn) readLoop() {
	defer c.wg.Done()
	fr := wire.NewFrameReader(rawio.NewReader(c.nc))
	var dec wire.Decoder
	var env wire.Envelope
	for {
		frame, err := fr.ReadFrame()
		if err != nil {
			c.mu.Lock()
			if c.writeErr != nil {
				err = c.writeErr // the write failed first; the read only drained
			}
			c.mu.Unlock()
			c.fail(err)
			return
		}
		derr := dec.Decode(frame, &env)
		if derr == nil {
			derr = c.dispatch(&env)
		}
		dec.Trim() // an idle connection must not pin a large frame's tape
		if derr != nil {
			c.fail(fmt.Errorf("the client refused a frame from the router: %w", derr))
			return
		}
	}
}

func (c *conn) dispatch(env *wire.Envelope) error {
	// A router writes the minor its hello reply selected, and the oldest
	// minor before that (a full router's refusal).
	if env.Major != wire.Major || env.Minor < wire.OldestMinor || env.Minor > wire.Minor {
		return fmt.Errorf("router envelope is version %d.%d; this client speaks %d.%d to %d.%d",
			env.Major, env.Minor, wire.Major, wire.OldestMinor, wire.Major, wire.Minor)
	}
	c.mu.Lock()
	if c.minor.Valid && env.Minor != c.minor.V {
		c.mu.Unlock()
		return fmt.Errorf("router envelope is version %d.%d after a hello answered in %d.%d", env.Major, env.Minor, wire.Major, c.minor.V)
	}
	if env.Kind == wire.KindReply && env.Op == wire.OpHello {
		c.minor = wire.Some(env.Minor) // the connection's minor from here on, both ways
	}
	if c.anyBus && env.ID <= c.lastBus {
		c.mu.Unlock()
		return errors.New("router envelope ids must increase")
	}
	c.anyBus, c.lastBus = true, env.ID
	c.mu.Unlock()
	switch env.Kind {
	case wire.KindReply:
		if len(env.Attachments) > 0 {
			return errors.New("reply with attachments")
		}
		return c.onReply(env)
	case wire.KindDelivery:
		if !env.Op.IsDelivery() {
			return fmt.Errorf("delivery with op %s", env.Op)
		}
		return c.onDelivery(env)
	case wire.KindNotice:
		if !env.Op.IsNotice() || len(env.Attachments) > 0 {
			return fmt.Errorf("notice with op %s", env.Op)
		}
		return c.onNotice(env)
	}
	return errors.New("router sent a command")
}

func (c *conn) onReply(env *wire.Envelope) error {
	c.mu.Lock()
	w := c.waiters[uint64(env.ReplyTo.V)]
	delete(c.waiters, uint64(env.ReplyTo.V))
	drained := c.closing && len(c.waiters) == 0
	c.mu.Unlock()
	if drained {
		c.wakeWriter() // Close waits for the last reply
	}
	if w == nil {
		if env.Op == wire.OpDeliveryConsumed && c.quietConsume {
			// Only a refusal answers a quiet consume: the SDK consumed a
			// delivery the router never issued, a bug worth the connection.
			busErr, err := env.DecodeReply(c.discardFor(env.Op))
			if busErr != nil {
				err = busErr
			}
			return fmt.Errorf("the router refused a consume: %v", err)
		}
		return fmt.Errorf("reply to unknown command msg-%d", env.ReplyTo.V)
	}
	// The waiter has left the table, so a violation from here on must
	// settle it here: the connection's failure will not find it.
	bad := func(err error) error {
		w.settle(lostError(err))
		return err
	}
	if w.op != env.Op {
		return bad(fmt.Errorf("reply op %s answers a %s", env.Op, w.op))
	}
	v := w.v
	if v == nil {
		v = c.discardFor(env.Op)
	}
	busErr, err := env.DecodeReply(v)
	if err != nil {
		return bad(err)
	}
	var result error
	if busErr != nil {
		result = busErr
	} else if w.then != nil {
		w.then()
	}
	if w.complete != nil {
		w.complete(result)
		return nil
	}
	// Hand the result over, or to the orphan handler if the caller gave
	// up, deciding under the lock the caller marks abandonment with: a
	// grant is never both unseen and unreleased.
	c.mu.Lock()
	orphaned := w.orphaned
	if !orphaned && w.ch != nil {
		w.ch <- result // buffered: never blocks
	}
	c.mu.Unlock()
	if orphaned && w.orphan != nil {
		w.orphan(result)
	}
	if w.ch == nil && result != nil { // fire-and-forget: count refusals
		c.controlErrors.Add(1)
	}
	return nil
}

// discardFor returns a reader-owned decode target for replies nobody waits
// for, so they are still checked strictly without allocating.
func (c *conn) discardFor(op wire.Op) wire.Body {
	if v := c.discards[op]; v != nil {
		return v
	}
	if c.discards == nil {
		c.discards = map[wire.Op]wire.Body{}
	}
	for _, s := range wire.Shapes() {
		if s.Op == op {
			c.discards[op] = s.Reply
			return s.Reply
		}
	}
	return &wire.Released{}
}

func (c *conn) onDelivery(env *wire.Envelope) error {
	switch env.Op {
	case wire.OpRPCRequest:
		return deliver(env, func(r *wire.Request) wire.DeliveryID { return r.DeliveryID }, c.onRequest)
	case wire.OpRPCResult:
		return deliver(env, func(r *wire.Result) wire.DeliveryID { return r.DeliveryID }, c.onResult)
	case wire.OpTopicMessage:
		return deliver(env, func(m *wire.TopicMessage) wire.DeliveryID { return m.DeliveryID }, c.onMessage)
	}
	return fmt.Errorf("%s is not supported by this client yet", env.Op)
}

// deliver decodes a delivery's body, checks its attachments against the
// delivery id it carries (id reads it) and hands both to on.
func deliver[T any, P interface {
	*T
	wire.Body
}](env *wire.Envelope, id func(P) wire.DeliveryID, on func(P, attachSet) error) error {
	b := P(new(T))
	if err := env.DecodeBody(b); err != nil {
		return err
	}
	arts, err := deliveryArtifacts(id(b), env.Attachments)
	if err != nil {
		return err
	}
	return on(b, arts)
}

func (c *conn) onNotice(env *wire.Envelope) error {
	switch env.Op {
	case wire.OpCallFailed:
		var n wire.CallFailed
		if err := env.DecodeBody(&n); err != nil {
			return err
		}
		if p := takeEntry(&c.mu, &c.calls, n.CallID); p != nil {
			p.finish(nil, n.Err())
		}
	case wire.OpRouteRemoved:
		var n wire.RouteRemoved
		if err := env.DecodeBody(&n); err != nil {
			return err
		}
	case wire.OpSubscriptionClosed:
		var n wire.SubscriptionClosed
		if err := env.DecodeBody(&n); err != nil {
			return err
		}
		if c.reconnects && n.Reason == routerShutdown {
			break // the connection ends next; the subscription moves to the next one
		}
		if s := takeEntry(&c.mu, &c.subs, n.SubscriptionID); s != nil {
			s.ended(n.Reason)
		}
	case wire.OpSubscriptionTopic:
		var n wire.SubscriptionTopic
		if err := env.DecodeBody(&n); err != nil {
			return err
		}
		if s := c.sub(n.SubscriptionID); s != nil {
			s.topicChanged(n.TopicIncarnation.V)
		}
	case wire.OpSubscriptionPublishers:
		var n wire.SubscriptionPublishers
		if err := env.DecodeBody(&n); err != nil {
			return err
		}
		if s := c.sub(n.SubscriptionID); s != nil {
			s.mu.Lock()
			s.setPublishersLocked(int(n.Publishers))
			s.mu.Unlock()
		}
	case wire.OpConnectionClosing:
		var n wire.ConnectionClosing
		if err := env.DecodeBody(&n); err != nil {
			return err
		}
		msg := "the router closed the connection"
		if n.Code != wire.ErrRouterLost {
			msg += " with " + n.Code.String()
		}
		if n.Message != "" {
			msg += ": " + n.Message
		}
		c.mu.Lock()
		c.closedWith = n.Code
		c.mu.Unlock()
		c.fail(&wire.BusError{Code: wire.ErrRouterLost, Dispatch: wire.DispatchUnknown, Message: msg})
	}
	return nil
}
