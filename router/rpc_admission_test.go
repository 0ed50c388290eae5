package router_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// A call id must increase per client; a syntactically valid id advances the
// watermark even when admission refuses it, and gaps are fine.
func TestCallIDWatermark(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		svc, c, inc := servicePeers(t, h, "wm.svc", 8, 8)
		c.callOK(5, "wm.svc")
		admitted := h.r.Stats().CallsTotal

		for _, n := range []uint64{5, 4, 0} {
			wantErr(t, fmt.Sprintf("call-%d after call-5", n), c.callErr(n, "wm.svc"), wire.ErrInvalidEnvelope, wire.NotDispatched)
		}
		// Refused for a missing route, then for a stale pin: each id is
		// spent all the same.
		wantErr(t, "call-7 to a missing service", c.callErr(7, "wm.nobody"), wire.ErrNoService, wire.NotDispatched)
		wantErr(t, "call-7 reused after NO_SERVICE", c.callErr(7, "wm.svc"), wire.ErrInvalidEnvelope, wire.NotDispatched)
		stale := callBody(8, "wm.svc", "{}")
		stale.ExpectedIncarnation = wire.Some(inc + 1)
		wantErr(t, "call-8 with a stale pin", c.refused(wire.OpRPCCall, stale), wire.ErrTargetChanged, wire.NotDispatched)
		wantErr(t, "call-8 reused after TARGET_CHANGED", c.callErr(8, "wm.svc"), wire.ErrInvalidEnvelope, wire.NotDispatched)
		if s := h.r.Stats(); s.CallsTotal != admitted || s.ActiveCalls != 1 {
			t.Fatalf("refused call ids created calls: %+v", s)
		}

		// Ids need not be contiguous, and the watermark is per client.
		c.callOK(1000, "wm.svc")
		other := newPeer(t, h, "wm-other")
		other.callOK(5, "wm.svc")
		var got []string
		for range 3 {
			r := svc.request()
			got = append(got, r.Caller.ClientID+"/"+r.CallID.String())
		}
		want := []string{"wm-caller/call-5", "wm-caller/call-1000", "wm-other/call-5"}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("service saw %v, want %v", got, want)
		}
		if s := h.r.Stats(); s.CallsTotal != admitted+2 || s.Queued != 0 {
			t.Fatalf("after three admitted calls: %+v", s)
		}
	})
}

// Admission sizes the delivery it would build, with the router-added ids at
// their longest: a call or reply whose own envelope fits can still be
// refused because its delivery would not.
func TestDeliverySizeIsCheckedAtAdmission(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		svc, c, inc := servicePeers(t, h, "size.svc", 4, 4)
		pad := func(n int) string { return `{"p":"` + strings.Repeat("x", n) + `"}` }
		longest := uint64(math.MaxUint64)
		envLen := func(h wire.Header, body wire.Body) int { return len(wire.AppendEnvelope(nil, h, body, nil)) }
		reqLen := func(call uint64, n int) int {
			return envLen(wire.Header{ID: longest, Kind: wire.KindDelivery, Op: wire.OpRPCRequest},
				&wire.Request{DeliveryID: wire.DeliveryID(longest), CallID: wire.CallID(call), Caller: c.ident,
					Target: "size.svc", ServiceIncarnation: inc, Method: "Test.Method", Payload: wire.RawJSON(pad(n))})
		}
		resLen := func(call uint64, n int) int {
			return envLen(wire.Header{ID: longest, Kind: wire.KindDelivery, Op: wire.OpRPCResult},
				&wire.Result{DeliveryID: wire.DeliveryID(longest), CallID: wire.CallID(call), Responder: svc.ident,
					ServiceIncarnation: inc, Outcome: wire.RawJSON(pad(n))})
		}

		// One byte over for the delivery, while the inbound call fits.
		over := callBody(2, "size.svc", pad(wire.MaxEnvelopeBytes-reqLen(2, 0)+1))
		if n := envLen(wire.Header{ID: c.id + 1, Kind: wire.KindCommand, Op: wire.OpRPCCall}, over); n > wire.MaxEnvelopeBytes {
			t.Fatalf("setup: the inbound call is %d bytes", n)
		}
		wantErr(t, "call whose request delivery would be 65,537 bytes", c.refused(wire.OpRPCCall, over), wire.ErrInvalidEnvelope, wire.NotDispatched)
		if s := h.r.Stats(); s.CallsTotal != 0 || s.Queued != 0 {
			t.Fatalf("the refused call left state: %+v", s)
		}
		// Exactly at the limit: admitted and delivered.
		fit := wire.MaxEnvelopeBytes - reqLen(3, 0)
		c.ok(wire.OpRPCCall, callBody(3, "size.svc", pad(fit)))
		f := svc.delivery(wire.OpRPCRequest)
		req := f.Body.(*wire.Request)
		if len(req.Payload) != len(pad(fit)) || f.Len > wire.MaxEnvelopeBytes {
			t.Fatalf("delivered payload %d bytes in a %d-byte envelope", len(req.Payload), f.Len)
		}

		// The same rule for the result a reply would produce. A refused
		// reply keeps the capability, so a fitting one is then routed.
		overR := &wire.Reply{ReplyCapability: wire.ReplyCapability{CallID: 3, RequestDeliveryID: req.DeliveryID}, Outcome: wire.RawJSON(pad(wire.MaxEnvelopeBytes - resLen(3, 0) + 1))}
		if n := envLen(wire.Header{ID: svc.id + 1, Kind: wire.KindCommand, Op: wire.OpRPCReply}, overR); n > wire.MaxEnvelopeBytes {
			t.Fatalf("setup: the inbound reply is %d bytes", n)
		}
		wantErr(t, "reply whose result delivery would be 65,537 bytes", svc.refused(wire.OpRPCReply, overR), wire.ErrInvalidEnvelope, wire.NotDispatched)
		fitR := wire.MaxEnvelopeBytes - resLen(3, 0)
		if !svc.replyTo(req, pad(fitR)) {
			t.Fatal("the fitting reply was not routed")
		}
		res := c.result()
		if len(res.Outcome) != len(pad(fitR)) {
			t.Fatalf("delivered outcome %d bytes", len(res.Outcome))
		}
		c.consume(res.DeliveryID)
		svc.consume(req.DeliveryID)
		drained(t, h)
	})
}

