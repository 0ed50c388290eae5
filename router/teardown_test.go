package router_test

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// Teardown: whichever way a connection ends, the router releases what it
// held (services, calls, roots, capabilities) and its goroutines and
// descriptors; forEachTransport checks the last two after every test.

// A client that sends half a frame and then closes is torn down like any
// other: its services' calls fail, its own calls detach.
func TestTeardownAfterHalfAFrame(t *testing.T) {
	cases := map[string]func(frame []byte) []byte{
		"InsideTheLengthPrefix": func(f []byte) []byte { return f[:2] },
		"InsideTheBody":         func(f []byte) []byte { return f[:len(f)/2] },
	}
	for name, cut := range cases {
		t.Run(name, func(t *testing.T) {
			forEachTransport(t, open(), func(t *testing.T, h *harness) {
				ctx := ctxT(t)
				caller := h.dial("half-caller")
				other := mustRegister(t, ctx, caller, "half.other")
				torn := newPeer(t, h, "half-torn")
				torn.register("half.svc", 4, 1)
				dispatched := mustCall(t, ctx, caller, "half.svc", 0, "M", nil)
				queued := mustCall(t, ctx, caller, "half.svc", 0, "M", nil)
				req := torn.request()
				torn.callOK(1, "half.other")
				inbound := nextRequest(t, ctx, other)

				frame, err := wire.AppendFrame(nil, wire.Header{ID: torn.id + 1, Kind: wire.KindCommand, Op: wire.OpRPCReply},
					&wire.Reply{ReplyCapability: req.ReplyCapability(), Outcome: wire.RawJSON(`{"never":"finished"}`)}, nil)
				if err != nil {
					t.Fatal(err)
				}
				torn.sendBytes(cut(frame))
				torn.nc.Close()

				wantResultErr(t, ctx, "dispatched call", dispatched, wire.ErrNoService, wire.Dispatched)
				wantResultErr(t, ctx, "queued call", queued, wire.ErrNoService, wire.NotDispatched)
				// The torn client's own call detached: its request stays
				// valid and the reply goes nowhere.
				if routed, err := inbound.Reply(ctx, nil); err != nil || routed {
					t.Fatalf("reply to the departed caller: routed=%v %v", routed, err)
				}
				inbound.Close()
				settle(t, h, "the torn connection to go", func(s router.Stats) bool {
					return s.Connections == 1 && s.Services == 1
				})
				drained(t, h)
			})
		})
	}
}

// stalledService registers name, with room for 16 requests, on a raw peer
// that never reads and dials a caller; big is a payload a few requests of
// which fill the peer's socket.
func stalledService(t *testing.T, h *harness, callerID, svcID, name string) (caller *client.Client, s *peer, big wire.RawJSON) {
	t.Helper()
	caller = h.dial(callerID)
	s = newPeer(t, h, svcID)
	s.register(name, 16, 16)
	return caller, s, wire.RawJSON(`{"p":"` + strings.Repeat("x", 60000) + `"}`)
}

// A client that stops reading while the router has a large backlog for it
// (requests the writer is stuck on, more queued behind them, replies on the
// control lane) and then closes: the stuck write ends and everything goes.
func TestTeardownOfAStalledReader(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		caller, s, big := stalledService(t, h, "stall-caller", "stall-svc", "stall.svc")
		var calls []*client.PendingCall
		for range 16 {
			p := mustCall(t, ctx, caller, "stall.svc", 0, "M", big)
			calls = append(calls, p)
		}
		for n := uint64(1); n <= 50; n++ {
			s.command(wire.OpRPCCancel, &wire.Cancel{CallID: wire.CallID(n)})
		}
		settle(t, h, "a request the router is writing", func(st router.Stats) bool { return st.ReplyCapabilities > 0 })
		s.nc.Close()

		dispatched := 0
		for i, p := range calls {
			_, err := p.Result(ctx)
			if code(t, err) != wire.ErrNoService {
				t.Fatalf("call %d: %v", i, err)
			}
			switch dispatchOf(t, err) {
			case wire.Dispatched:
				dispatched++
			case wire.NotDispatched:
			default:
				t.Fatalf("call %d: %v", i, err)
			}
		}
		if dispatched == 0 {
			t.Fatal("no call was reported dispatched, though the router was writing requests")
		}
		settle(t, h, "the stalled connection to go", func(st router.Stats) bool {
			return st.Connections == 1 && st.Services == 0
		})
		drained(t, h)
	})
}

// Shutdown does not wait on a client that stopped reading beyond the
// router's close grace, and still releases everything.
func TestShutdownWithAStalledReader(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		caller, s, big := stalledService(t, h, "sd-caller", "sd-stalled", "sd.svc")
		for range 8 {
			if _, err := caller.Call(ctx, "sd.svc", "M", big); err != nil {
				t.Fatal(err)
			}
		}
		settle(t, h, "a request the router is writing", func(st router.Stats) bool { return st.ReplyCapabilities > 0 })
		start := time.Now()
		if err := h.r.Shutdown(ctx); err != nil {
			t.Fatalf("shutdown: %v", err)
		}
		t.Logf("shutdown took %v", time.Since(start))
		if st := h.r.Stats(); st.Connections != 0 || st.Services != 0 {
			t.Fatalf("after shutdown: %+v", st)
		}
		drained(t, h)
		// The stalled client finds its stream ended, whatever it holds.
		for {
			err := s.next()
			if err == nil {
				continue
			}
			var be *wire.BusError
			if errors.As(err, &be) {
				continue
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("the stalled client's stream did not end: %v", err)
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, net.ErrClosed) &&
				!strings.Contains(err.Error(), "connection reset") {
				t.Fatalf("the stalled client's stream ended with %v", err)
			}
			break
		}
	})
}

// Connections that never finish hello are closed at the hello timeout and
// stop counting against maxClients; one that said hello in time stays.
func TestHelloTimeoutReleasesPendingConnections(t *testing.T) {
	cfg := open()
	cfg.HelloTimeout = 300 * time.Millisecond
	forEachTransport(t, cfg, func(t *testing.T, h *harness) {
		early := newPeer(t, h, "early")
		silent := newRaw(t, h.conn(""))
		partial := newRaw(t, h.conn(""))
		partial.sendBytes(frameOf(helloJSON)[:20])

		silent.expectClosed(wire.ErrInvalidEnvelope)
		partial.expectClosed(wire.ErrInvalidEnvelope)
		settle(t, h, "the pending connections to go", func(s router.Stats) bool {
			return s.PendingHello == 0 && s.Connections == 1
		})
		// early's timer (started before the others') has fired by now and
		// changed nothing.
		early.register("early.svc", 1, 1)
		if s := h.r.Stats(); s.Services != 1 || s.Connections != 1 {
			t.Fatalf("stats %+v", s)
		}
	})
}
