package router_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// Transport equivalence: the same scenarios over the in-memory and the
// Unix-socket transport must behave identically. Each run writes a trace of
// behaviour only (methods, payload fields, counts, sequences, credits,
// cancel states, error codes); a trace that could hold a router-issued id
// would differ between runs for no behavioural reason, and worse, would let
// a test depend on one, so the recorder refuses them. FLYBUS_TRACE=1 logs
// both traces (visible with -v).

// trace records behaviour and refuses identity.
type trace struct {
	fail      func(format string, args ...any)
	forbidden []string // literal values that must never appear (client incarnations)
	events    []string
}

// routerIDs matches anything spelled like a router-issued id or an
// incarnation: serial families, router and store tags, SDK incarnations.
var routerIDs = regexp.MustCompile(`(^|[^a-z0-9.])(conn|svc|top|sub|dlv|own|a|bus)-[0-9]+|(router|store)-[0-9a-f]{16}|(^|[^a-z0-9.])inc-`)

// forbid adds the incarnation (and any other literal) a client was given.
func (tr *trace) forbid(c *client.Client) {
	tr.forbidden = append(tr.forbidden, c.Info().Identity.ClientIncarnation)
}

// record appends one event: a name and key/value pairs.
func (tr *trace) record(event string, kv ...any) {
	var b strings.Builder
	b.WriteString(event)
	if len(kv)%2 != 0 {
		tr.fail("trace: %s has an odd key/value list", event)
		return
	}
	for i := 0; i < len(kv); i += 2 {
		k, ok := kv[i].(string)
		if !ok {
			tr.fail("trace: %s: key %v is not a string", event, kv[i])
			return
		}
		v, ok := tr.value(event+"."+k, kv[i+1])
		if !ok {
			return
		}
		b.WriteString(" " + k + "=" + v)
	}
	tr.events = append(tr.events, b.String())
}

// value renders one value, or refuses it.
func (tr *trace) value(what string, v any) (string, bool) {
	switch x := v.(type) {
	case wire.ConnID, wire.ServiceInc, wire.TopicInc, wire.SubID, wire.DeliveryID, wire.HoldID,
		wire.ArtifactID, wire.OwnerID, wire.RouterID, wire.StoreID, wire.BusID,
		wire.ArtifactRef, wire.Location, wire.Identity, client.Info:
		tr.fail("trace: %s is a router-issued id or carries one (%T %v)", what, v, v)
		return "", false
	case string:
		return tr.text(what, x)
	case wire.RawJSON:
		return tr.text(what, string(x))
	case []byte:
		tr.fail("trace: %s: record a digest or a length of bytes, not the bytes", what)
		return "", false
	case bool:
		return strconv.FormatBool(x), true
	case int:
		return strconv.Itoa(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case uint32:
		return strconv.FormatUint(uint64(x), 10), true
	case uint64:
		return strconv.FormatUint(x, 10), true
	case wire.ErrorCode, wire.Dispatch, wire.CancelState, wire.Retention, wire.Mode:
		return fmt.Sprint(x), true
	case nil:
		return "ok", true
	case error:
		// Only the code and dispatch: messages may name ids.
		var be *wire.BusError
		switch {
		case errors.As(x, &be):
			return be.Code.String() + "/" + be.Dispatch.String(), true
		case errors.Is(x, client.ErrSubscriptionClosed):
			return "subscription-closed", true
		case errors.Is(x, client.ErrClosed):
			return "closed", true
		case errors.Is(x, context.Canceled), errors.Is(x, context.DeadlineExceeded):
			return "context", true
		}
		tr.fail("trace: %s: unclassified error %v", what, x)
		return "", false
	}
	tr.fail("trace: %s: %T is not a behavioural value; record its fields", what, v)
	return "", false
}

func (tr *trace) text(what, s string) (string, bool) {
	if loc := routerIDs.FindStringIndex(s); loc != nil {
		tr.fail("trace: %s holds a router-issued id or incarnation %q in %q", what, s[loc[0]:loc[1]], s)
		return "", false
	}
	for _, f := range tr.forbidden {
		if f != "" && strings.Contains(s, f) {
			tr.fail("trace: %s holds a client incarnation in %q", what, s)
			return "", false
		}
	}
	return strconv.Quote(s), true
}

// traceDiff lists differing lines side by side with their positions.
func traceDiff(a, b []string) string {
	var out strings.Builder
	n := max(len(a), len(b))
	shown := 0
	for i := range n {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x == y {
			continue
		}
		fmt.Fprintf(&out, "  %3d memory: %s\n      unix:   %s\n", i, x, y)
		if shown++; shown == 20 {
			out.WriteString("  ...\n")
			break
		}
	}
	return out.String()
}

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:8])
}

