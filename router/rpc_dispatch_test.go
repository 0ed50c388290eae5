package router_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// Only the connection a request was delivered to may answer it, quoting
// both its delivery id and its call id.
func TestForgedRepliesAreRefused(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		svc, c, _ := servicePeers(t, h, "forge.svc", 4, 4)
		forger := newPeer(t, h, "forger")
		c.callOK(1, "forge.svc")
		req := svc.request()

		// Quoting the exact call and delivery from a connection that was
		// never issued that delivery.
		f := forger.reply(req.CallID, req.DeliveryID, `{"forged":true}`)
		wantErr(t, "reply from a connection without deliveries", f.Err, wire.ErrOwnerInvalid, wire.NotDispatched)

		// The forger's own first delivery has the same serial as the
		// victim's request; quoting it with the victim's call id is still
		// refused, and does not spend the forger's own capability.
		forger.register("forger.svc", 4, 4)
		c2 := newPeer(t, h, "forge-other")
		c2.callOK(7, "forger.svc")
		own := forger.request()
		if own.DeliveryID != req.DeliveryID {
			t.Fatalf("setup: forger's delivery %s, victim's %s", own.DeliveryID, req.DeliveryID)
		}
		if f := forger.reply(req.CallID, own.DeliveryID, `{"forged":true}`); f.Err == nil || f.Err.Code != wire.ErrCallGone {
			t.Fatalf("reply quoting the victim's call on the forger's delivery: %v", f.Err)
		}
		if !forger.replyTo(own, `{}`) {
			t.Fatal("the forger's own reply was not routed")
		}
		c2.consume(c2.result().DeliveryID)

		// The real service quoting a delivery it was never issued, then
		// its real delivery with the wrong call id.
		f = svc.reply(req.CallID, req.DeliveryID+10, `{}`)
		wantErr(t, "reply quoting a never-issued delivery", f.Err, wire.ErrOwnerInvalid, wire.NotDispatched)
		if f := svc.reply(req.CallID+1, req.DeliveryID, `{}`); f.Err == nil || f.Err.Code != wire.ErrCallGone {
			t.Fatalf("reply with the right delivery and the wrong call id: %v", f.Err)
		}

		// None of that touched the call: the real reply is routed, once.
		if !svc.replyTo(req, `{"real":true}`) {
			t.Fatal("the real reply was not routed")
		}
		res := c.result()
		if res.CallID != 1 || res.Responder != svc.ident || string(res.Outcome) != `{"real":true}` {
			t.Fatalf("result %+v", res)
		}
		c.consume(res.DeliveryID)
		svc.consume(req.DeliveryID)
		forger.consume(own.DeliveryID)
		drained(t, h)
		for _, f := range c.held {
			if f.Op == wire.OpRPCResult {
				t.Fatalf("caller received a second result: %s", f)
			}
		}
	})
}

// On a launcher-bound transport the caller and responder identities are the
// router's, whatever the bodies say.
func TestIdentityIsTheRoutersNotTheBodys(t *testing.T) {
	cfg := router.Config{Policy: router.ClosedPolicy().
		Client("ident-svc", router.AllGrants()).
		Client("ident-caller", router.AllGrants())}
	forEachTransport(t, cfg, func(t *testing.T, h *harness) {
		svc := newBoundPeer(t, h, "ident-svc")
		svc.register("ident.svc", 4, 4)
		c := newBoundPeer(t, h, "ident-caller")

		// Naming someone else inside the payload changes nothing.
		payload := `{"caller":{"clientId":"ident-svc","clientIncarnation":"inc-ident-svc"},"clientId":"admin"}`
		c.ok(wire.OpRPCCall, callBody(1, "ident.svc", payload))
		req := svc.request()
		if req.Caller != c.ident {
			t.Fatalf("request caller %+v, want the authenticated %+v", req.Caller, c.ident)
		}
		if string(req.Payload) != payload {
			t.Fatalf("payload altered: %s", req.Payload)
		}

		// A caller field in the call body is not part of rpc.call.
		msg := c.sendJSON("rpc.call", `{"callId":"call-2","target":"ident.svc","expectedIncarnation":null,`+
			`"method":"M","payload":{},"caller":{"clientId":"ident-svc","clientIncarnation":"inc-ident-svc"}}`)
		wantErr(t, "rpc.call with a caller field", c.await(msg).Err, wire.ErrInvalidEnvelope, wire.NotDispatched)
		// Nor is a responder field part of rpc.reply.
		msg = svc.sendJSON("rpc.reply", `{"callId":"call-1","requestDeliveryId":"`+req.DeliveryID.String()+
			`","outcome":{},"responder":{"clientId":"ident-caller","clientIncarnation":"inc-ident-caller"}}`)
		wantErr(t, "rpc.reply with a responder field", svc.await(msg).Err, wire.ErrInvalidEnvelope, wire.NotDispatched)
		if s := h.r.Stats(); s.CallsTotal != 1 {
			t.Fatalf("a refused body created a call: %+v", s)
		}

		if !svc.replyTo(req, `{"responder":{"clientId":"ident-caller","clientIncarnation":"x"}}`) {
			t.Fatal("reply not routed")
		}
		if res := c.result(); res.Responder != svc.ident {
			t.Fatalf("result responder %+v, want the authenticated %+v", res.Responder, svc.ident)
		}
	})
}

