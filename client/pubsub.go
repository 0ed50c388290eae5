package client

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/flybus/flybus/wire"
)

// TopicInfo answers DeclareTopic.
type TopicInfo struct {
	Declared    bool // false: it already existed with the same settings
	Incarnation wire.TopicInc
}

func (c *conn) DeclareTopic(ctx context.Context, name string, retained wire.Retention) (TopicInfo, error) {
	// On an error the reply value is not read: a late reply may still be
	// decoding into it.
	var ok wire.DeclareOK
	if err := c.do(ctx, request{op: wire.OpTopicDeclare, body: &wire.Declare{Name: name, Retained: retained}, reply: &ok}); err != nil {
		return TopicInfo{}, err
	}
	return TopicInfo{Declared: ok.Declared, Incarnation: ok.TopicIncarnation}, nil
}

func (c *conn) ClearTopic(ctx context.Context, name string) (bool, error) {
	var ok wire.Cleared
	if err := c.do(ctx, request{op: wire.OpTopicClear, body: &wire.TopicName{Name: name}, reply: &ok}); err != nil {
		return false, err
	}
	return ok.Cleared, nil
}

func (c *conn) DeleteTopic(ctx context.Context, name string) (bool, error) {
	var ok wire.Deleted
	if err := c.do(ctx, request{op: wire.OpTopicDelete, body: &wire.TopicName{Name: name}, reply: &ok}); err != nil {
		return false, err
	}
	return ok.Deleted, nil
}

// PublishReceipt answers Publish: what admission did, not what consumers
// have processed.
type PublishReceipt struct {
	TopicSequence uint64
	Subscribers   uint64
	Replaced      uint64
}

func (c *conn) Publish(ctx context.Context, topic string, payload any, atts ...Attachment) (PublishReceipt, error) {
	raw, err := encodePayload(payload)
	if err != nil {
		return PublishReceipt{}, err
	}
	var ok wire.PublishOK
	_, err = sendAttached(c, atts, func(watts []wire.Attachment, undo func()) (struct{}, error) {
		return struct{}{}, c.do(ctx, request{op: wire.OpPublish, body: &wire.Publish{Topic: topic, Payload: raw}, atts: watts, reply: &ok, orphan: func(error) { undo() }})
	})
	if err != nil {
		return PublishReceipt{}, err
	}
	return PublishReceipt{TopicSequence: ok.TopicSequence, Subscribers: ok.Subscribers, Replaced: ok.Replaced}, nil
}

// Subscription receives one topic's messages.
type Subscription struct {
	cur   atomic.Pointer[conn] // the connection it is a subscription of
	owner *Client              // a Dial client that subscribes it again after a loss, or nil
	topic string
	opts  subscribeOpts

	mu          sync.Mutex // guards id through pubChanged, which change when it moves
	id          wire.SubID
	incarnation wire.TopicInc // 0 while it awaits its topic
	publishers  int           // live publishers of the topic; -1 until the router says
	pubChanged  chan struct{} // closed when publishers changes

	in     inbox[*Message]
	cr     credits // held by the program, for Config.HeldCreditsWarnAfter
	closed atomic.Bool
}

func (c *conn) Subscribe(ctx context.Context, topic string, opts ...SubscribeOption) (*Subscription, error) {
	s := &Subscription{topic: topic, opts: subscribeOptions(opts), in: newInbox[*Message](), publishers: -1, pubChanged: make(chan struct{})}
	s.cur.Store(c)
	if c.stall.after > 0 {
		s.cr.limit = s.opts.inFlight
	}
	if err := c.subscribe(ctx, s, s.opts.await); err != nil {
		return nil, err
	}
	return s, nil
}

// subscribe makes s a subscription of c: at Subscribe, and for a Dial
// client again on each connection after a loss. With await it waits for
// a topic not declared yet.
func (c *conn) subscribe(ctx context.Context, s *Subscription, await bool) error {
	if await && !c.awaitTopic {
		return wire.NewError(wire.ErrInvalidEnvelope, 0, "the router did not grant extension %s: AwaitTopic needs it", wire.ExtAwaitTopic)
	}
	var ok wire.SubscribeOK
	register := func() {
		s.mu.Lock()
		s.id, s.incarnation = ok.SubscriptionID, ok.TopicIncarnation.V
		s.setPublishersLocked(-1) // the router tells this connection's count next
		s.mu.Unlock()
		s.cur.Store(c)
		c.mu.Lock()
		c.subs[ok.SubscriptionID] = s
		c.mu.Unlock()
	}
	o := s.opts
	body := &wire.Subscribe{Topic: s.topic, Mode: o.mode, MaxQueued: uint32(o.queued), MaxInFlight: uint32(o.inFlight), ReplayLatest: o.replay}
	if await {
		body.AwaitTopic = wire.Some(true)
	}
	return c.do(ctx, request{op: wire.OpSubscribe, body: body, reply: &ok, orphan: func(err error) {
		if err == nil { // subscribed after the caller gave up: undo it
			dropEntry(&c.mu, &c.subs, ok.SubscriptionID, s)
			c.fireAndForget(wire.OpUnsubscribe, &wire.Unsubscribe{SubscriptionID: ok.SubscriptionID})
		}
	}, then: register})
}