func TestTraceRefusesRouterIDs(t *testing.T) {
	var refused []string
	tr := &trace{fail: func(f string, a ...any) { refused = append(refused, fmt.Sprintf(f, a...)) },
		forbidden: []string{"my-incarnation-7"}}
	bad := []any{
		wire.ConnID(1), wire.ServiceInc(2), wire.TopicInc(3), wire.SubID(4), wire.DeliveryID(5),
		wire.HoldID(6), wire.ArtifactID(7), wire.DeliveryOwner(8), wire.RouterID(9), wire.StoreID(10), wire.BusID(11),
		wire.ArtifactRef{}, wire.Identity{ClientID: "x"},
		"conn-1", "svc-12", "top-3", "sub-4", "dlv-5", "own-6", "a-7", "bus-8",
		wire.RouterID(0xabc).String(), wire.StoreID(0xabc).String(), "inc-1f2e",
		`{"owner":"own-3"}`, "reply to dlv-12 refused", wire.RawJSON(`{"artifact":"a-9"}`),
		"my-incarnation-7", []byte("bytes"), struct{ X int }{1},
	}
	for _, v := range bad {
		before := len(refused)
		tr.record("probe", "v", v)
		if len(refused) != before+1 {
			t.Errorf("the recorder accepted %T %v", v, v)
		}
	}
	good := []any{"Counter.Increment", "agent.fly-b", "world.frame.meta", "call-3", `{"amount":2}`, "data-7x",
		uint64(3), 4, true, wire.ErrBackpressure, wire.Dispatched, wire.CancelledBeforeDispatch, nil,
		error(wire.NewError(wire.ErrNoService, 0, "no service svc-3")), wire.RawJSON(`{"total":5}`)}
	for _, v := range good {
		before := len(refused)
		tr.record("probe", "v", v)
		if len(refused) != before {
			t.Errorf("the recorder refused %T %v: %s", v, v, refused[len(refused)-1])
		}
	}
	if len(tr.events) != len(good) {
		t.Errorf("%d events recorded, want %d", len(tr.events), len(good))
	}
}