// maxActiveCallsPerClient bounds the calls a client still awaits; a slot
// frees when the result is consumed, the call is cancelled or it fails.
func TestActiveCallLimit(t *testing.T) {
	l := wire.DefaultLimits()
	l.MaxActiveCallsPerClient = 2
	forEachTransport(t, router.Config{Policy: router.OpenPolicy(), Limits: l}, func(t *testing.T, h *harness) {
		svc, c, _ := servicePeers(t, h, "act.svc", 8, 1)
		full := func(n uint64) {
			t.Helper()
			wantErr(t, fmt.Sprintf("call-%d over the limit", n), c.callErr(n, "act.svc"), wire.ErrBackpressure, wire.NotDispatched)
		}

		c.callOK(1, "act.svc") // dispatched
		c.callOK(2, "act.svc") // queued
		full(3)
		r1 := svc.request()

		// Cancelling a queued call frees its slot.
		if st := c.cancel(2); st != wire.CancelledBeforeDispatch {
			t.Fatalf("cancel call-2: %s", st)
		}
		c.callOK(4, "act.svc")
		full(5)

		// A delivered but unconsumed result still holds its slot.
		svc.replyTo(r1, `{}`)
		res := c.result()
		full(6)
		c.consume(res.DeliveryID)
		c.callOK(7, "act.svc")
		full(8)

		// Cancelling a dispatched call detaches it and frees the slot.
		svc.consume(r1.DeliveryID)
		r4 := svc.request()
		if r4.CallID != 4 {
			t.Fatalf("dispatched %s, want call-4", r4.CallID)
		}
		if st := c.cancel(4); st != wire.ExecutionUnknown {
			t.Fatalf("cancel call-4: %s", st)
		}
		c.callOK(9, "act.svc")
		full(10)

		// A call that fails frees its slot too.
		svc.consume(r4.DeliveryID)
		if routed := svc.replyTo(r4, `{}`); routed {
			t.Fatal("reply to the detached call-4 was routed")
		}
		r7 := svc.request()
		svc.releaseResponder(r7.CallID, r7.DeliveryID)
		wantErr(t, "call-7", c.callFailed().Err(), wire.ErrCallGone, wire.Dispatched)
		c.callOK(11, "act.svc")
		if s := h.r.Stats(); s.ActiveCalls != 2 || s.CallsTotal != 6 {
			t.Fatalf("stats %+v: want 2 active of 6 admitted", s)
		}
	})
}

