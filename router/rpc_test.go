package router_test

import (
	"context"
	"errors"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

type counterArgs struct {
	Amount int `json:"amount"`
}

type counterResult struct {
	Total int `json:"total"`
}

func TestHelloReportsSession(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		c := h.dial("observer")
		info := c.Info()
		if info.RouterID != h.r.RouterID() || info.ContractDigest != wire.ContractDigestValue() {
			t.Fatalf("info %+v", info)
		}
		if info.SelectedMajor != 1 || info.SelectedMinor != wire.Minor || info.Limits != wire.DefaultLimits() {
			t.Fatalf("negotiated %d.%d limits %+v", info.SelectedMajor, info.SelectedMinor, info.Limits)
		}
		if info.ConnectionID == 0 || info.Identity.ClientID != "observer" {
			t.Fatalf("identity %+v conn %v", info.Identity, info.ConnectionID)
		}
	})
}

func TestHelloRefusals(t *testing.T) {
	cfg := router.Config{Policy: router.ClosedPolicy().Client("agent-a", router.AllGrants()).Client("agent-b", router.AllGrants())}
	forEachTransport(t, cfg, func(t *testing.T, h *harness) {
		// A launcher-bound endpoint refuses a Hello naming someone else.
		_, err := client.Connect(ctxT(t), h.conn("agent-a"), client.Config{ClientID: "agent-b"})
		if code(t, err) != wire.ErrNotAuthorized {
			t.Fatalf("bound mismatch: %v", err)
		}
		// A closed policy refuses an id it does not list, even when bound.
		_, err = client.Connect(ctxT(t), h.conn("stranger"), client.Config{ClientID: "stranger"})
		if code(t, err) != wire.ErrNotAuthorized {
			t.Fatalf("unlisted id: %v", err)
		}
		// One live connection per client id.
		a, err := client.Connect(ctxT(t), h.conn("agent-a"), client.Config{ClientID: "agent-a", ClientIncarnation: "inc-1"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = client.Connect(ctxT(t), h.conn("agent-a"), client.Config{ClientID: "agent-a", ClientIncarnation: "inc-2"})
		if code(t, err) != wire.ErrConflict {
			t.Fatalf("second live connection: %v", err)
		}
		a.Close()
		settle(t, h, "agent-a to leave", func(s router.Stats) bool { return s.Connections == 0 })
		// The last incarnation is never reused; a fresh one is fine.
		_, err = client.Connect(ctxT(t), h.conn("agent-a"), client.Config{ClientID: "agent-a", ClientIncarnation: "inc-1"})
		if code(t, err) != wire.ErrNotAuthorized {
			t.Fatalf("reused incarnation: %v", err)
		}
		a2, err := client.Connect(ctxT(t), h.conn("agent-a"), client.Config{ClientID: "agent-a", ClientIncarnation: "inc-3"})
		if err != nil {
			t.Fatal(err)
		}
		a2.Close()
	})
}

func TestUnboundTransportNeedsOpenPolicy(t *testing.T) {
	r, err := router.New(router.Config{Policy: router.ClosedPolicy().Client("agent-a", router.AllGrants())})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	if _, err := r.ConnectInMemory(); err == nil {
		t.Fatal("unbound in-memory transport accepted under a closed policy")
	}
	if _, err := r.ListenUnix(t.TempDir() + "/x.sock"); err == nil {
		t.Fatal("unbound listener accepted under a closed policy")
	}
}

// serveCounter answers counter calls until the service closes.
func serveCounter(ctx context.Context, s *client.Service) {
	total := 0
	s.Serve(ctx, func(ctx context.Context, req *client.Request) {
		var a counterArgs
		_ = req.Decode(&a)
		total += a.Amount
		_, _ = req.Reply(ctx, counterResult{Total: total})
	})
}

func TestRequestReplyRoundTrip(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		_, caller, svc := h.serviceAndCaller("counter", "example.counter")
		go serveCounter(ctx, svc)
		for i, want := range []int{2, 5} {
			res, err := caller.CallAndWait(ctx, "example.counter", "Counter.Increment", counterArgs{Amount: []int{2, 3}[i]}, client.Pin(svc.Incarnation()))
			if err != nil {
				t.Fatal(err)
			}
			var got counterResult
			if err := res.Decode(&got); err != nil || got.Total != want {
				t.Fatalf("call %d: %v %+v", i, err, got)
			}
			if res.Responder.ClientID != "counter" || res.ServiceIncarnation != svc.Incarnation() {
				t.Fatalf("result metadata %+v", res)
			}
			res.Close()
		}
		waitFor(t, "calls to retire", func() bool { s := h.r.Stats(); return s.Calls == 0 && s.Owners == 0 })
		if s := h.r.Stats(); s.CallsTotal != 2 || s.Services != 1 {
			t.Fatalf("stats %+v", s)
		}
	})
}