func (s *Subscription) conn() *conn { return s.cur.Load() }

// sub is the subscription with id, or nil.
func (c *conn) sub(id wire.SubID) *Subscription {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.subs[id]
}

// ID, Topic and TopicIncarnation identify the subscription. A Dial
// client's subscription gets a new ID and incarnation on each connection.
func (s *Subscription) ID() wire.SubID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

func (s *Subscription) Topic() string { return s.topic }

func (s *Subscription) TopicIncarnation() wire.TopicInc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.incarnation
}

// Publishers is how many live connections publish on the topic (those
// that have published on its current incarnation at least once), or -1
// until the router has said, and a channel closed at its next change: a
// consumer can tell a producer that died from one that is slow without
// polling.
func (s *Subscription) Publishers() (int, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.publishers, s.pubChanged
}

func (s *Subscription) setPublishersLocked(n int) {
	if n == s.publishers {
		return
	}
	s.publishers = n
	close(s.pubChanged)
	s.pubChanged = make(chan struct{})
}

// topicChanged records the router's notice that the awaited topic was
// declared (inc) or deleted (zero).
func (s *Subscription) topicChanged(inc wire.TopicInc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.incarnation = inc
}

// TryNext returns a message already received, without waiting; nothing
// once the subscription is closed.
func (s *Subscription) TryNext() (*Message, bool) {
	if s.closed.Load() {
		return nil, false
	}
	m, ok := s.in.tryNext()
	if ok {
		s.handOut(m)
	}
	return m, ok
}

// Next waits for the next message. Close every message: that consumes its
// delivery and returns the subscription's credit. Once the subscription has
// ended it fails with an error matching ErrSubscriptionClosed (and
// ErrHandleClosed after its own Close).
func (s *Subscription) Next(ctx context.Context) (*Message, error) {
	if s.closed.Load() {
		return nil, closedHandle("subscription", ErrSubscriptionClosed)
	}
	m, err := s.in.next(ctx)
	if err == nil {
		s.handOut(m)
	}
	return m, err
}

// Receive hands each message to handle, in order, and closes it when
// handle returns (artifacts taken from it stay open until their own Close).
// It returns nil once ctx is done or the subscription or its client was
// closed, and an error matching ErrSubscriptionClosed when the router ended
// the subscription (its text gives the router's reason), or ROUTER_LOST.
func (s *Subscription) Receive(ctx context.Context, handle func(ctx context.Context, m *Message)) error {
	return handleEach(ctx, s.Next, handle)
}

func (s *Subscription) ended(reason string) {
	s.closeQueue(&handleError{msg: "flybus: the router closed the subscription to " + s.topic + ": " + reason, kinds: []error{ErrSubscriptionClosed}})
}

// closeQueue stops delivery with err; messages nobody took are consumed.
func (s *Subscription) closeQueue(err error) { s.in.close(err) }

// Close unsubscribes: the router discards the queue. Messages already
// handed out stay valid until closed. Idempotent.
func (s *Subscription) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.owner != nil {
		s.owner.forget(s)
	}
	c, id := s.conn(), s.ID()
	dropEntry(&c.mu, &c.subs, id, s)
	c.fireAndForget(wire.OpUnsubscribe, &wire.Unsubscribe{SubscriptionID: id})
	s.closeQueue(closedHandle("subscription", ErrSubscriptionClosed))
	return nil
}

// Message is one delivered publication. Close it when done.
type Message struct {
	delivery
	Topic            string
	TopicIncarnation wire.TopicInc
	TopicSequence    uint64
	Replaced         uint64 // coalesced since this subscription's previous delivery
	Payload          wire.RawJSON
}

// Decode unmarshals the payload into v.
func (m *Message) Decode(v any) error {
	return m.d.decode(m.Payload, v)
}

func (c *conn) onMessage(w *wire.TopicMessage, arts attachSet) error {
	g := c.deliveryGuard(w.DeliveryID, arts)
	m := &Message{Topic: w.Topic,
		TopicIncarnation: w.TopicIncarnation, TopicSequence: w.TopicSequence, Replaced: w.Replaced,
		Payload: w.Payload.Clone(), delivery: delivery{c: c, d: delivered{what: "message", g: g}, arts: arts}}
	m.d.cleanup = watch(c, m, "Message", g, g.drop)
	c.mu.Lock()
	s := c.subs[w.SubscriptionID]
	c.mu.Unlock()
	if s == nil || !s.in.push(m) {
		m.Close() // unsubscribed: nobody will read it
	}
	return nil
}
