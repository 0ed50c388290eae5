package router_test

import (
	"strings"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

func TestRetainedBytesAreCapped(t *testing.T) {
	l := wire.DefaultLimits()
	l.MaxRetainedBytes = 100_000
	forEachTransport(t, router.Config{Policy: router.OpenPolicy(), Limits: l}, func(t *testing.T, h *harness) {
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
		c.ClearTopic(ctx, "a")
		small.Close()
		big.Close()
		waitFor(t, "everything released", settled(h))
	})
}

// Topic deliveries use the owner budget minus the reserve kept for RPC; a
// message over it waits in its queue, and RPC results still arrive.
func TestTopicDeliveriesLeaveTheRPCReserve(t *testing.T) {
	l := wire.DefaultLimits()
	l.MaxOwnersPerClient = 6
	l.ReservedOwnersPerClient = 2
	forEachTransport(t, router.Config{Policy: router.OpenPolicy(), Limits: l}, func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		pub, sub, svcc := h.dial("pub"), h.dial("sub"), h.dial("svc")
		mustDeclare(t, pub, "t", wire.RetainNone)
		s, err := sub.Subscribe(ctx, "t", client.Bounded().InFlight(16))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 6 {
			mustPublish(t, pub, "t", i)
		}
		var held []*client.Message
		for range 4 {
			m, _ := next(t, s)
			held = append(held, m)
		}
		// Four topic deliveries fill 6-2: the other two wait.
		waitFor(t, "two waiting", func() bool { return h.r.Stats().Queued == 2 })
		if m, ok := s.TryNext(); ok {
			t.Fatalf("delivered past the topic budget: %+v", m)
		}
		svc, _ := svcc.Register(ctx, "status", client.ServiceConfig{})
		go serveCounter(ctx, svc)
		res, err := sub.CallAndWait(ctx, "status", 0, "S", counterArgs{Amount: 1})
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
	l := wire.DefaultLimits()
	l.MaxSubscriptions = 3
	l.MaxSubscriptionsPerClient = 2
	forEachTransport(t, router.Config{Policy: router.OpenPolicy(), Limits: l}, func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		a, b := h.dial("a"), h.dial("b")
		mustDeclare(t, a, "t", wire.RetainNone)
		for _, c := range []*client.Client{a, a, b} {
			if _, err := c.Subscribe(ctx, "t", client.Latest()); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := b.Subscribe(ctx, "t", client.Latest()); code(t, err) != wire.ErrQuotaExceeded {
			t.Fatalf("over maxSubscriptions: %v", err)
		}
	})
}

// A retained replay into a bounded subscription is admitted under the same
// byte pool as a publication.
func TestBoundedReplayRespectsTheBytePool(t *testing.T) {
	l := wire.DefaultLimits()
	l.MaxQueuedBytesPerClient = 100_000
	forEachTransport(t, router.Config{Policy: router.OpenPolicy(), Limits: l}, func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		pub, sub := h.dial("pub"), h.dial("sub")
		mustDeclare(t, pub, "big", wire.RetainLatest)
		mustDeclare(t, pub, "fill", wire.RetainNone)
		pad := strings.Repeat("x", 60_000)
		if _, err := pub.Publish(ctx, "big", map[string]string{"pad": pad}); err != nil {
			t.Fatal(err)
		}
		// Occupy the pool: a bounded subscription with one in flight held
		// and one 60 KB message queued.
		s1, _ := sub.Subscribe(ctx, "fill", client.Bounded().InFlight(1))
		pub.Publish(ctx, "fill", map[string]string{"pad": pad})
		held, err := s1.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pub.Publish(ctx, "fill", map[string]string{"pad": pad})
		waitFor(t, "60 KB queued", func() bool { return h.r.Stats().QueuedBytes > 60_000 })
		if _, err := sub.Subscribe(ctx, "big", client.Bounded().Replay(true)); code(t, err) != wire.ErrBackpressure {
			t.Fatalf("replay over the byte pool: %v", err)
		}
		// A latest subscriber's replay is outside the pool.
		s3, err := sub.Subscribe(ctx, "big", client.Latest().Replay(true))
		if err != nil {
			t.Fatal(err)
		}
		m, err := s3.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m.Close()
		held.Close()
	})
}