// delivery.consumed takes 1..64 ids, is all or nothing against never-issued
// ids, and counts only roots it newly released.
func TestDeliveryConsumedBatches(t *testing.T) {
	l := wire.DefaultLimits()
	l.MaxServiceQueued, l.MaxServiceInFlight = 64, 64
	forEachTransport(t, router.Config{Policy: router.OpenPolicy(), Limits: l}, func(t *testing.T, h *harness) {
		svc, c, _ := servicePeers(t, h, "batch.svc", 64, 64)
		reqs := make([]*wire.Request, 64)
		ids := make([]wire.DeliveryID, 64)
		for i := range 64 {
			c.callOK(uint64(i+1), "batch.svc")
		}
		for i := range 64 {
			reqs[i] = svc.request()
			ids[i] = reqs[i].DeliveryID
		}
		base := h.r.Stats().Owners

		consumeErr := func(what string, want wire.ErrorCode, ids ...wire.DeliveryID) {
			t.Helper()
			wantErr(t, what, svc.refused(wire.OpDeliveryConsumed, &wire.Consumed{DeliveryIDs: ids}), want, wire.NotDispatched)
		}
		consumeErr("an empty batch", wire.ErrInvalidEnvelope)
		consumeErr("65 ids", wire.ErrInvalidEnvelope, append(append([]wire.DeliveryID(nil), ids...), ids[0])...)
		consumeErr("a batch with a never-issued id", wire.ErrOwnerInvalid, ids[0], ids[1], ids[63]+1000)
		consumeErr("a batch with dlv-0", wire.ErrOwnerInvalid, ids[0], 0)
		if s := h.r.Stats(); s.Owners != base {
			t.Fatalf("refused batches released roots: owners %d, want %d", s.Owners, base)
		}
		// A root counts once, however often it is named.
		if n := svc.consume(ids[0], ids[0], ids[1]); n != 2 {
			t.Fatalf("released %d, want 2", n)
		}
		if n := svc.consume(ids[0]); n != 0 {
			t.Fatalf("repeat released %d, want 0", n)
		}
		if n := svc.consume(ids...); n != 62 {
			t.Fatalf("full batch released %d, want 62", n)
		}
		// Consumption did not take the reply capabilities.
		if s := h.r.Stats(); s.Owners != 64 || s.ReplyCapabilities != 64 {
			t.Fatalf("after consuming every request: %+v", s)
		}
		results := make([]wire.DeliveryID, 0, 64)
		for _, r := range reqs {
			if !svc.replyTo(r, `{}`) {
				t.Fatalf("reply to %s not routed", r.CallID)
			}
		}
		for range 64 {
			results = append(results, c.result().DeliveryID)
		}
		if n := c.consume(results...); n != 64 {
			t.Fatalf("caller released %d results, want 64", n)
		}
		drained(t, h)
	})
}

// A service's in-flight credit comes back when a request is consumed, not
// when it is answered; queued calls then dispatch in order.
func TestConsumptionReturnsCredits(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		svc, c, _ := servicePeers(t, h, "credit.svc", 4, 1)
		for n := uint64(1); n <= 3; n++ {
			c.callOK(n, "credit.svc")
		}
		r1 := svc.request()
		settle(t, h, "two calls waiting in the service queue", func(s router.Stats) bool { return s.Queued == 2 })
		svc.replyTo(r1, `{}`)
		c.consume(c.result().DeliveryID)
		if s := h.r.Stats(); s.Queued != 2 {
			t.Fatalf("a reply returned the credit: %+v", s)
		}
		if n := svc.consume(r1.DeliveryID); n != 1 {
			t.Fatalf("released %d", n)
		}
		r2 := svc.request()
		if r2.CallID != 2 {
			t.Fatalf("dispatched %s after call-1, want call-2", r2.CallID)
		}
		svc.consume(r2.DeliveryID)
		r3 := svc.request()
		if r3.CallID != 3 {
			t.Fatalf("dispatched %s after call-2, want call-3", r3.CallID)
		}
		svc.replyTo(r2, `{}`)
		svc.replyTo(r3, `{}`)
		c.consume(c.result().DeliveryID, c.result().DeliveryID)
		svc.consume(r3.DeliveryID)
		drained(t, h)
	})
}