func TestRegistrationIsExclusiveAndPinned(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		a, b, caller := h.dial("a"), h.dial("b"), h.dial("caller")
		svc := mustRegister(t, ctx, a, "agent.fly-a")
		if _, err := b.Register(ctx, "agent.fly-a"); code(t, err) != wire.ErrConflict {
			t.Fatalf("duplicate registration: %v", err)
		}
		old := svc.Incarnation()
		svc.Close()
		settle(t, h, "unregister", func(s router.Stats) bool { return s.Services == 0 })
		svc2 := mustRegister(t, ctx, b, "agent.fly-a")
		if svc2.Incarnation() == old {
			t.Fatal("a new registration reused the incarnation")
		}
		// Pinned to the old incarnation: never routed to the replacement.
		if _, err := caller.Call(ctx, "agent.fly-a", "Agent.Prepare", nil, client.Pin(old)); code(t, err) != wire.ErrTargetChanged {
			t.Fatalf("stale pin: %v", err)
		}
		if _, err := caller.Call(ctx, "agent.nobody", "Agent.Prepare", nil); code(t, err) != wire.ErrNoService {
			t.Fatalf("missing service: %v", err)
		}
	})
}

func TestFIFODispatchWithOutOfOrderCompletion(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		_, caller, svc := h.serviceAndCaller("env", "env.step", client.Queued(8), client.InFlight(8))
		var calls []*client.PendingCall
		for i := range 4 {
			p := mustCall(t, ctx, caller, "env.step", 0, "Env.Step", counterArgs{Amount: i})
			calls = append(calls, p)
		}
		var reqs []*client.Request
		for i := range 4 {
			req := nextRequest(t, ctx, svc)
			var a counterArgs
			if err := req.Decode(&a); err != nil || a.Amount != i {
				t.Fatalf("dispatch %d carried %d: not FIFO (%v)", i, a.Amount, err)
			}
			reqs = append(reqs, req)
		}
		for i := 3; i >= 0; i-- { // answer in reverse
			if routed, err := reqs[i].Reply(ctx, counterResult{Total: i}); err != nil || !routed {
				t.Fatalf("reply %d: %v %v", i, routed, err)
			}
			reqs[i].Close()
		}
		for i, p := range calls {
			res := mustResult(t, ctx, p)
			var got counterResult
			if err := res.Decode(&got); err != nil || got.Total != i {
				t.Fatalf("call %d got %+v: %v", i, got, err)
			}
			res.Close()
		}
	})
}

func TestServiceQueueBackpressure(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		_, caller, svc := h.serviceAndCaller("slow", "slow.svc", client.Queued(2), client.InFlight(1))
		first := mustCall(t, ctx, caller, "slow.svc", 0, "M", nil)
		req, err := svc.Next(ctx) // in flight: the next two queue
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := caller.Call(ctx, "slow.svc", "M", nil); err != nil {
				t.Fatal(err)
			}
		}
		_, err = caller.Call(ctx, "slow.svc", "M", nil)
		if code(t, err) != wire.ErrBackpressure || dispatchOf(t, err) != wire.NotDispatched {
			t.Fatalf("full queue: %v", err)
		}
		// Consuming the in-flight request returns its credit: the next one
		// is dispatched.
		answerCall(t, ctx, req, first, nil)
		req2 := nextRequest(t, ctx, svc)
		req2.Close()
	})
}

