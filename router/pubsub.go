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
	// publishers are the open connections that published on this
	// incarnation (extension presence), in the order they first did;
	// lastPub is the latest publisher, so that a topic's steady publisher
	// costs one comparison per publication.
	publishers []*conn
	lastPub    *conn
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
	// name is the topic's name, also while the subscription awaits its
	// declaration (topic nil: it is on core.waiting). await says it was
	// made with awaitTopic: a deletion sends it back to waiting instead
	// of being refused.
	name  string
	await bool
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
	// Subscriptions awaiting the name take the new incarnation, in the
	// order they were made; they get what is published from now on.
	if waiting := k.waiting[b.Name]; len(waiting) > 0 {
		delete(k.waiting, b.Name)
		for _, s := range waiting {
			s.topic = t
			t.subs = append(t.subs, s)
			k.notice(s.conn, wire.OpSubscriptionTopic, &wire.SubscriptionTopic{SubscriptionID: s.id, Topic: t.name,
				TopicIncarnation: wire.Some(t.inc)})
		}
	}
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
	// Only plain subscriptions hold a topic: awaiting ones go back to
	// waiting for the next declaration.
	plain := 0
	for _, s := range t.subs {
		if !s.await {
			plain++
		}
	}
	if plain > 0 {
		return wire.NewError(wire.ErrConflict, 0, "topic %s has %d subscribers", name, plain)
	}
	k.setRetained(t, nil)
	delete(k.topics, name)
	hadPublishers := len(t.publishers) > 0
	k.forgetPublishers(t)
	k.reply(c, env, &wire.Deleted{Deleted: true})
	if len(t.subs) > 0 {
		// Their queues stay: what was admitted before the deletion is still
		// delivered, each message naming the old incarnation.
		k.waiting[name] = t.subs
		for _, s := range t.subs {
			s.topic = nil
			k.notice(s.conn, wire.OpSubscriptionTopic, &wire.SubscriptionTopic{SubscriptionID: s.id, Topic: name})
			if hadPublishers {
				k.noticePublishers(s, 0)
			}
		}
		t.subs = nil
	}
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
	if b.AwaitTopic.Valid && c.ext&extAwaitTopic == 0 {
		return wire.NewError(wire.ErrInvalidEnvelope, 0, "subscribe: awaitTopic belongs to extension %s, which this connection did not ask for in bus.hello", wire.ExtAwaitTopic)
	}
	await := b.AwaitTopic.Valid && b.AwaitTopic.V
	if err := denied(c.grants.Subscribe, "subscribe", b.Topic); err != nil {
		return err
	}
	t := k.topics[b.Topic]
	if t == nil && !await {
		return wire.NewError(wire.ErrNoTopic, 0, "no topic %s", b.Topic)
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
	replay := t != nil && b.ReplayLatest && t.latest != nil
	if replay && b.Mode == wire.ModeBounded && uint64(c.queuedBytes+t.latest.size) > k.limits.MaxQueuedBytesPerClient {
		return wire.NewError(wire.ErrBackpressure, 0, "the retained replay would exceed maxQueuedBytesPerClient")
	}
	k.nextSub++
	s := &subscription{id: wire.SubID(k.nextSub), conn: c, topic: t, mode: b.Mode,
		maxQueued: int(b.MaxQueued), maxInFlight: int(b.MaxInFlight), name: b.Topic, await: await}
	c.subs = append(c.subs, s)
	k.subCount++
	ok := wire.SubscribeOK{SubscriptionID: s.id}
	publishers := 0
	if t != nil {
		t.subs = append(t.subs, s)
		ok.TopicIncarnation = wire.Some(t.inc)
		publishers = len(t.publishers)
	} else {
		k.waiting[b.Topic] = append(k.waiting[b.Topic], s)
	}
	// The reply goes out on the control lane, so it precedes the replay;
	// the replay is queued now, so it precedes any later publication.
	k.reply(c, env, &ok)
	if c.ext&extPresence != 0 {
		k.noticePublishers(s, publishers)
	}
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
	c.subs = removeSub(c.subs, s)
	if t != nil {
		t.subs = removeSub(t.subs, s)
	} else if w := removeSub(k.waiting[s.name], s); len(w) > 0 {
		k.waiting[s.name] = w
	} else {
		delete(k.waiting, s.name)
	}
	k.subCount--
}

// removeSub removes s from subs in place, keeping the order.
func removeSub(subs []*subscription, s *subscription) []*subscription {
	for i, x := range subs {
		if x == s {
			return append(subs[:i], subs[i+1:]...)
		}
	}
	return subs
}

// notePublisher records that c published on t (extension presence): a
// connection's first publication on an incarnation changes its count.
func (k *core) notePublisher(t *topic, c *conn) {
	t.lastPub = c
	for _, p := range t.publishers {
		if p == c {
			return
		}
	}
	t.publishers = append(t.publishers, c)
	c.published = append(c.published, t)
	k.announcePublishers(t)
}

// dropPublisher forgets c as a publisher of every topic it published on:
// c is closing, and no longer counts as live.
func (k *core) dropPublisher(c *conn) {
	for _, t := range c.published {
		for i, p := range t.publishers {
			if p == c {
				t.publishers = append(t.publishers[:i], t.publishers[i+1:]...)
				break
			}
		}
		if t.lastPub == c {
			t.lastPub = nil
		}
		if k.topics[t.name] == t {
			k.announcePublishers(t)
		}
	}
	clear(c.published)
	c.published = c.published[:0]
}

// forgetPublishers drops a deleted topic's publishers: the next
// incarnation starts with none.
func (k *core) forgetPublishers(t *topic) {
	for _, c := range t.publishers {
		for i, x := range c.published {
			if x == t {
				c.published = append(c.published[:i], c.published[i+1:]...)
				break
			}
		}
	}
	t.publishers, t.lastPub = nil, nil
}

// announcePublishers tells every subscription of t on a connection that
// asked for presence the topic's count of live publishers.
func (k *core) announcePublishers(t *topic) {
	for _, s := range t.subs {
		if s.conn.ext&extPresence != 0 {
			k.noticePublishers(s, len(t.publishers))
		}
	}
}

func (k *core) noticePublishers(s *subscription, n int) {
	if s.conn.ext&extPresence == 0 {
		return
	}
	k.scratch.publishers = wire.SubscriptionPublishers{SubscriptionID: s.id, Topic: s.name, Publishers: uint32(n)}
	k.notice(s.conn, wire.OpSubscriptionPublishers, &k.scratch.publishers)
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
	if t.lastPub != c {
		k.notePublisher(t, c)
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
// shutdown is the only cause) and discards their queues. An awaiting
// subscription's incarnation is null.
func (k *core) closeSubscriptions(reason string) {
	for _, c := range k.connsInOrder() {
		for _, s := range append([]*subscription(nil), c.subs...) {
			n := wire.SubscriptionClosed{SubscriptionID: s.id, Topic: s.name, Reason: reason}
			if s.topic != nil {
				n.TopicIncarnation = wire.Some(s.topic.inc)
			}
			k.notice(c, wire.OpSubscriptionClosed, &n)
			k.removeSubscription(s)
		}
	}
}
