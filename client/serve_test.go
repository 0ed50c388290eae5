package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/bustest"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// counterResult is what the scripted service answers Add with.
type counterResult struct {
	Total int `json:"total"`
}

// await receives from ch, failing the test (what says what it waited for)
// once ctx ends first.
func await[T any](t *testing.T, ctx context.Context, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// serveScripted runs svc.Serve in a goroutine with a handler that adds
// Add's n to *total and answers it, keeps Later's responder for the test,
// gives Drop no answer and panics on Panic. served gets what Serve
// returned, or the panic.
func serveScripted(ctx context.Context, svc *client.Service, total *int, later chan<- *client.Responder) <-chan error {
	served := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				served <- fmt.Errorf("panic: %v", p)
			}
		}()
		served <- svc.Serve(ctx, func(ctx context.Context, req *client.Request) {
			switch req.Method {
			case "Add":
				var in struct{ N int }
				if err := req.Decode(&in); err != nil {
					panic(err)
				}
				*total += in.N
				if _, err := req.Reply(ctx, counterResult{Total: *total}); err != nil {
					panic(err)
				}
			case "Later":
				later <- req.Responder()
			case "Panic":
				panic("handler")
			}
		})
	}()
	return served
}

// Serve hands each request to the handler and closes it when the handler
// returns, panicking or not: a request left unanswered ends its call
// CALL_GONE, a kept Responder answers after its request was closed, and
// the service's credits all come back. Serve returns nil after the
// service's Close.
func TestServeClosesEachRequestAfterItsHandler(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		_, caller, svc := h.ServiceAndCaller("svc", "serve.counter", client.Queued(1), client.InFlight(1))
		later := make(chan *client.Responder, 1)
		total := 0 // one Serve at a time adds to it
		served := serveScripted(ctx, svc, &total, later)
		add := func(n, want int) {
			t.Helper()
			res := bustest.MustResult(t, ctx, bustest.MustCall(t, ctx, caller, "serve.counter", 0, "Add", map[string]int{"n": n}))
			var got counterResult
			if err := res.Decode(&got); err != nil || got.Total != want {
				t.Fatalf("Add(%d): %+v %v, want total %d", n, got, err, want)
			}
			res.Close()
		}
		// One in flight and one queued: each step needs the previous
		// request's credit back.
		for i, want := range []int{1, 3, 6, 10, 15} {
			add(i+1, want)
		}
		bustest.WantResultErr(t, ctx, "a request its handler left unanswered",
			bustest.MustCall(t, ctx, caller, "serve.counter", 0, "Drop", nil), wire.ErrCallGone, wire.Dispatched)

		p := bustest.MustCall(t, ctx, caller, "serve.counter", 0, "Later", nil)
		resp := await(t, ctx, later, "the Later handler")
		add(5, 20) // the request is closed: its credit serves the next call
		if routed, err := resp.Reply(ctx, counterResult{Total: -1}); err != nil || !routed {
			t.Fatalf("a responder kept past its request: %v %v", routed, err)
		}
		resp.Close()
		bustest.MustResult(t, ctx, p).Close()

		bustest.WantResultErr(t, ctx, "a request whose handler panicked",
			bustest.MustCall(t, ctx, caller, "serve.counter", 0, "Panic", nil), wire.ErrCallGone, wire.Dispatched)
		if err := await(t, ctx, served, "the panicking Serve"); err == nil || err.Error() != "panic: handler" {
			t.Fatalf("Serve with a panicking handler: %v", err)
		}
		served = serveScripted(ctx, svc, &total, later)
		add(0, 20)
		svc.Close()
		if err := await(t, ctx, served, "Serve to return"); err != nil {
			t.Fatalf("Serve after the service's Close: %v, want nil", err)
		}
		h.Await("the router to hold no call", func(s router.Stats) bool { return s.Calls == 0 })
	})
}