// rpc.responder.release gives up reply authority once; the final release of
// an attached call fails it, CALL_GONE while the route lives and NO_SERVICE
// after it is gone, both dispatched.
func TestResponderRelease(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		svc, c, _ := servicePeers(t, h, "rel.svc", 4, 4)

		c.callOK(1, "rel.svc")
		r1 := svc.request()
		if n := svc.releaseResponder(r1.CallID, r1.DeliveryID); n != 1 {
			t.Fatalf("first release released %d", n)
		}
		cf := c.callFailed()
		wantErr(t, "call-1 after its responder was released", cf.Err(), wire.ErrCallGone, wire.Dispatched)
		if cf.CallID != 1 {
			t.Fatalf("call.failed for %s", cf.CallID)
		}
		if n := svc.releaseResponder(r1.CallID, r1.DeliveryID); n != 0 {
			t.Fatalf("repeat release released %d", n)
		}
		if f := svc.reply(r1.CallID, r1.DeliveryID, `{}`); f.Err == nil || f.Err.Code != wire.ErrCallGone {
			t.Fatalf("reply after release: %v", f.Err)
		}
		// Releasing does not consume the request.
		if n := svc.consume(r1.DeliveryID); n != 1 {
			t.Fatalf("request consumption after release released %d", n)
		}

		// The wrong call id releases nothing; a never-issued delivery is
		// refused.
		c.callOK(2, "rel.svc")
		r2 := svc.request()
		if n := svc.releaseResponder(r2.CallID+5, r2.DeliveryID); n != 0 {
			t.Fatalf("release with the wrong call id released %d", n)
		}
		wantErr(t, "release of a never-issued delivery",
			svc.refused(wire.OpRPCResponderRelease, &wire.ResponderRelease{ReplyCapability: wire.ReplyCapability{CallID: r2.CallID, RequestDeliveryID: r2.DeliveryID + 100}}),
			wire.ErrOwnerInvalid, wire.NotDispatched)
		// Neither took the capability: the reply is routed.
		svc.finishCall(c, r2)

		// After the service unregisters, the final release reports the
		// lost route.
		c.callOK(3, "rel.svc")
		r3 := svc.request()
		svc.ok(wire.OpServiceUnregister, &wire.Unregister{Name: "rel.svc", ServiceIncarnation: r3.ServiceIncarnation})
		c.notice(wire.OpRouteRemoved)
		if n := svc.releaseResponder(r3.CallID, r3.DeliveryID); n != 1 {
			t.Fatalf("release after unregister released %d", n)
		}
		wantErr(t, "call-3 released after unregister", c.callFailed().Err(), wire.ErrNoService, wire.Dispatched)
		svc.consume(r3.DeliveryID)
		drained(t, h)
	})
}

// Router envelope ids increase in the order frames are written, even when
// replies, notices, requests and results for one connection interleave.
// The peer checks every frame it reads; this test makes the mix dense: one
// client calls its own service and a second client's calls, answers half of
// the requests and releases the other half, all pipelined.
func TestRouterIDsFollowWriteOrder(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		p := newPeer(t, h, "lanes")
		p.register("lanes.svc", 16, 16)
		helper := h.dial("lanes-helper")
		const helperCalls, selfCalls = 30, 40
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range helperCalls {
				res, err := helper.CallAndWait(ctx, "lanes.svc", "Lanes.Helper", nil)
				if err != nil {
					var be *wire.BusError
					if !errors.As(err, &be) || be.Code != wire.ErrCallGone {
						t.Errorf("helper call: %v", err)
						return
					}
					continue
				}
				res.Close()
			}
		}()

		var issued, terminal, requests, outstanding int
		answer := 0
		for terminal < selfCalls || requests < helperCalls+selfCalls || outstanding > 0 {
			if issued < selfCalls && issued-terminal < 6 {
				issued++
				p.command(wire.OpRPCCall, callBody(uint64(issued), "lanes.svc", "{}"))
				outstanding++
			}
			f := p.read()
			switch {
			case f.Kind == wire.KindReply:
				outstanding--
				if f.Err != nil {
					t.Fatalf("%s refused: %v", f, f.Err)
				}
			case f.Op == wire.OpRPCRequest:
				requests++
				r := f.Body.(*wire.Request)
				if answer++; answer%2 == 0 {
					p.command(wire.OpRPCReply, &wire.Reply{ReplyCapability: r.ReplyCapability(), Outcome: wire.RawJSON(`{}`)})
				} else {
					p.command(wire.OpRPCResponderRelease, &wire.ResponderRelease{ReplyCapability: r.ReplyCapability()})
				}
				p.command(wire.OpDeliveryConsumed, &wire.Consumed{DeliveryIDs: []wire.DeliveryID{r.DeliveryID}})
				outstanding += 2
			case f.Op == wire.OpRPCResult:
				terminal++
				p.command(wire.OpDeliveryConsumed, &wire.Consumed{DeliveryIDs: []wire.DeliveryID{f.Body.(*wire.Result).DeliveryID}})
				outstanding++
			case f.Op == wire.OpCallFailed:
				terminal++
			default:
				t.Fatalf("unexpected %s", f)
			}
		}
		wg.Wait()
		kinds := map[string]int{}
		for _, f := range p.seen {
			kinds[f.Kind.String()+" "+f.Op.String()]++
		}
		for _, k := range []string{"reply rpc.call", "reply rpc.reply", "notice call.failed", "delivery rpc.request", "delivery rpc.result"} {
			if kinds[k] == 0 {
				t.Fatalf("no %s in the mix %v", k, kinds)
			}
		}
		drained(t, h)
	})
}