// heldCalls is a service that takes one request at a time and two calls
// to it: the first dispatched, the second queued behind it.
type heldCalls struct {
	svcClient, caller  *client.Client
	svc                *client.Service
	dispatched, queued *client.PendingCall
	req                *client.Request // the dispatched call's, taken
}

// dispatchedAndQueued registers name on client "svc" (MaxQueued 4,
// MaxInFlight 1), dials a caller and makes two calls: the first is
// dispatched and its request taken, the second stays queued behind it.
func (h *harness) dispatchedAndQueued(name string) heldCalls {
	h.t.Helper()
	t, ctx := h.t, ctxT(h.t)
	var hc heldCalls
	hc.svcClient, hc.caller, hc.svc = h.serviceAndCaller("svc", name, client.Queued(4), client.InFlight(1))
	hc.dispatched = mustCall(t, ctx, hc.caller, name, 0, "M", nil)
	hc.queued = mustCall(t, ctx, hc.caller, name, 0, "M", nil)
	hc.req = nextRequest(t, ctx, hc.svc)
	return hc
}

// callTaken makes a call to target, whose service svc has a free credit,
// and takes the request it is dispatched as.
func callTaken(t *testing.T, ctx context.Context, caller *client.Client, svc *client.Service, target string) (*client.PendingCall, *client.Request) {
	t.Helper()
	p := mustCall(t, ctx, caller, target, 0, "M", nil)
	return p, nextRequest(t, ctx, svc)
}

// replyRouted answers req with outcome, which must reach its caller, and
// closes the request.
func replyRouted(t *testing.T, ctx context.Context, req *client.Request, outcome any) {
	t.Helper()
	if routed, err := req.Reply(ctx, outcome); err != nil || !routed {
		t.Fatalf("reply to %s (%s): routed=%v %v", req.CallID, req.Method, routed, err)
	}
	req.Close()
}

// answerCall answers req, the request of p, and takes and closes p's
// result: a call that leaves nothing behind.
func answerCall(t *testing.T, ctx context.Context, req *client.Request, p *client.PendingCall, outcome any) {
	t.Helper()
	replyRouted(t, ctx, req, outcome)
	mustResult(t, ctx, p).Close()
}

func TestCancelStates(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		hc := h.dispatchedAndQueued("cancel.svc")
		if st, err := hc.queued.Cancel(ctx); err != nil || st != wire.CancelledBeforeDispatch {
			t.Fatalf("queued cancel: %v %v", st, err)
		}
		wantResultErr(t, ctx, "result after cancel-before-dispatch", hc.queued, wire.ErrCallGone, wire.NotDispatched)
		if st, err := hc.dispatched.Cancel(ctx); err != nil || st != wire.ExecutionUnknown {
			t.Fatalf("dispatched cancel: %v %v", st, err)
		}
		// The detached call can still be answered; the reply goes nowhere.
		if routed, err := hc.req.Reply(ctx, nil); err != nil || routed {
			t.Fatalf("reply to detached call: routed=%v %v", routed, err)
		}
		hc.req.Close()
		// A completed call reports completed, and its result stays valid.
		done, req2 := callTaken(t, ctx, hc.caller, hc.svc, "cancel.svc")
		replyRouted(t, ctx, req2, counterResult{Total: 7})
		res := mustResult(t, ctx, done)
		if st, err := done.Cancel(ctx); err != nil || st != wire.Completed {
			t.Fatalf("completed cancel: %v %v", st, err)
		}
		res.Close()
		// Once its result is consumed the call is retired: call-gone.
		settle(t, h, "result consumption", func(s router.Stats) bool { return s.Calls == 0 })
		if st, err := done.Cancel(ctx); err != nil || st != wire.CallGoneState {
			t.Fatalf("retired cancel: %v %v", st, err)
		}
	})
}

