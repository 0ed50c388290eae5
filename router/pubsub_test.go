package router_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/bustest"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

type tick struct {
	N int `json:"n"`
}

func mustPublish(t *testing.T, c *client.Client, topic string, n int) client.PublishReceipt {
	t.Helper()
	rc, err := c.Publish(ctxT(t), topic, tick{N: n})
	if err != nil {
		t.Fatalf("publish %d: %v", n, err)
	}
	return rc
}

func next(t *testing.T, s *client.Subscription) (*client.Message, int) {
	t.Helper()
	m := nextMessage(t, ctxT(t), s)
	var v tick
	if err := m.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return m, v.N
}

func TestTopicDeclarationRules(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		c := h.dial("admin")
		info := mustDeclare(t, c, "session.demo.snapshots", wire.RetainLatest)
		if !info.Declared || info.Incarnation == 0 {
			t.Fatalf("declare: %+v", info)
		}
		again := mustDeclare(t, c, "session.demo.snapshots", wire.RetainLatest)
		if again.Declared || again.Incarnation != info.Incarnation {
			t.Fatalf("compatible redeclaration: %+v", again)
		}
		if _, err := c.DeclareTopic(ctx, "session.demo.snapshots", wire.RetainNone); code(t, err) != wire.ErrConflict {
			t.Fatalf("conflicting redeclaration: %v", err)
		}
		if _, err := c.Publish(ctx, "nobody.declared", nil); code(t, err) != wire.ErrNoTopic {
			t.Fatalf("publish undeclared: %v", err)
		}
		if _, err := c.Subscribe(ctx, "nobody.declared"); code(t, err) != wire.ErrNoTopic {
			t.Fatalf("subscribe undeclared: %v", err)
		}
		if _, err := c.ClearTopic(ctx, "nobody.declared"); code(t, err) != wire.ErrNoTopic {
			t.Fatalf("clear undeclared: %v", err)
		}
		if deleted, err := c.DeleteTopic(ctx, "nobody.declared"); err != nil || deleted {
			t.Fatalf("delete undeclared: %v %v", deleted, err)
		}
		sub := mustSubscribe(t, ctx, c, "session.demo.snapshots")
		if _, err := c.DeleteTopic(ctx, "session.demo.snapshots"); code(t, err) != wire.ErrConflict {
			t.Fatalf("delete with subscribers: %v", err)
		}
		sub.Close()
		settle(t, h, "unsubscribe", func(s router.Stats) bool { return s.Subscriptions == 0 })
		if deleted, err := c.DeleteTopic(ctx, "session.demo.snapshots"); err != nil || !deleted {
			t.Fatalf("delete: %v %v", deleted, err)
		}
		fresh := mustDeclare(t, c, "session.demo.snapshots", wire.RetainLatest)
		if !fresh.Declared || fresh.Incarnation == info.Incarnation {
			t.Fatalf("redeclared topic reused its incarnation: %+v vs %+v", fresh, info)
		}
	})
}

func TestExactTopicsAndBoundedFIFO(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		pub, subc := h.dial("pub"), h.dial("sub")
		mustDeclare(t, pub, "world.frame", wire.RetainNone)
		mustDeclare(t, pub, "world.frame.meta", wire.RetainNone)
		s := mustSubscribe(t, ctx, subc, "world.frame", client.Bounded())
		mustPublish(t, pub, "world.frame.meta", 99) // another topic entirely
		for i := range 5 {
			rc := mustPublish(t, pub, "world.frame", i)
			if rc.TopicSequence != uint64(i+1) || rc.Subscribers != 1 || rc.Replaced != 0 {
				t.Fatalf("receipt %d: %+v", i, rc)
			}
		}
		for i := range 5 {
			m, n := next(t, s)
			if n != i || m.TopicSequence != uint64(i+1) || m.Topic != "world.frame" || m.Replaced != 0 {
				t.Fatalf("message %d: n=%d %+v", i, n, m)
			}
			m.Close()
		}
		if m, ok := s.TryNext(); ok {
			t.Fatalf("unexpected message %+v", m)
		}
	})
}

