package client_test

import (
	"bytes"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/bustest"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// collectLeaks runs the collector until c's safety net has released n
// handles. Cleanups run after a collection, on their own goroutine.
func collectLeaks(t *testing.T, c *client.Client, n uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.Stats().Leaked < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d handles released by the safety net, want %d", c.Stats().Leaked, n)
		}
		runtime.GC()
		runtime.Gosched()
	}
}

// dropMessage takes a message and forgets it without Close; in its own
// function so nothing on the test's stack keeps it reachable.
//
//go:noinline
func dropMessage(t *testing.T, s *client.Subscription) uint64 {
	m := bustest.NextMessage(t, bustest.Ctx(t), s)
	return m.TopicSequence
}

//go:noinline
func dropRequest(t *testing.T, svc *client.Service) {
	if _, err := svc.Next(bustest.Ctx(t)); err != nil {
		t.Fatal(err)
	}
}

// A Message garbage-collected unclosed gives its credit back, and is counted.
func TestForgottenMessageReturnsItsCredit(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		prod := h.Dial("producer")
		var log syncBuffer
		cons, err := client.Connect(ctx, h.Conn(""), client.Config{ClientID: "consumer", StoreRoot: h.Root(),
			Logger: slog.New(slog.NewTextHandler(&log, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		bustest.MustDeclare(t, prod, "ticks", wire.RetainNone)
		s := bustest.MustSubscribe(t, ctx, cons, "ticks", client.Bounded(), client.InFlight(1))
		for range 2 {
			if _, err := prod.Publish(ctx, "ticks", nil); err != nil {
				t.Fatal(err)
			}
		}
		if seq := dropMessage(t, s); seq != 1 {
			t.Fatalf("first message has sequence %d", seq)
		}
		collectLeaks(t, cons, 1)
		if !strings.Contains(log.String(), "handle=Message") {
			t.Fatalf("no log line names the leaked handle: %q", log.String())
		}
		// The credit came back: the second message is delivered.
		m := bustest.NextMessage(t, ctx, s)
		if m.TopicSequence != 2 {
			t.Fatalf("second message has sequence %d", m.TopicSequence)
		}
		m.Close()
		h.Await("nothing in flight", func(s router.Stats) bool { return s.Owners == 0 })
	})
}

// A Request garbage-collected unclosed consumes its delivery (the service's
// credit returns) and gives up the reply: the caller sees CALL_GONE.
func TestForgottenRequestReturnsItsCredit(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		srv, caller, svc := h.ServiceAndCaller("server", "svc", client.InFlight(1))
		p1 := bustest.MustCall(t, ctx, caller, "svc", 0, "M", nil)
		p2 := bustest.MustCall(t, ctx, caller, "svc", 0, "M", nil)
		dropRequest(t, svc)
		collectLeaks(t, srv, 1)
		if _, err := p1.Result(ctx); bustest.Code(t, err) != wire.ErrCallGone {
			t.Fatalf("forgotten request's call: %v, want CALL_GONE", err)
		}
		req := bustest.NextRequest(t, ctx, svc)
		if _, err := req.Reply(ctx, nil); err != nil {
			t.Fatal(err)
		}
		req.Close()
		res := bustest.MustResult(t, ctx, p2)
		res.Close()
		p1.Close()
		p2.Close()
	})
}

// syncBuffer is a log destination the test reads while a cleanup writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