// Serve in several goroutines handles up to MaxInFlight requests at once,
// and every one of them returns when the service is closed.
func TestServeInSeveralGoroutines(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		const n = 3
		_, caller, svc := h.ServiceAndCaller("svc", "serve.wide", client.InFlight(n))
		inside, release := make(chan struct{}), make(chan struct{})
		served := make(chan error, n)
		for range n {
			go func() {
				served <- svc.Serve(ctx, func(ctx context.Context, req *client.Request) {
					inside <- struct{}{}
					<-release
					if _, err := req.Reply(ctx, nil); err != nil {
						panic(err)
					}
				})
			}()
		}
		var calls []*client.PendingCall
		for range n {
			calls = append(calls, bustest.MustCall(t, ctx, caller, "serve.wide", 0, "Wait", nil))
		}
		for i := range n {
			await(t, ctx, inside, fmt.Sprintf("request %d of %d to reach a handler", i+1, n))
		}
		close(release)
		for _, p := range calls {
			bustest.MustResult(t, ctx, p).Close()
		}
		svc.Close()
		for i := range n {
			if err := await(t, ctx, served, fmt.Sprintf("Serve %d of %d to return", i+1, n)); err != nil {
				t.Fatalf("Serve after the service's Close: %v, want nil", err)
			}
		}
	})
}

// Receive hands each message to the handler and closes it when the handler
// returns; an artifact the handler took stays readable after. It returns
// nil once its context is done, and an error matching
// ErrSubscriptionClosed when the router ends the subscription; Serve
// returns ROUTER_LOST then.
func TestReceiveClosesEachMessageAfterItsHandler(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		pub, sub, s := h.PubSub("pub", "sub", "serve.frames", wire.RetainNone, client.Bounded(), client.Queued(1), client.InFlight(1))
		data := bustest.FrameBytes(9, 4096)
		type got struct {
			n   int
			img *client.Artifact
		}
		each := make(chan got)
		receive := func(ctx context.Context) <-chan error {
			done := make(chan error, 1)
			go func() {
				done <- s.Receive(ctx, func(ctx context.Context, m *client.Message) {
					var in struct{ N int }
					if err := m.Decode(&in); err != nil {
						panic(err)
					}
					g := got{n: in.N}
					if len(m.Attachments()) > 0 {
						var err error
						if g.img, err = m.Artifact("img"); err != nil {
							panic(err)
						}
					}
					each <- g
				})
			}()
			return done
		}
		rctx, stop := context.WithCancel(ctx)
		received := receive(rctx)
		// A credit of one: each publish is delivered only once the message
		// before it was closed.
		for i := range 4 {
			var atts []client.Attachment
			if i == 2 {
				a := bustest.Produce(t, pub, data)
				atts = append(atts, client.Attach("img", a))
			}
			_, err := pub.Publish(ctx, "serve.frames", map[string]int{"n": i}, atts...)
			for _, att := range atts {
				att.Artifact.Close()
			}
			if err != nil {
				t.Fatal(err)
			}
			g := await(t, ctx, each, fmt.Sprintf("message %d", i))
			if g.n != i {
				t.Fatalf("message %d handled as %d", i, g.n)
			}
			if g.img != nil {
				bustest.CheckBytes(t, ctx, g.img, data, "an artifact kept past its message")
				g.img.Close()
			}
		}
		stop()
		if err := await(t, ctx, received, "Receive to return"); err != nil {
			t.Fatalf("Receive after its context ended: %v, want nil", err)
		}

		svc := bustest.MustRegister(t, ctx, sub, "serve.ends")
		served := make(chan error, 1)
		go func() { served <- svc.Serve(ctx, func(context.Context, *client.Request) {}) }()
		received = receive(ctx)
		if err := h.Router().Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if err := await(t, ctx, received, "Receive to end"); !errors.Is(err, client.ErrSubscriptionClosed) || errors.Is(err, client.ErrHandleClosed) || !strings.Contains(err.Error(), "router-shutdown") {
			t.Fatalf("Receive after the router's shutdown: %v, want the subscription closed by the router", err)
		}
		if err := await(t, ctx, served, "Serve to end"); !errors.Is(err, wire.ErrRouterLost) {
			t.Fatalf("Serve after the router's shutdown: %v, want ROUTER_LOST", err)
		}
	})
}