func TestBoundedOverflowRefusesTheWholePublication(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		pub, a, b := h.dial("pub"), h.dial("a"), h.dial("b")
		mustDeclare(t, pub, "events", wire.RetainLatest)
		small := mustSubscribe(t, ctx, a, "events", client.Bounded(), client.Queued(2), client.InFlight(1))
		roomy := mustSubscribe(t, ctx, b, "events", client.Bounded())
		// a: one in flight (held, not closed) and two queued, then full.
		mustPublish(t, pub, "events", 0)
		held, _ := next(t, small)
		mustPublish(t, pub, "events", 1)
		mustPublish(t, pub, "events", 2)
		_, err := pub.Publish(ctx, "events", tick{N: 3})
		if code(t, err) != wire.ErrBackpressure {
			t.Fatalf("overflow: %v", err)
		}
		// Nothing moved: b saw exactly 0,1,2; no sequence was spent; the
		// retained value is still 2.
		for i := range 3 {
			m, n := next(t, roomy)
			if n != i {
				t.Fatalf("b got %d, want %d", n, i)
			}
			m.Close()
		}
		late := mustSubscribe(t, ctx, b, "events", client.Replay())
		m, n := next(t, late)
		if n != 2 || m.TopicSequence != 3 {
			t.Fatalf("retained after refusal: n=%d seq=%d", n, m.TopicSequence)
		}
		m.Close()
		held.Close() // the credit returns only now: a's queue drains
		for i := 1; i < 3; i++ {
			m, n := next(t, small)
			if n != i {
				t.Fatalf("a got %d, want %d", n, i)
			}
			m.Close()
		}
		if rc := mustPublish(t, pub, "events", 4); rc.TopicSequence != 4 {
			t.Fatalf("sequence after a refusal: %+v", rc)
		}
	})
}

func TestLatestCoalescesAndCountsReplaced(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		pub, _, s := h.pubSub("pub", "viewer", "frames", wire.RetainNone, client.InFlight(1))
		mustPublish(t, pub, "frames", 0)
		first, n := next(t, s) // in flight: later ones coalesce in the one slot
		if n != 0 {
			t.Fatalf("first %d", n)
		}
		var replaced uint64
		for i := 1; i <= 5; i++ {
			replaced += mustPublish(t, pub, "frames", i).Replaced
		}
		if replaced != 4 {
			t.Fatalf("publications reported %d replaced, want 4", replaced)
		}
		first.Close()
		m, n := next(t, s)
		if n != 5 || m.Replaced != 4 || m.TopicSequence != 6 {
			t.Fatalf("coalesced delivery: n=%d replaced=%d seq=%d", n, m.Replaced, m.TopicSequence)
		}
		m.Close()
	})
}

func TestLatestSubscriberNeverRefusesAPublication(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		pub, _, s := h.pubSub("pub", "spectator", "feed", wire.RetainNone, client.InFlight(1))
		pad := strings.Repeat("x", 60_000)
		for i := range 100 {
			if _, err := pub.Publish(ctx, "feed", map[string]any{"n": i, "pad": pad}); err != nil {
				t.Fatalf("publication %d refused: %v", i, err)
			}
		}
		// The spectator never closed anything: at most one in flight and
		// one queued, whatever it costs it.
		if q := h.r.Stats().QueuedBytes; q != 0 {
			t.Fatalf("latest slots counted in the bounded byte pool: %d", q)
		}
		nextMessage(t, ctx, s).Close()
	})
}

func TestRetainedReplayPrecedesLaterPublications(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		pub, subc := h.dial("pub"), h.dial("late")
		mustDeclare(t, pub, "snapshots", wire.RetainLatest)
		mustPublish(t, pub, "snapshots", 1)
		// A publication racing the subscription: whichever the router
		// admits first, the replay comes before anything published later.
		done := make(chan error, 1)
		go func() { _, err := pub.Publish(ctx, "snapshots", tick{N: 2}); done <- err }()
		s := mustSubscribe(t, ctx, subc, "snapshots", client.Bounded(), client.Replay())
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		m, n := next(t, s)
		if m.TopicSequence != uint64(n) {
			t.Fatalf("sequence %d for value %d", m.TopicSequence, n)
		}
		m.Close()
		if n == 1 { // replay of 1, then the racing 2 as a live publication
			m, n = next(t, s)
			if n != 2 {
				t.Fatalf("after replay got %d", n)
			}
			m.Close()
		}
		mustPublish(t, pub, "snapshots", 3)
		m, n = next(t, s)
		if n != 3 {
			t.Fatalf("got %d after the replay, want 3", n)
		}
		m.Close()
		// Clear: no replay until a fresh publication.
		if cleared, err := pub.ClearTopic(ctx, "snapshots"); err != nil || !cleared {
			t.Fatalf("clear: %v %v", cleared, err)
		}
		s2 := mustSubscribe(t, ctx, subc, "snapshots", client.Replay())
		if m, ok := s2.TryNext(); ok {
			t.Fatalf("replay after clear: %+v", m)
		}
		mustPublish(t, pub, "snapshots", 4)
		m, n = next(t, s2)
		if n != 4 {
			t.Fatalf("after clear got %d", n)
		}
		m.Close()
		// s2 saw no replay: prove it by a fresh subscriber getting 4.
		s3 := mustSubscribe(t, ctx, subc, "snapshots", client.Replay())
		m, n = next(t, s3)
		if n != 4 || m.TopicSequence != 4 {
			t.Fatalf("replay of 4: n=%d seq=%d", n, m.TopicSequence)
		}
		m.Close()
	})
}