// rpcScenario exercises registration, request/reply, refusals, FIFO,
// credits, cancellation, a second reply, responder release and a service
// disconnect.
func rpcScenario(t *testing.T, h *harness, tr *trace) {
	ctx := ctxT(t)
	caller, svcC := h.dial("eq-caller"), h.dial("eq-service")
	tr.forbid(caller)
	tr.forbid(svcC)
	info := caller.Info()
	tr.record("hello", "major", info.SelectedMajor, "minor", info.SelectedMinor,
		"maxClients", info.Limits.MaxClients, "maxServiceInFlight", info.Limits.MaxServiceInFlight)
	svc, err := svcC.Register(ctx, "eq.counter", client.Queued(2), client.InFlight(1))
	tr.record("register", "name", "eq.counter", "err", err)
	if err != nil {
		t.Fatal(err)
	}
	_, err = caller.Register(ctx, "eq.counter")
	tr.record("register-again", "err", err)

	call := func(n int) *client.PendingCall {
		t.Helper()
		p, err := caller.Call(ctx, "eq.counter", "Counter.Increment", counterArgs{Amount: n}, client.Pin(svc.Incarnation()))
		tr.record("call", "amount", n, "err", err)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	take := func() *client.Request {
		t.Helper()
		req := nextRequest(t, ctx, svc)
		tr.record("request", "method", req.Method, "payload", req.Payload, "caller", req.Caller.ClientID)
		return req
	}
	result := func(p *client.PendingCall) {
		t.Helper()
		res, err := p.Result(ctx)
		if err != nil {
			tr.record("result", "err", err)
			return
		}
		tr.record("result", "outcome", res.Outcome, "responder", res.Responder.ClientID)
		res.Close()
	}

	total := 0
	for _, n := range []int{2, 3} {
		p := call(n)
		req := take()
		total += n
		routed, err := req.Reply(ctx, counterResult{Total: total})
		tr.record("reply", "routed", routed, "err", err)
		req.Close()
		result(p)
	}
	_, err = caller.Call(ctx, "eq.missing", "M", nil)
	tr.record("call-missing", "err", err)
	_, err = caller.Call(ctx, "eq.counter", "M", nil, client.Pin(svc.Incarnation()+1))
	tr.record("call-stale-pin", "err", err)

	// One in flight, two queued, the third refused.
	p1 := call(10)
	r1 := take()
	p2, p3 := call(20), call(30)
	_, err = caller.Call(ctx, "eq.counter", "Counter.Increment", counterArgs{Amount: 40}, client.Pin(svc.Incarnation()))
	tr.record("call-over-queue", "err", err)
	barrier(t, caller)
	tr.record("queued", "n", h.r.Stats().Queued)
	st, err := p3.Cancel(ctx)
	tr.record("cancel-queued", "state", st, "err", err)
	result(p3)
	st, err = p1.Cancel(ctx)
	tr.record("cancel-dispatched", "state", st, "err", err)
	routed, err := r1.Reply(ctx, counterResult{Total: -1})
	tr.record("reply-detached", "routed", routed, "err", err)
	r1.Close() // the credit returns: the next in FIFO order is 20
	r2 := take()
	routed, err = r2.Reply(ctx, counterResult{Total: 20})
	tr.record("reply", "routed", routed, "err", err)
	routed, err = r2.Reply(ctx, counterResult{Total: 21})
	tr.record("reply-twice", "routed", routed, "err", err)
	r2.Close()
	res := mustResult(t, ctx, p2)
	st, err = p2.Cancel(ctx)
	tr.record("cancel-completed", "state", st, "err", err)
	res.Close()
	barrier(t, caller)
	st, err = p2.Cancel(ctx)
	tr.record("cancel-retired", "state", st, "err", err)

	// The handler gives up without replying.
	p5 := call(50)
	take().Close()
	result(p5)

	// The service disconnects with one call dispatched and one queued.
	p6, p7 := call(60), call(70)
	take()
	svcC.Close()
	result(p6)
	result(p7)
	drained(t, h)
	s := h.r.Stats()
	tr.record("rpc-end", "services", s.Services, "calls", s.Calls, "owners", s.Owners, "capabilities", s.ReplyCapabilities,
		"callsTotal", s.CallsTotal, "refusedBackpressure", s.Refusals["BACKPRESSURE"], "refusedNoService", s.Refusals["NO_SERVICE"])
	caller.Close()
}

// pubsubScenario exercises declaration, bounded and latest credits,
// coalescing, backpressure, fan-out roots, extraction, retention, replay
// and clearing, with artifacts throughout.
func pubsubScenario(t *testing.T, h *harness, tr *trace) {
	ctx := ctxT(t)
	pub, sub := h.dial("eq-pub"), h.dial("eq-sub")
	tr.forbid(pub)
	tr.forbid(sub)
	info, err := pub.DeclareTopic(ctx, "eq.frames", wire.RetainLatest)
	tr.record("declare", "declared", info.Declared, "err", err)
	info, err = pub.DeclareTopic(ctx, "eq.frames", wire.RetainLatest)
	tr.record("declare-again", "declared", info.Declared, "err", err)
	_, err = pub.DeclareTopic(ctx, "eq.frames", wire.RetainNone)
	tr.record("declare-conflict", "err", err)
	bounded, err := sub.Subscribe(ctx, "eq.frames", client.Bounded(), client.Queued(2), client.InFlight(1))
	tr.record("subscribe", "mode", wire.ModeBounded, "err", err)
	latest, err := sub.Subscribe(ctx, "eq.frames", client.InFlight(1))
	tr.record("subscribe", "mode", wire.ModeLatest, "err", err)
	if err != nil {
		t.Fatal(err)
	}
	datas := map[int][]byte{}
	publish := func(n int) {
		t.Helper()
		datas[n] = frameBytes(byte(n), 10_000+n)
		a := produce(t, pub, datas[n])
		rc, err := pub.Publish(ctx, "eq.frames", tick{N: n}, client.Attach("frame", a))
		tr.record("publish", "n", n, "seq", rc.TopicSequence, "subscribers", rc.Subscribers, "replaced", rc.Replaced, "err", err)
		a.Close()
		barrier(t, pub)
	}
	got := func(what string, s *client.Subscription) *client.Message {
		t.Helper()
		m := nextMessage(t, ctx, s)
		tr.record(what, "topic", m.Topic, "seq", m.TopicSequence, "replaced", m.Replaced, "payload", m.Payload)
		return m
	}
	readArt := func(what string, a *client.Artifact) {
		t.Helper()
		b, err := a.ReadAll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tr.record(what, "bytes", len(b), "digest", digestOf(b), "contentType", a.Ref().ContentType, "generation", a.Ref().Generation)
	}
	stats := func(what string) {
		t.Helper()
		barrier(t, pub)
		barrier(t, sub)
		s := h.r.Stats()
		tr.record(what, "artifacts", s.Artifacts, "roots", s.ArtifactRoots, "owners", s.Owners, "queued", s.Queued,
			"subscriptions", s.Subscriptions, "retainedBytes", s.RetainedBytes, "queuedBytes", s.QueuedBytes, "files", s.StoreFiles)
	}

	publish(1)
	bm1, lm1 := got("bounded", bounded), got("latest", latest) // both credits in use
	publish(2)
	publish(3) // replaces 2 in the latest slot; bounded holds 2 and 3
	publish(4) // the bounded queue is full: the whole publication is refused
	stats("after-overflow")
	bimg := mustArtifact(t, bm1, "frame")
	readArt("bounded-frame", bimg)
	limg := mustArtifact(t, lm1, "frame")
	lm1.Close() // the extracted artifact still holds the delivery and its credit
	stats("latest-message-closed")
	bimg.Close()
	bm1.Close()
	bm2 := got("bounded", bounded)
	kept, err := limg.Retain(ctx)
	tr.record("retain", "err", err)
	limg.Close()
	lm3 := got("latest", latest)
	readArt("kept-frame", kept)
	stats("retained-hold")
	late, err := sub.Subscribe(ctx, "eq.frames", client.Replay())
	tr.record("subscribe-replay", "err", err)
	replay := got("replay", late)
	img := mustArtifact(t, replay, "frame")
	readArt("replay-frame", img)
	img.Close()
	replay.Close()
	cleared, err := pub.ClearTopic(ctx, "eq.frames")
	tr.record("clear", "cleared", cleared, "err", err)
	bounded.Close() // 3 is still queued: discarded
	stats("after-unsubscribe")
	bm2.Close()
	lm3.Close()
	kept.Close()
	latest.Close()
	late.Close()
	stats("end")
	_, err = late.Next(ctx)
	tr.record("next-after-close", "err", err)
	deleted, err := pub.DeleteTopic(ctx, "eq.frames")
	tr.record("delete", "deleted", deleted, "err", err)
	if n := sealedFiles(t, h); n != 0 {
		t.Fatalf("%d sealed files left", n)
	}
	pub.Close()
	sub.Close()
}

func TestTransportEquivalence(t *testing.T) {
	traces := map[string][]string{}
	forEachTransport(t, router.Config{Policy: router.OpenPolicy()}, func(t *testing.T, h *harness) {
		tr := &trace{fail: t.Fatalf}
		rpcScenario(t, h, tr)
		pubsubScenario(t, h, tr)
		name := "memory"
		if h.unix {
			name = "unix"
		}
		traces[name] = tr.events
		if os.Getenv("FLYBUS_TRACE") == "1" {
			t.Logf("%s trace, %d events:\n  %s", name, len(tr.events), strings.Join(tr.events, "\n  "))
		}
	})
	mem, unix := traces["memory"], traces["unix"]
	if len(mem) == 0 || len(unix) == 0 {
		t.Fatalf("a scenario did not finish: %d and %d events", len(mem), len(unix))
	}
	if d := traceDiff(mem, unix); d != "" {
		t.Fatalf("the transports behaved differently (%d and %d events):\n%s", len(mem), len(unix), d)
	}
	t.Logf("%d events, identical over both transports", len(mem))
}
