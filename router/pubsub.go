package router

import (
	"github.com/flybus/flybus/wire"
)

// topic is one declared topic. Different topics have no total order; within
// a topic, topicSequence is the router's acceptance order.
type topic struct {
	name     string
	inc      wire.TopicInc
	retained wire.Retention
	seq      uint64
	subs     []*subscription // creation order
	latest   *topicMsg       // the retained value, when retained is latest
	pubs     uint64          // publications accepted (Details)
}

// topicMsg is one accepted publication, shared by every queue entry and
// delivery made from it. It is immutable after admission.
type topicMsg struct {
	topic   string
	inc     wire.TopicInc
	seq     uint64
	payload []byte
	atts    []wire.Attachment
	arts    []*artifact // distinct; each queue entry, delivery and retention roots them once
	size    int         // its topic.message delivery at the longest ids, for byte budgets
	at      int64       // when it was admitted (input.now), for queue ages
}

// subscription is one subscriber's queue and credits.
type subscription struct {
	id          wire.SubID
	conn        *conn
	topic       *topic
	mode        wire.Mode
	maxQueued   int
	maxInFlight int
	queue       []*topicMsg // bounded: FIFO; latest: at most one
	inflight    int         // delivered and not yet consumed
	replaced    uint64      // coalesced since the previous delivery
	closed      bool
	// For Details: messages delivered, replaced before delivery, and
	// publications refused BACKPRESSURE because of this subscription.
	delivered, coalesced, refusedPubs uint64
}

func (k *core) opDeclare(c *conn, env *wire.Envelope, b *wire.Declare) *wire.BusError {
	if err := denied(c.grants.ManageTopics, "manageTopics", b.Name); err != nil {
		return err
	}
	if t := k.topics[b.Name]; t != nil {
		if t.retained != b.Retained {
			return wire.NewError(wire.ErrConflict, 0, "topic %s is declared with retained %s", b.Name, t.retained)
		}
		k.reply(c, env, &wire.DeclareOK{Declared: false, TopicIncarnation: t.inc})
		return nil
	}
	if len(k.topics) >= k.limits.MaxTopics {
		return wire.NewError(wire.ErrQuotaExceeded, 0, "maxTopics topics are declared")
	}
	k.nextTop++
	t := &topic{name: b.Name, inc: wire.TopicInc(k.nextTop), retained: b.Retained}
	k.topics[b.Name] = t
	k.reply(c, env, &wire.DeclareOK{Declared: true, TopicIncarnation: t.inc})
	return nil
}

// grantedTopic finds the topic a command names, after checking the grant
// that lets c use it (NOT_AUTHORIZED, then NO_TOPIC).
func (k *core) grantedTopic(patterns []Pattern, grant, name string) (*topic, *wire.BusError) {
	if err := denied(patterns, grant, name); err != nil {
		return nil, err
	}
	t := k.topics[name]
	if t == nil {
		return nil, wire.NewError(wire.ErrNoTopic, 0, "no topic %s", name)
	}
	return t, nil
}

func (k *core) opClear(c *conn, env *wire.Envelope, b *wire.TopicName) *wire.BusError {
	t, err := k.grantedTopic(c.grants.ManageTopics, "manageTopics", b.Name)
	if err != nil {
		return err
	}
	cleared := t.latest != nil
	k.setRetained(t, nil)
	k.reply(c, env, &wire.Cleared{Cleared: cleared})
	return nil
}

func (k *core) opDelete(c *conn, env *wire.Envelope, b *wire.TopicName) *wire.BusError {
	if err := denied(c.grants.ManageTopics, "manageTopics", b.Name); err != nil {
		return err
	}
	name := b.Name
	t := k.topics[name]
	if t == nil {
		k.reply(c, env, &wire.Deleted{Deleted: false})
		return nil
	}
	if len(t.subs) > 0 {
		return wire.NewError(wire.ErrConflict, 0, "topic %s has %d subscribers", name, len(t.subs))
	}
	k.setRetained(t, nil)
	delete(k.topics, name)
	k.reply(c, env, &wire.Deleted{Deleted: true})
	return nil
}

// setRetained replaces a topic's retained value, keeping the retained-byte
// account (artifact bytes pinned by retained values, once per topic).
func (k *core) setRetained(t *topic, m *topicMsg) {
	old := t.latest
	t.latest = m
	if m != nil {
		k.retainedBytes += artifactBytes(m.arts)
		k.addRoots(m.arts)
	}
	if old != nil {
		k.retainedBytes -= artifactBytes(old.arts)
		k.dropRoots(old.arts)
	}
}

// artifactBytes counts each distinct artifact once.
func artifactBytes(arts []*artifact) uint64 {
	var n uint64
	for _, a := range arts {
		n += a.size
	}
	return n
}