func TestCreditsReturnOnlyOnConsume(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		pub, _, s := h.pubSub("pub", "sub", "work", wire.RetainNone, client.Bounded(), client.InFlight(2))
		for i := range 4 {
			mustPublish(t, pub, "work", i)
		}
		a, _ := next(t, s)
		b, _ := next(t, s)
		// Written to the socket is not consumed: the third stays queued.
		settle(t, h, "two queued", func(s router.Stats) bool { return s.Queued == 2 })
		if m, ok := s.TryNext(); ok {
			t.Fatalf("third delivered before a credit returned: %+v", m)
		}
		a.Close()
		c, n := next(t, s)
		if n != 2 {
			t.Fatalf("got %d", n)
		}
		b.Close()
		c.Close()
		d, _ := next(t, s)
		d.Close()
		settle(t, h, "owners released", func(s router.Stats) bool { return s.Owners == 0 })
	})
}

func TestUnsubscribeKeepsDeliveredMessages(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		pub, _, s := h.pubSub("pub", "sub", "t", wire.RetainNone, client.Bounded(), client.InFlight(1))
		mustPublish(t, pub, "t", 1)
		mustPublish(t, pub, "t", 2)
		held, _ := next(t, s)
		settle(t, h, "one queued", func(s router.Stats) bool { return s.Queued == 1 })
		s.Close()
		waitFor(t, "queue discarded", func() bool { st := h.r.Stats(); return st.Subscriptions == 0 && st.Queued == 0 })
		if st := h.r.Stats(); st.Owners != 1 {
			t.Fatalf("the delivered message lost its root: %+v", st)
		}
		var v tick
		if err := held.Decode(&v); err != nil || v.N != 1 {
			t.Fatalf("delivered message after unsubscribe: %v %+v", err, v)
		}
		held.Close()
		settle(t, h, "the root released", func(s router.Stats) bool { return s.Owners == 0 })
	})
}

func TestTopicNamedLikeANoticeIsTopicData(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		pub, subc := h.dial("pub"), h.dial("sub")
		for _, name := range []string{"connection.closing", "call.failed", "route.removed"} {
			mustDeclare(t, pub, name, wire.RetainNone)
			s := mustSubscribe(t, ctx, subc, name, client.Bounded())
			mustPublish(t, pub, name, 7)
			m, n := next(t, s)
			if n != 7 || m.Topic != name {
				t.Fatalf("%s: %+v", name, m)
			}
			m.Close()
		}
		if subc.Err() != nil {
			t.Fatalf("the subscriber's connection ended: %v", subc.Err())
		}
	})
}

// A subscriber that never consumes must not delay RPC results or replies,
// for itself or anyone else.
func TestSaturatedSubscriberDoesNotDelayControlOrRPC(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		pub, slow, svcClient := h.dial("pub"), h.dial("slow"), h.dial("svc")
		mustDeclare(t, pub, "firehose", wire.RetainNone)
		mustSubscribe(t, ctx, slow, "firehose", client.Bounded(), client.Queued(64), client.InFlight(16))
		svc := mustRegister(t, ctx, svcClient, "status")
		go serveCounter(ctx, svc)
		for i := range 200 {
			if _, err := pub.Publish(ctx, "firehose", tick{N: i}); err != nil {
				break // BACKPRESSURE once the slow queue is full: expected
			}
		}
		// The saturated client itself still gets replies and results.
		res, err := slow.CallAndWait(ctx, "status", "Status", counterArgs{Amount: 1})
		if err != nil {
			t.Fatal(err)
		}
		res.Close()
		mustDeclare(t, slow, "other", wire.RetainNone)
		res, err = pub.CallAndWait(ctx, "status", "Status", counterArgs{Amount: 1})
		if err != nil {
			t.Fatal(err)
		}
		res.Close()
	})
}

