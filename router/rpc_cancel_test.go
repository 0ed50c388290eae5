package router_test

import (
	"testing"

	"github.com/flybus/flybus/wire"
)

// Every cancel state, in both orders with the consumption it races.
func TestCancelOrderings(t *testing.T) {
	cases := map[string]func(t *testing.T, h *harness, svc, c *peer){
		"CancelBeforeResultConsumed": func(t *testing.T, h *harness, svc, c *peer) {
			c.callOK(1, "cx.svc")
			req := svc.request()
			svc.replyTo(req, `{}`)
			// The result is admitted; whether or not it has been read yet,
			// the call is complete.
			if st := c.cancel(1); st != wire.Completed {
				t.Fatalf("cancel after the reply: %s", st)
			}
			if n := c.consume(c.result().DeliveryID); n != 1 {
				t.Fatalf("result released %d", n)
			}
			if st := c.cancel(1); st != wire.CallGoneState {
				t.Fatalf("cancel after consumption: %s", st)
			}
			svc.consume(req.DeliveryID)
		},
		"CancelAfterResultConsumed": func(t *testing.T, h *harness, svc, c *peer) {
			c.callOK(1, "cx.svc")
			req := svc.request()
			svc.consume(req.DeliveryID)
			svc.replyTo(req, `{}`)
			c.consume(c.result().DeliveryID)
			if st := c.cancel(1); st != wire.CallGoneState {
				t.Fatalf("cancel after consumption: %s", st)
			}
		},
		"CancelDispatchedThenRequestConsumed": func(t *testing.T, h *harness, svc, c *peer) {
			c.callOK(1, "cx.svc")
			req := svc.request()
			if st := c.cancel(1); st != wire.ExecutionUnknown {
				t.Fatalf("cancel of a dispatched call: %s", st)
			}
			if n := svc.consume(req.DeliveryID); n != 1 {
				t.Fatalf("request released %d", n)
			}
			if svc.replyTo(req, `{}`) {
				t.Fatal("reply to a cancelled call was routed")
			}
			if st := c.cancel(1); st != wire.CallGoneState {
				t.Fatalf("second cancel: %s", st)
			}
		},
		"RequestConsumedThenCancel": func(t *testing.T, h *harness, svc, c *peer) {
			c.callOK(1, "cx.svc")
			req := svc.request()
			svc.consume(req.DeliveryID)
			if st := c.cancel(1); st != wire.ExecutionUnknown {
				t.Fatalf("cancel after the request was consumed: %s", st)
			}
			if svc.replyTo(req, `{}`) {
				t.Fatal("reply to a cancelled call was routed")
			}
		},
		"CancelDispatchedThenResponderReleased": func(t *testing.T, h *harness, svc, c *peer) {
			c.callOK(1, "cx.svc")
			req := svc.request()
			if st := c.cancel(1); st != wire.ExecutionUnknown {
				t.Fatalf("cancel of a dispatched call: %s", st)
			}
			svc.consume(req.DeliveryID)
			if n := svc.releaseResponder(req.CallID, req.DeliveryID); n != 1 {
				t.Fatalf("release released %d", n)
			}
			c.quiet(wire.OpCallFailed) // a detached call has nobody to fail
		},
		"CancelQueued": func(t *testing.T, h *harness, svc, c *peer) {
			c.callOK(1, "cx.svc")
			c.callOK(2, "cx.svc")
			req := svc.request()
			if st := c.cancel(2); st != wire.CancelledBeforeDispatch {
				t.Fatalf("cancel of a queued call: %s", st)
			}
			if st := c.cancel(2); st != wire.CallGoneState {
				t.Fatalf("second cancel: %s", st)
			}
			c.callOK(3, "cx.svc")
			svc.replyTo(req, `{}`)
			svc.consume(req.DeliveryID)
			// call-2 never reaches the service: call-3 is next.
			r3 := svc.request()
			if r3.CallID != 3 {
				t.Fatalf("dispatched %s, want call-3", r3.CallID)
			}
			svc.replyTo(r3, `{}`)
			svc.consume(r3.DeliveryID)
			c.consume(c.result().DeliveryID, c.result().DeliveryID)
		},
	}
	for name, fn := range cases {
		t.Run(name, func(t *testing.T) {
			forEachTransport(t, open(), func(t *testing.T, h *harness) {
				svc, c, _ := servicePeers(t, h, "cx.svc", 4, 1)
				fn(t, h, svc, c)
				drained(t, h)
			})
		})
	}
}

// A reply and a cancel racing for one dispatched call end in exactly one of
// the two consistent outcomes: routed and completed (the result arrives), or
// not routed and execution-unknown (no result, no root).
func TestCancelRacingReply(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		svc, c, _ := servicePeers(t, h, "race.svc", 4, 4)
		var routedN, detachedN int
		for i := range 40 {
			n := uint64(i + 1)
			c.callOK(n, "race.svc")
			req := svc.request()
			// Send both before reading either reply, in alternating order.
			var replyMsg, cancelMsg uint64
			if i%2 == 0 {
				replyMsg = svc.command(wire.OpRPCReply, &wire.Reply{ReplyCapability: req.ReplyCapability(), Outcome: wire.RawJSON(`{}`)})
				cancelMsg = c.command(wire.OpRPCCancel, &wire.Cancel{CallID: wire.CallID(n)})
			} else {
				cancelMsg = c.command(wire.OpRPCCancel, &wire.Cancel{CallID: wire.CallID(n)})
				replyMsg = svc.command(wire.OpRPCReply, &wire.Reply{ReplyCapability: req.ReplyCapability(), Outcome: wire.RawJSON(`{}`)})
			}
			rf, cf := svc.await(replyMsg), c.await(cancelMsg)
			if rf.Err != nil || cf.Err != nil {
				t.Fatalf("iteration %d: reply %v, cancel %v", i, rf.Err, cf.Err)
			}
			routed, state := rf.Body.(*wire.Routed).Routed, cf.Body.(*wire.CancelOK).State
			switch {
			case routed && state == wire.Completed:
				routedN++
				if res := c.result(); res.CallID != wire.CallID(n) {
					t.Fatalf("iteration %d: result for %s", i, res.CallID)
				} else {
					c.consume(res.DeliveryID)
				}
			case !routed && state == wire.ExecutionUnknown:
				detachedN++
			default:
				t.Fatalf("iteration %d: routed=%v with cancel state %s", i, routed, state)
			}
			svc.consume(req.DeliveryID)
			drained(t, h)
		}
		t.Logf("reply first %d times, cancel first %d times", routedN, detachedN)
	})
}