func (k *core) opSubscribe(c *conn, env *wire.Envelope, b *wire.Subscribe) *wire.BusError {
	t, err := k.grantedTopic(c.grants.Subscribe, "subscribe", b.Topic)
	if err != nil {
		return err
	}
	switch b.Mode {
	case wire.ModeLatest:
		if b.MaxQueued != 1 {
			return wire.NewError(wire.ErrInvalidEnvelope, 0, "a latest subscription queues exactly 1")
		}
		if int(b.MaxInFlight) > k.limits.MaxLatestInFlight {
			return wire.NewError(wire.ErrInvalidEnvelope, 0, "maxInFlight exceeds maxLatestInFlight (%d)", k.limits.MaxLatestInFlight)
		}
	case wire.ModeBounded:
		if int(b.MaxQueued) > k.limits.MaxBoundedQueued || int(b.MaxInFlight) > k.limits.MaxBoundedInFlight {
			return wire.NewError(wire.ErrInvalidEnvelope, 0, "maxQueued/maxInFlight exceed the router's limits (%d/%d)",
				k.limits.MaxBoundedQueued, k.limits.MaxBoundedInFlight)
		}
	}
	if len(c.subs) >= k.limits.MaxSubscriptionsPerClient {
		return wire.NewError(wire.ErrQuotaExceeded, 0, "maxSubscriptionsPerClient subscriptions exist")
	}
	if k.subCount >= k.limits.MaxSubscriptions {
		return wire.NewError(wire.ErrQuotaExceeded, 0, "maxSubscriptions subscriptions exist")
	}
	replay := b.ReplayLatest && t.latest != nil
	if replay && b.Mode == wire.ModeBounded && uint64(c.queuedBytes+t.latest.size) > k.limits.MaxQueuedBytesPerClient {
		return wire.NewError(wire.ErrBackpressure, 0, "the retained replay would exceed maxQueuedBytesPerClient")
	}
	k.nextSub++
	s := &subscription{id: wire.SubID(k.nextSub), conn: c, topic: t, mode: b.Mode,
		maxQueued: int(b.MaxQueued), maxInFlight: int(b.MaxInFlight)}
	t.subs = append(t.subs, s)
	c.subs = append(c.subs, s)
	k.subCount++
	// The reply goes out on the control lane, so it precedes the replay;
	// the replay is queued now, so it precedes any later publication.
	k.reply(c, env, &wire.SubscribeOK{SubscriptionID: s.id, TopicIncarnation: t.inc})
	if replay {
		k.enqueue(s, t.latest)
	}
	return nil
}

func (k *core) opUnsubscribe(c *conn, env *wire.Envelope, b *wire.Unsubscribe) *wire.BusError {
	for _, s := range c.subs {
		if s.id == b.SubscriptionID {
			k.removeSubscription(s)
			k.reply(c, env, &wire.Removed{Removed: true})
			return nil
		}
	}
	k.reply(c, env, &wire.Removed{Removed: false})
	return nil
}

// removeSubscription discards the queue; deliveries already handed out stay
// valid until consumed.
func (k *core) removeSubscription(s *subscription) {
	s.closed = true
	k.dropQueue(s)
	c, t := s.conn, s.topic
	for i, x := range c.subs {
		if x == s {
			c.subs = append(c.subs[:i], c.subs[i+1:]...)
			break
		}
	}
	for i, x := range t.subs {
		if x == s {
			t.subs = append(t.subs[:i], t.subs[i+1:]...)
			break
		}
	}
	k.subCount--
}

func (k *core) dropQueue(s *subscription) {
	for _, m := range s.queue {
		if s.mode == wire.ModeBounded {
			s.conn.queuedBytes -= m.size
		}
		k.dropRoots(m.arts)
	}
	clear(s.queue)
	s.queue = s.queue[:0]
}