func TestSubscriptionQuotas(t *testing.T) {
	forEachTransport(t, openWith(wire.Limits{MaxSubscriptionsPerClient: 2, MaxTopics: 3}), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		c := h.dial("c")
		for _, n := range []string{"a", "b", "c"} {
			mustDeclare(t, c, n, wire.RetainNone)
		}
		if _, err := c.DeclareTopic(ctx, "d", wire.RetainNone); code(t, err) != wire.ErrQuotaExceeded {
			t.Fatalf("maxTopics: %v", err)
		}
		for _, n := range []string{"a", "b"} {
			mustSubscribe(t, ctx, c, n)
		}
		if _, err := c.Subscribe(ctx, "c"); code(t, err) != wire.ErrQuotaExceeded {
			t.Fatalf("maxSubscriptionsPerClient: %v", err)
		}
		if _, err := c.Subscribe(ctx, "c", client.InFlight(3)); code(t, err) != wire.ErrInvalidEnvelope {
			t.Fatalf("latest in-flight over the limit: %v", err)
		}
	})
}

func TestShutdownClosesSubscriptionsWithNotices(t *testing.T) {
	for _, unix := range []bool{false, true} {
		h := newHarness(t, open(), unix)
		c := h.dial("sub")
		mustDeclare(t, c, "t", wire.RetainNone)
		s := mustSubscribe(t, ctxT(t), c, "t")
		if err := h.r.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Next(ctxT(t)); !errors.Is(err, client.ErrSubscriptionClosed) || !strings.Contains(err.Error(), "router-shutdown") {
			t.Fatalf("Next after shutdown: %v, want the router's reason", err)
		}
		<-c.Done()
	}
}

// Row 7.4: a latest subscription's maxQueued is exactly 1.
func TestLatestMaxQueuedIsOne(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		c := h.dial("sub")
		mustDeclare(t, c, "frames", wire.RetainNone)
		if _, err := c.Subscribe(ctx, "frames", client.Queued(2)); code(t, err) != wire.ErrInvalidEnvelope {
			t.Fatalf("latest with maxQueued 2: %v", err)
		}
		if h.r.Stats().Subscriptions != 0 {
			t.Fatal("a refused subscription was created")
		}
		s, err := c.Subscribe(ctx, "frames")
		if err != nil {
			t.Fatalf("latest with maxQueued 1: %v", err)
		}
		s.Close()
	})
}

// Row 7.19: clearing a topic releases its retained root only; a delivery
// of the retained value already made stays readable until it is closed.
func TestClearKeepsDeliveredArtifacts(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		prod, _, s := h.pubSub("producer", "consumer", "snap", wire.RetainLatest, client.Bounded())
		data := frameBytes(13, 8192)
		a := produce(t, prod, data)
		if _, err := prod.Publish(ctx, "snap", nil, client.Attach("img", a)); err != nil {
			t.Fatal(err)
		}
		a.Close()
		barrier(t, prod)
		m := nextMessage(t, ctx, s)
		img := mustArtifact(t, m, "img")
		m.Close()
		if st := h.r.Stats(); st.ArtifactRoots != 2 || st.RetainedBytes == 0 {
			t.Fatalf("want the retained root and the delivery's: %+v", st)
		}
		if cleared, err := prod.ClearTopic(ctx, "snap"); err != nil || !cleared {
			t.Fatalf("clear: %v %v", cleared, err)
		}
		if st := h.r.Stats(); st.ArtifactRoots != 1 || st.Artifacts != 1 || st.RetainedBytes != 0 {
			t.Fatalf("after clear: %+v", st)
		}
		checkBytes(t, ctx, img, data, "the delivered artifact after clear")
		if sealedFiles(t, h) != 1 {
			t.Fatal("collected while a delivery still held it")
		}
		img.Close()
		settle(t, h, "collection after the delivery closed", bustest.Drained)
		if sealedFiles(t, h) != 0 {
			t.Fatal("the sealed file was not unlinked")
		}
	})
}

func TestRetainedBytesAreCapped(t *testing.T) {
	forEachTransport(t, openWith(wire.Limits{MaxRetainedBytes: 100_000}), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		c := h.dial("p")
		mustDeclare(t, c, "a", wire.RetainLatest)
		mustDeclare(t, c, "b", wire.RetainLatest)
		small := produce(t, c, frameBytes(1, 60_000))
		big := produce(t, c, frameBytes(2, 60_000))
		if _, err := c.Publish(ctx, "a", nil, client.Attach("f", small)); err != nil {
			t.Fatal(err)
		}
		// Two retained values of 60 KB exceed 100 KB: refused whole.
		if _, err := c.Publish(ctx, "b", nil, client.Attach("f", big)); code(t, err) != wire.ErrQuotaExceeded {
			t.Fatalf("over maxRetainedBytes: %v", err)
		}
		if s := h.r.Stats(); s.RetainedBytes != 60_000 {
			t.Fatalf("retained bytes %d", s.RetainedBytes)
		}
		// Replacing a topic's own retained value counts it once.
		if _, err := c.Publish(ctx, "a", nil, client.Attach("f", big)); err != nil {
			t.Fatalf("replacing the retained value: %v", err)
		}
		if _, err := c.ClearTopic(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		small.Close()
		big.Close()
		settle(t, h, "everything released", bustest.Drained)
	})
}