func TestSecondReplyIsCallGone(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		_, caller, svc := h.serviceAndCaller("svc", "once.svc")
		p, req := callTaken(t, ctx, caller, svc, "once.svc")
		if routed, err := req.Reply(ctx, nil); err != nil || !routed {
			t.Fatalf("first reply: routed=%v %v", routed, err)
		}
		if _, err := req.Reply(ctx, nil); code(t, err) != wire.ErrCallGone {
			t.Fatalf("second reply: %v", err)
		}
		req.Close()
		mustResult(t, ctx, p).Close()
	})
}

func TestServiceDisconnectFailsCalls(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		hc := h.dispatchedAndQueued("gone.svc")
		hc.svcClient.Close()
		wantResultErr(t, ctx, "queued call", hc.queued, wire.ErrNoService, wire.NotDispatched)
		wantResultErr(t, ctx, "dispatched call", hc.dispatched, wire.ErrNoService, wire.Dispatched)
		waitFor(t, "state to drain", func() bool { s := h.r.Stats(); return s.Calls == 0 && s.Services == 0 })
	})
}

func TestUnregisterKeepsDispatchedCallsAnswerable(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		hc := h.dispatchedAndQueued("unreg.svc")
		hc.svc.Close()
		wantResultErr(t, ctx, "queued call", hc.queued, wire.ErrNoService, wire.NotDispatched)
		// The dispatched call is still answered.
		answerCall(t, ctx, hc.req, hc.dispatched, counterResult{Total: 1})
	})
}

func TestResponderReleaseSettlesCall(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		_, caller, svc := h.serviceAndCaller("svc", "resp.svc")
		p1, req := callTaken(t, ctx, caller, svc, "resp.svc")
		// A responder outlives its request.
		resp := req.Responder()
		req.Close()
		if routed, err := resp.Reply(ctx, counterResult{Total: 3}); err != nil || !routed {
			t.Fatalf("responder reply: %v %v", routed, err)
		}
		resp.Close()
		mustResult(t, ctx, p1).Close()
		// Dropping every capability without a reply ends the call.
		p2, req2 := callTaken(t, ctx, caller, svc, "resp.svc")
		req2.Close()
		wantResultErr(t, ctx, "released call", p2, wire.ErrCallGone, wire.Dispatched)
	})
}

func TestStatusAnsweredWhileHandlerDelayed(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		_, caller, svc := h.serviceAndCaller("agent", "agent.status")
		slow := mustCall(t, ctx, caller, "agent.status", 0, "Agent.Step", nil)
		status := mustCall(t, ctx, caller, "agent.status", 0, "Agent.Status", nil)
		stepReq := nextRequest(t, ctx, svc) // held: a long mutation
		statusReq := nextRequest(t, ctx, svc)
		if stepReq.Method != "Agent.Step" || statusReq.Method != "Agent.Status" {
			t.Fatalf("requests %s, %s", stepReq.Method, statusReq.Method)
		}
		answerCall(t, ctx, statusReq, status, nil)
		answerCall(t, ctx, stepReq, slow, nil)
	})
}

func TestPolicyGrantsAreChecked(t *testing.T) {
	g := router.Grants{Call: []router.Pattern{router.Prefix("agent.")}}
	cfg := router.Config{Policy: router.ClosedPolicy().
		Client("coordinator", g).
		Client("agent-a", router.Grants{Register: []router.Pattern{router.Exact("agent.fly-a")}})}
	forEachTransport(t, cfg, func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		coord, err := client.Connect(ctx, h.conn("coordinator"), client.Config{ClientID: "coordinator"})
		if err != nil {
			t.Fatal(err)
		}
		defer coord.Close()
		agent, err := client.Connect(ctx, h.conn("agent-a"), client.Config{ClientID: "agent-a"})
		if err != nil {
			t.Fatal(err)
		}
		defer agent.Close()
		if _, err := agent.Register(ctx, "agent.fly-b"); code(t, err) != wire.ErrNotAuthorized {
			t.Fatalf("register outside grant: %v", err)
		}
		svc := mustRegister(t, ctx, agent, "agent.fly-a")
		go serveCounter(ctx, svc)
		if _, err := agent.Call(ctx, "agent.fly-a", "M", nil); code(t, err) != wire.ErrNotAuthorized {
			t.Fatalf("call without grant: %v", err)
		}
		res, err := coord.CallAndWait(ctx, "agent.fly-a", "M", counterArgs{Amount: 1})
		if err != nil {
			t.Fatal(err)
		}
		if res.Responder.ClientID != "agent-a" {
			t.Fatalf("responder %+v", res.Responder)
		}
		res.Close()
	})
}