// An idle service with free in-flight credits admits calls whatever its
// writer's timing: a call that can be dispatched at once is not waiting in
// the service queue. With maxQueued 1 and maxInFlight 4, four calls sent
// back to back must all be admitted, every time.
func TestFreeCreditsAdmitPipelinedCalls(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		svc, c, _ := servicePeers(t, h, "cq.svc", 1, 4)
		n := uint64(0)
		for round := range 10 {
			var msgs []uint64
			for range 4 {
				n++
				msgs = append(msgs, c.command(wire.OpRPCCall, callBody(n, "cq.svc", "{}")))
			}
			for _, m := range msgs {
				if f := c.await(m); f.Err != nil {
					t.Fatalf("round %d: a call was refused (%v) while the idle service had free in-flight credits: "+
						"admission counts calls the writer has not pulled yet as queued", round, f.Err)
				}
			}
			for range 4 {
				req := svc.request()
				svc.replyTo(req, `{}`)
				svc.consume(req.DeliveryID)
			}
			for range 4 {
				c.consume(c.result().DeliveryID)
			}
			drained(t, h)
		}
	})
}

// A reply is admitted only when the caller has owner room for its result
// (maxOwnersPerClient counts deliveries handed out and not consumed).
// Results queued for a caller whose writer is stalled must count too, or a
// caller can be handed more result deliveries than its budget.
func TestResultsRespectCallerOwnerBudget(t *testing.T) {
	l := wire.DefaultLimits()
	l.MaxOwnersPerClient, l.ReservedOwnersPerClient = 16, 4
	l.MaxServiceQueued = 64
	const calls = 24
	big := `{"p":"` + strings.Repeat("x", 60000) + `"}`
	forEachTransport(t, router.Config{Policy: router.OpenPolicy(), Limits: l}, func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		svcClient := h.dial("budget-svc")
		svc := mustRegister(t, ctx, svcClient, "budget.svc", client.Queued(32), client.InFlight(16))
		c := newPeer(t, h, "budget-caller")
		// Pipeline every call and read nothing yet: the router's writer
		// for the caller stalls on the first frames it cannot write.
		for n := uint64(1); n <= calls; n++ {
			c.command(wire.OpRPCCall, callBody(n, "budget.svc", "{}"))
		}
		var routed, refused int
		for range calls {
			req := nextRequest(t, ctx, svc)
			if ok, err := req.Reply(ctx, wire.RawJSON(big)); err != nil {
				if code(t, err) != wire.ErrQuotaExceeded {
					t.Fatalf("reply refused with %v", err)
				}
				refused++
			} else if ok {
				routed++
			}
			req.Close()
		}
		// Now read: every call gets its admission reply and one terminal
		// frame, a result or (for a refused reply) call.failed.
		var results, failed int
		for i := 0; i < calls; {
			f := c.read()
			switch {
			case f.Kind == wire.KindReply:
				if f.Err != nil {
					t.Fatalf("call refused: %v", f.Err)
				}
			case f.Op == wire.OpRPCResult:
				results++
				i++
			case f.Op == wire.OpCallFailed:
				failed++
				i++
			}
		}
		t.Logf("replies routed %d, refused %d; caller got %d results, %d failures", routed, refused, results, failed)
		if results > l.MaxOwnersPerClient {
			t.Fatalf("the caller holds %d unconsumed result deliveries, over maxOwnersPerClient %d: "+
				"rpc.reply admission ignores results queued but not yet written", results, l.MaxOwnersPerClient)
		}
	})
}

// Admission validates every attachment's owner (docs/protocol.md, Owners). Until the
// artifact store backs RPC attachments, an attachment naming an owner the
// sender was never issued must be refused, not admitted and dropped.
func TestCallAndReplyAttachmentsAreValidated(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		svc, c, _ := servicePeers(t, h, "att.svc", 4, 4)
		att := []wire.Attachment{{Name: "frame", OwnerID: wire.HoldOwner(1), Ref: wire.ArtifactRef{
			StoreID: h.r.StoreID(), ArtifactID: 1, Generation: 1, ByteLength: 1228800, ContentType: "image/x-rgba"}}}

		f := c.await(c.commandWith(wire.OpRPCCall, callBody(1, "att.svc", "{}"), att))
		if f.Err == nil {
			t.Errorf("rpc.call naming never-issued owner own-1 was admitted; its attachment is dropped silently")
		} else if f.Err.Dispatch != wire.NotDispatched {
			t.Errorf("refusal %v is not not-dispatched", f.Err)
		}

		c.callOK(2, "att.svc")
		req := svc.request()
		f = svc.await(svc.commandWith(wire.OpRPCReply, &wire.Reply{ReplyCapability: req.ReplyCapability(), Outcome: wire.RawJSON(`{}`)}, att))
		if f.Err == nil {
			t.Errorf("rpc.reply naming never-issued owner own-1 was admitted (routed=%v); its attachment is dropped silently",
				f.Body.(*wire.Routed).Routed)
		}
	})
}