// Topic deliveries use the owner budget minus the reserve kept for RPC; a
// message over it waits in its queue, and RPC results still arrive.
func TestTopicDeliveriesLeaveTheRPCReserve(t *testing.T) {
	forEachTransport(t, openWith(wire.Limits{MaxOwnersPerClient: 6, ReservedOwnersPerClient: 2}), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		pub, sub, svcc := h.dial("pub"), h.dial("sub"), h.dial("svc")
		mustDeclare(t, pub, "t", wire.RetainNone)
		s := mustSubscribe(t, ctx, sub, "t", client.Bounded(), client.InFlight(16))
		for i := range 6 {
			mustPublish(t, pub, "t", i)
		}
		var held []*client.Message
		for range 4 {
			m, _ := next(t, s)
			held = append(held, m)
		}
		// Four topic deliveries fill 6-2: the other two wait.
		settle(t, h, "two waiting", func(s router.Stats) bool { return s.Queued == 2 })
		if m, ok := s.TryNext(); ok {
			t.Fatalf("delivered past the topic budget: %+v", m)
		}
		svc := mustRegister(t, ctx, svcc, "status")
		go serveCounter(ctx, svc)
		res, err := sub.CallAndWait(ctx, "status", "S", counterArgs{Amount: 1})
		if err != nil {
			t.Fatalf("RPC inside the reserve: %v", err)
		}
		res.Close()
		held[0].Close()
		m, n := next(t, s)
		if n != 4 {
			t.Fatalf("next after a release: %d", n)
		}
		m.Close()
		for _, m := range held[1:] {
			m.Close()
		}
		m, _ = next(t, s)
		m.Close()
	})
}

func TestTotalSubscriptionLimit(t *testing.T) {
	forEachTransport(t, openWith(wire.Limits{MaxSubscriptions: 3, MaxSubscriptionsPerClient: 2}), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		a, b := h.dial("a"), h.dial("b")
		mustDeclare(t, a, "t", wire.RetainNone)
		for _, c := range []*client.Client{a, a, b} {
			mustSubscribe(t, ctx, c, "t")
		}
		if _, err := b.Subscribe(ctx, "t"); code(t, err) != wire.ErrQuotaExceeded {
			t.Fatalf("over maxSubscriptions: %v", err)
		}
	})
}

// A retained replay into a bounded subscription is admitted under the same
// byte pool as a publication.
func TestBoundedReplayRespectsTheBytePool(t *testing.T) {
	forEachTransport(t, openWith(wire.Limits{MaxQueuedBytesPerClient: 100_000}), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		pub, sub := h.dial("pub"), h.dial("sub")
		mustDeclare(t, pub, "big", wire.RetainLatest)
		mustDeclare(t, pub, "fill", wire.RetainNone)
		publish60KB := func(topic string) {
			t.Helper()
			if _, err := pub.Publish(ctx, topic, map[string]string{"pad": strings.Repeat("x", 60_000)}); err != nil {
				t.Fatal(err)
			}
		}
		publish60KB("big")
		// Occupy the pool: a bounded subscription with one in flight held
		// and one 60 KB message queued.
		s1 := mustSubscribe(t, ctx, sub, "fill", client.Bounded(), client.InFlight(1))
		publish60KB("fill")
		held := nextMessage(t, ctx, s1)
		publish60KB("fill")
		settle(t, h, "60 KB queued", func(s router.Stats) bool { return s.QueuedBytes > 60_000 })
		if _, err := sub.Subscribe(ctx, "big", client.Bounded(), client.Replay()); code(t, err) != wire.ErrBackpressure {
			t.Fatalf("replay over the byte pool: %v", err)
		}
		// A latest subscriber's replay is outside the pool.
		latest := mustSubscribe(t, ctx, sub, "big", client.Replay())
		nextMessage(t, ctx, latest).Close()
		held.Close()
	})
}