func TestAbandonedCallLeaksNothing(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		_, caller, svc := h.serviceAndCaller("svc", "abandon.svc")
		p, req := callTaken(t, ctx, caller, svc, "abandon.svc")
		short, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := p.Result(short); !errors.Is(err, context.Canceled) {
			t.Fatalf("expired wait: %v", err)
		}
		// Result is safe to call again after the context expired.
		answerCall(t, ctx, req, p, nil)
		// A call abandoned after dispatch: whether the cancel or the reply
		// reaches the router first, the SDK consumes any late result and
		// nothing stays owned.
		p2, req2 := callTaken(t, ctx, caller, svc, "abandon.svc")
		p2.Close()
		if _, err := req2.Reply(ctx, nil); err != nil {
			t.Fatal(err)
		}
		req2.Close()
		waitFor(t, "no owners or calls", func() bool { s := h.r.Stats(); return s.Calls == 0 && s.Owners == 0 })
	})
}

// Concurrent calls on one client reach the router in call-id order: none is
// refused as a reused or decreasing id.
func TestConcurrentCallsOnOneClient(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		_, caller, svc := h.serviceAndCaller("svc", "conc.svc")
		go serveCounter(ctx, svc)
		errs := make(chan error, 8)
		for range 8 {
			go func() {
				for range 25 {
					res, err := caller.CallAndWait(ctx, "conc.svc", "M", counterArgs{Amount: 1})
					if err != nil {
						errs <- err
						return
					}
					res.Close()
				}
				errs <- nil
			}()
		}
		for range 8 {
			if err := <-errs; err != nil {
				t.Fatalf("a concurrent call failed: %v", err)
			}
		}
	})
}

// Service.TryNext takes a request already queued without waiting, and
// nothing when none is or the service is closed; a Seal refused for a
// malformed digest leaves the writer to seal again.
func TestServiceTryNextAndSealOptions(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		svcClient, caller, svc := h.serviceAndCaller("try-svc", "try.svc", client.InFlight(2))
		if _, ok := svc.TryNext(); ok {
			t.Fatal("TryNext with no call made returned a request")
		}
		w := mustAllocate(t, ctx, caller, 16, "x/y")
		if _, err := w.Write(frameBytes(1, 16)); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Seal(ctx, client.Digest("not-a-digest")); err == nil {
			t.Fatal("a malformed digest was accepted")
		}
		a, err := w.Seal(ctx, client.NoWait())
		if err != nil {
			t.Fatal(err)
		}
		p := mustCall(t, ctx, caller, "try.svc", svc.Incarnation(), "M", nil, client.Attach("f", a))
		a.Close()
		var req *client.Request
		waitFor(t, "the request to be queued", func() bool {
			var ok bool
			req, ok = svc.TryNext()
			return ok
		})
		if req.Method != "M" {
			t.Fatalf("request %+v", req)
		}
		if _, err := req.Reply(ctx, map[string]int{"ok": 1}); err != nil {
			t.Fatal(err)
		}
		req.Close()
		res := mustResult(t, ctx, p)
		res.Close()
		p.Close()
		svc.Close()
		if _, ok := svc.TryNext(); ok {
			t.Fatal("TryNext after Close returned a request")
		}
		svcClient.Close()
	})
}