func (k *core) opPublish(c *conn, env *wire.Envelope, b *wire.Publish) *wire.BusError {
	t, err := k.grantedTopic(c.grants.Publish, "publish", b.Topic)
	if err != nil {
		return err
	}
	msgBody := &k.scratch.msg // a body passed as wire.Body would escape: one per step serves
	*msgBody = wire.TopicMessage{DeliveryID: maxSerial, SubscriptionID: maxSerial, Topic: t.name,
		TopicIncarnation: t.inc, TopicSequence: maxSerial, Replaced: maxSerial, Payload: b.Payload}
	size := k.deliverySize(wire.OpTopicMessage, msgBody, env.Attachments)
	*msgBody = wire.TopicMessage{}
	if size > wire.MaxEnvelopeBytes {
		return wire.NewError(wire.ErrInvalidEnvelope, 0, "the topic.message delivery would be %d bytes, over 65536", size)
	}
	arts, aerr := k.checkAttachments(c, env.Attachments)
	if aerr != nil {
		return aerr
	}
	// Validate every bounded queue (entries and each client's byte pool)
	// before changing anything: a refusal spends no sequence number and
	// moves no retained value. Latest subscribers never refuse.
	k.pubBytes = k.pubBytes[:0]
	for _, s := range t.subs {
		if s.mode != wire.ModeBounded {
			continue
		}
		if len(s.queue) >= s.maxQueued {
			s.refusedPubs++
			return wire.NewError(wire.ErrBackpressure, 0, "subscription %s of %s is full", s.id, s.conn.ident.ClientID)
		}
		extra := size
		for _, pb := range k.pubBytes {
			if pb.c == s.conn {
				extra += pb.n
			}
		}
		if uint64(s.conn.queuedBytes+extra) > k.limits.MaxQueuedBytesPerClient {
			s.refusedPubs++
			return wire.NewError(wire.ErrBackpressure, 0, "client %s has maxQueuedBytesPerClient queued", s.conn.ident.ClientID)
		}
		k.pubBytes = append(k.pubBytes, pubBytes{s.conn, size})
	}
	if t.retained == wire.RetainLatest {
		newBytes := k.retainedBytes + artifactBytes(arts)
		if t.latest != nil {
			newBytes -= artifactBytes(t.latest.arts)
		}
		if newBytes > k.limits.MaxRetainedBytes {
			return wire.NewError(wire.ErrQuotaExceeded, 0, "the retained value would exceed maxRetainedBytes")
		}
	}
	if len(t.subs) == 0 && t.retained != wire.RetainLatest {
		// Nobody holds it: admitted, sequenced, and gone.
		t.seq++
		t.pubs++
		k.stats.publications++
		k.scratch.pubOK = wire.PublishOK{TopicSequence: t.seq}
		k.reply(c, env, &k.scratch.pubOK)
		return nil
	}
	t.seq++
	m := k.msgSlab.new()
	*m = topicMsg{topic: t.name, inc: t.inc, seq: t.seq, payload: k.payloads.copyOf(b.Payload), size: size,
		arts: k.artLists.copyOf(arts), atts: k.attLists.copyOf(env.Attachments), at: k.now}
	var replaced uint64
	for _, s := range t.subs {
		if k.enqueue(s, m) {
			replaced++
		}
	}
	if t.retained == wire.RetainLatest {
		k.setRetained(t, m)
	}
	t.pubs++
	k.stats.publications++
	k.scratch.pubOK = wire.PublishOK{TopicSequence: t.seq, Subscribers: uint64(len(t.subs)), Replaced: replaced}
	k.reply(c, env, &k.scratch.pubOK)
	return nil
}

// pubBytes tallies, during one publish, the bounded bytes a client would
// take on, for clients with several subscriptions to the topic.
type pubBytes struct {
	c *conn
	n int
}

// enqueue adds m to s's queue and reports whether it replaced an
// undelivered latest value. Bounded capacity was checked by the caller.
func (k *core) enqueue(s *subscription, m *topicMsg) bool {
	replaced := false
	k.addRoots(m.arts)
	if s.mode == wire.ModeLatest {
		if len(s.queue) > 0 {
			// Only an undelivered value is replaced; its roots go with it.
			k.dropRoots(s.queue[0].arts)
			s.queue[0] = m
			s.replaced++
			s.coalesced++
			replaced = true
		} else {
			s.queue = append(s.queue, m)
		}
	} else {
		s.queue = append(s.queue, m)
		s.conn.queuedBytes += m.size
	}
	k.markDirty(s.conn)
	return replaced
}

// nextTopicMessage delivers the head of the next subscription queue, round
// robin, that has a credit, while the connection stays within the owner
// budget left after the reserve for RPC. Over budget, messages wait.
func (k *core) nextTopicMessage(c *conn) (frame, bool) {
	if len(c.subs) == 0 || !c.hasRoom(1, k.limits.MaxOwnersPerClient-k.limits.ReservedOwnersPerClient) {
		return frame{}, false
	}
	s, ok := pickRoundRobin(c.subs, &c.subRR, (*subscription).ready)
	if !ok {
		return frame{}, false
	}
	m := popFront(&s.queue)
	if s.mode == wire.ModeBounded {
		c.queuedBytes -= m.size
	}
	d := wire.DeliveryID(c.dlvNext)
	c.dlvNext++
	c.dlvs[d] = dlvRef{sub: s, msg: m, arts: m.arts}
	s.inflight++
	s.delivered++
	replaced := s.replaced
	s.replaced = 0
	return frame{hdr: wire.Header{Kind: wire.KindDelivery, Op: wire.OpTopicMessage},
		msg: wire.TopicMessage{DeliveryID: d, SubscriptionID: s.id, Topic: m.topic,
			TopicIncarnation: m.inc, TopicSequence: m.seq, Replaced: replaced, Payload: m.payload},
		atts: m.atts}, true
}

// ready reports whether s has a queued message and a credit to deliver it.
func (s *subscription) ready() bool { return len(s.queue) > 0 && s.inflight < s.maxInFlight }

// closeSubscriptions tells every subscriber its subscription ended (router
// shutdown is the only cause in v1) and discards their queues.
func (k *core) closeSubscriptions(reason string) {
	for _, c := range k.connsInOrder() {
		for _, s := range append([]*subscription(nil), c.subs...) {
			k.notice(c, wire.OpSubscriptionClosed, &wire.SubscriptionClosed{SubscriptionID: s.id,
				Topic: s.topic.name, TopicIncarnation: s.topic.inc, Reason: reason})
			k.removeSubscription(s)
		}
	}
}
