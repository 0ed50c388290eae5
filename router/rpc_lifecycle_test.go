package router_test

import (
	"errors"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// A caller that disconnects takes its queued calls out of the service queue
// unsent; its dispatched request stays valid for the service, whose reply
// then goes nowhere; nothing is left once the service closes its request.
func TestCallerDisconnectWithQueuedAndDispatchedCalls(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		svc, c, _ := servicePeers(t, h, "cd.svc", 4, 1)

		// A completed call whose result the caller never consumes.
		c.callOK(1, "cd.svc")
		r1 := svc.request()
		svc.replyTo(r1, `{}`)
		c.result()
		svc.consume(r1.DeliveryID)

		c.callOK(2, "cd.svc") // dispatched
		c.callOK(3, "cd.svc") // queued
		c.callOK(4, "cd.svc") // queued
		r2 := svc.request()
		settle(t, h, "two queued calls", func(s router.Stats) bool { return s.Queued == 2 })

		c.nc.Close()
		settle(t, h, "the caller's state to go", func(s router.Stats) bool {
			return s.Connections == 1 && s.Queued == 0 && s.ActiveCalls == 0
		})
		// Left: the service's request root and its capability.
		if s := h.r.Stats(); s.Calls != 1 || s.Owners != 2 || s.ReplyCapabilities != 1 {
			t.Fatalf("after the caller left: %+v", s)
		}
		if svc.replyTo(r2, `{"late":true}`) {
			t.Fatal("a reply to a departed caller was routed")
		}
		if n := svc.consume(r2.DeliveryID); n != 1 {
			t.Fatalf("the dispatched request released %d", n)
		}
		drained(t, h)

		// The queued calls were never dispatched: the next request is a new
		// caller's.
		d := newPeer(t, h, "cd-next")
		d.callOK(1, "cd.svc")
		if r := svc.request(); r.Caller != d.ident {
			t.Fatalf("next request came from %+v (%s), want the new caller", r.Caller, r.CallID)
		}
	})
}

// route.removed goes to callers with a queued or dispatched call on the
// removed registration, and to nobody else.
func TestRouteRemovedAudience(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		svc := newPeer(t, h, "rr-svc")
		inc := svc.register("rr.svc", 4, 1)
		other := newPeer(t, h, "rr-other-svc")
		other.register("rr.other", 4, 4)

		dispatched := newPeer(t, h, "rr-dispatched")
		queued := newPeer(t, h, "rr-queued")
		finished := newPeer(t, h, "rr-finished") // had a call, no longer
		elsewhere := newPeer(t, h, "rr-elsewhere")

		finished.callOK(1, "rr.svc")
		svc.finishCall(finished, svc.request())

		dispatched.callOK(1, "rr.svc")
		req := svc.request()
		queued.callOK(1, "rr.svc")
		elsewhere.callOK(1, "rr.other")
		otherReq := other.request()

		svc.ok(wire.OpServiceUnregister, &wire.Unregister{Name: "rr.svc", ServiceIncarnation: inc})
		for _, p := range []*peer{dispatched, queued} {
			rr := p.notice(wire.OpRouteRemoved).(*wire.RouteRemoved)
			if rr.Name != "rr.svc" || rr.ServiceIncarnation != inc || rr.Reason == "" {
				t.Fatalf("%s: route.removed %+v", p.name, rr)
			}
		}
		wantErr(t, "the queued call", queued.callFailed().Err(), wire.ErrNoService, wire.NotDispatched)
		finished.quiet(wire.OpRouteRemoved)
		elsewhere.quiet(wire.OpRouteRemoved)
		other.quiet(wire.OpRouteRemoved)
		// The dispatched call is still answerable.
		svc.finishCall(dispatched, req)
		dispatched.quiet(wire.OpCallFailed)

		// A service that disconnects: the same audience, and its dispatched
		// call fails NO_SERVICE, dispatched.
		other2 := newPeer(t, h, "rr-svc2")
		inc2 := other2.register("rr.svc2", 4, 4)
		dispatched.callOK(2, "rr.svc2")
		other2.request()
		other2.nc.Close()
		rr := dispatched.notice(wire.OpRouteRemoved).(*wire.RouteRemoved)
		if rr.Name != "rr.svc2" || rr.ServiceIncarnation != inc2 {
			t.Fatalf("route.removed %+v", rr)
		}
		wantErr(t, "dispatched call of a departed service", dispatched.callFailed().Err(), wire.ErrNoService, wire.Dispatched)
		elsewhere.quiet(wire.OpRouteRemoved)
		other.finishCall(elsewhere, otherReq)
		drained(t, h)
	})
}

// Shutdown sends connection.closing (ROUTER_LOST) to every connection,
// pending ones included, and SDK calls still pending fail with ROUTER_LOST,
// dispatch unknown. Two clients each call the other's service, so whichever
// connection the router tears down first, the other still has calls on it:
// no call may be failed as NO_SERVICE on the way out.
func TestShutdownClosesEveryClient(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		a, b := h.dial("shut-a"), h.dial("shut-b")
		var services []*client.Service
		for _, s := range []struct {
			c    *client.Client
			name string
		}{{a, "shut.a"}, {b, "shut.b"}} {
			svc, err := s.c.Register(ctx, s.name, client.Queued(8), client.InFlight(1))
			if err != nil {
				t.Fatal(err)
			}
			services = append(services, svc)
		}
		var pending []*client.PendingCall
		for _, s := range []struct {
			c      *client.Client
			target string
		}{{a, "shut.b"}, {b, "shut.a"}} {
			for range 2 { // one dispatched, one queued
				p, err := s.c.Call(ctx, s.target, "M", nil)
				if err != nil {
					t.Fatal(err)
				}
				pending = append(pending, p)
			}
		}
		// Each service holds its dispatched request through the shutdown. A
		// request dropped unclosed would be released by the SDK's cleanup
		// whenever the collector ran, ending its call CALL_GONE before the
		// shutdown could end it ROUTER_LOST.
		var held []*client.Request
		for _, svc := range services {
			held = append(held, nextRequest(t, ctx, svc))
		}
		defer func() {
			for _, req := range held {
				req.Close()
			}
		}()
		r := newPeer(t, h, "shut-raw")
		waiting := newRaw(t, h.conn("")) // never says hello
		settle(t, h, "the pending connection", func(s router.Stats) bool { return s.PendingHello == 1 })

		done := make(chan error, 1)
		go func() { done <- h.r.Shutdown(ctx) }()
		r.expectClosed(wire.ErrRouterLost)
		waiting.expectClosed(wire.ErrRouterLost)
		for i, p := range pending {
			_, err := p.Result(ctx)
			if code(t, err) != wire.ErrRouterLost || dispatchOf(t, err) != wire.DispatchUnknown {
				t.Errorf("pending call %d ended with %v, want ROUTER_LOST (unknown): the router released "+
					"one connection's services while another was not yet closing", i, err)
			}
		}
		for _, c := range []*client.Client{a, b} {
			select {
			case <-c.Done():
			case <-ctx.Done():
				t.Fatal("a client did not see the connection end")
			}
			if code(t, c.Err()) != wire.ErrRouterLost {
				t.Errorf("client error %v, want ROUTER_LOST", c.Err())
			}
		}
		if err := <-done; err != nil {
			t.Fatalf("shutdown: %v", err)
		}
		if _, err := h.r.ConnectInMemory(); !errors.Is(err, router.ErrClosed) {
			t.Fatalf("connect after shutdown: %v", err)
		}
	})
}
