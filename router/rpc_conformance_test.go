package router_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// RPC conformance: bus-v1 sections 4 to 6 and 9, driven by raw clients so
// that every id, refusal and notice is visible. Each test runs over the
// in-memory and the Unix-socket transport through forEachTransport.

// peer is a raw client that keeps frames it has read but nobody has claimed
// yet, so a test can wait for one reply while deliveries and notices for the
// same connection arrive around it. Every frame it reads must carry a
// router envelope id above the previous one (bus-v1 section 4 and the
// lanes rule: ids are assigned in write order).
type peer struct {
	*raw
	name    string
	ident   wire.Identity
	lastBus uint64
	held    []inFrame
	seen    []inFrame // every frame, in read order
}

// inFrame is one decoded router frame.
type inFrame struct {
	Kind    wire.EnvKind
	Op      wire.Op
	ID      uint64
	ReplyTo uint64
	Err     *wire.BusError // a refused command
	Body    wire.Body      // reply value, delivery or notice body
	Len     int            // envelope JSON bytes
}

func (f inFrame) String() string {
	if f.Kind == wire.KindReply {
		return fmt.Sprintf("bus-%d reply %s to msg-%d", f.ID, f.Op, f.ReplyTo)
	}
	return fmt.Sprintf("bus-%d %s %s", f.ID, f.Kind, f.Op)
}

// newPeer dials an unbound transport and says hello as id.
func newPeer(t *testing.T, h *harness, id string) *peer {
	t.Helper()
	p := &peer{raw: newRaw(t, h.conn("")), name: id}
	p.helloAs(id)
	return p
}

// newBoundPeer dials the launcher-bound transport of id and says hello.
func newBoundPeer(t *testing.T, h *harness, id string) *peer {
	t.Helper()
	p := &peer{raw: newRaw(t, h.conn(id)), name: id}
	p.helloAs(id)
	return p
}

func (p *peer) helloAs(id string) {
	p.t.Helper()
	p.ident = wire.Identity{ClientID: id, ClientIncarnation: "inc-" + id}
	p.ok(wire.OpHello, &wire.Hello{ClientID: id, ClientIncarnation: p.ident.ClientIncarnation, SupportedMajors: []uint32{1}})
}

func shapeOf(op wire.Op) wire.Shape {
	for _, s := range wire.Shapes() {
		if s.Op == op {
			return s
		}
	}
	panic("no shape for " + op.String())
}

// read decodes the next frame, checks its id order and keeps a record.
func (p *peer) read() inFrame {
	p.t.Helper()
	b, err := p.fr.ReadFrame()
	if err != nil {
		p.t.Fatalf("%s: read: %v (held: %v)", p.name, err, p.held)
	}
	if err := p.dec.Decode(b, &p.env); err != nil {
		p.t.Fatalf("%s: router frame does not decode: %v", p.name, err)
	}
	env := &p.env
	if env.Major != wire.Major || env.Minor != wire.Minor {
		p.t.Fatalf("%s: router frame version %d.%d", p.name, env.Major, env.Minor)
	}
	if env.ID <= p.lastBus {
		p.t.Fatalf("%s: %s %s carries bus-%d after bus-%d: router ids must increase in write order",
			p.name, env.Kind, env.Op, env.ID, p.lastBus)
	}
	p.lastBus = env.ID
	in := inFrame{Kind: env.Kind, Op: env.Op, ID: env.ID, Len: len(b)}
	switch env.Kind {
	case wire.KindReply:
		in.ReplyTo = uint64(env.ReplyTo.V)
		v := shapeOf(env.Op).Reply
		be, err := env.DecodeReply(v)
		if err != nil {
			p.t.Fatalf("%s: malformed %s reply: %v", p.name, env.Op, err)
		}
		in.Err, in.Body = be, v
	case wire.KindDelivery, wire.KindNotice:
		v := shapeOf(env.Op).Body
		if err := env.DecodeBody(v); err != nil {
			p.t.Fatalf("%s: malformed %s: %v", p.name, env.Op, err)
		}
		in.Body = v
	default:
		p.t.Fatalf("%s: router sent a %s", p.name, env.Kind)
	}
	p.seen = append(p.seen, in)
	return in
}

// take returns the first held or newly read frame that matches, holding
// every other frame it reads.
func (p *peer) take(what string, match func(inFrame) bool) inFrame {
	p.t.Helper()
	for i, f := range p.held {
		if match(f) {
			p.held = append(p.held[:i], p.held[i+1:]...)
			return f
		}
	}
	for {
		f := p.read()
		if match(f) {
			return f
		}
		p.held = append(p.held, f)
	}
}

func (p *peer) await(msg uint64) inFrame {
	p.t.Helper()
	return p.take(fmt.Sprintf("reply to msg-%d", msg), func(f inFrame) bool {
		return f.Kind == wire.KindReply && f.ReplyTo == msg
	})
}

// sendAtts sends one command with attachments and returns its serial.
func (p *peer) sendAtts(op wire.Op, body wire.Body, atts []wire.Attachment) uint64 {
	p.t.Helper()
	p.id++
	b, err := wire.AppendFrame(nil, wire.Header{ID: p.id, Kind: wire.KindCommand, Op: op}, body, atts)
	if err != nil {
		p.t.Fatal(err)
	}
	p.sendBytes(b)
	return p.id
}

// sendJSON sends a command whose body is given as JSON text, to say what
// the wire types cannot (an unknown field).
func (p *peer) sendJSON(op, body string) uint64 {
	p.t.Helper()
	p.id++
	p.sendBytes(frameOf(`{"protocol":"flybus","major":1,"minor":0,"id":"msg-` + wire.FormatU64(p.id) +
		`","replyTo":null,"kind":"command","op":"` + op + `","body":` + body + `,"attachments":[]}`))
	return p.id
}

func (p *peer) do(op wire.Op, body wire.Body) inFrame {
	p.t.Helper()
	return p.await(p.command(op, body))
}

// ok runs a command that must succeed and returns its reply value.
func (p *peer) ok(op wire.Op, body wire.Body) wire.Body {
	p.t.Helper()
	f := p.do(op, body)
	if f.Err != nil {
		p.t.Fatalf("%s: %s refused: %v", p.name, op, f.Err)
	}
	return f.Body
}

// refused runs a command that must be refused and returns the refusal.
func (p *peer) refused(op wire.Op, body wire.Body) *wire.BusError {
	p.t.Helper()
	f := p.do(op, body)
	if f.Err == nil {
		p.t.Fatalf("%s: %s was admitted (%+v), want a refusal", p.name, op, f.Body)
	}
	return f.Err
}

func (p *peer) register(name string, queued, inFlight uint32) wire.ServiceInc {
	p.t.Helper()
	return p.ok(wire.OpServiceRegister, &wire.Register{Name: name, MaxQueued: queued, MaxInFlight: inFlight}).(*wire.RegisterOK).ServiceIncarnation
}

func callBody(n uint64, target, payload string) *wire.Call {
	return &wire.Call{CallID: wire.CallID(n), Target: target, Method: "Test.Method", Payload: wire.RawJSON(payload)}
}

func (p *peer) callOK(n uint64, target string) {
	p.t.Helper()
	if ok := p.ok(wire.OpRPCCall, callBody(n, target, "{}")).(*wire.CallOK); !ok.Accepted {
		p.t.Fatalf("%s: call-%d answered accepted:false", p.name, n)
	}
}

func (p *peer) callErr(n uint64, target string) *wire.BusError {
	p.t.Helper()
	return p.refused(wire.OpRPCCall, callBody(n, target, "{}"))
}

func (p *peer) reply(call wire.CallID, dlv wire.DeliveryID, outcome string) inFrame {
	p.t.Helper()
	return p.do(wire.OpRPCReply, &wire.Reply{CallID: call, RequestDeliveryID: dlv, Outcome: wire.RawJSON(outcome)})
}

// replyTo answers req and returns routed.
func (p *peer) replyTo(req *wire.Request, outcome string) bool {
	p.t.Helper()
	f := p.reply(req.CallID, req.DeliveryID, outcome)
	if f.Err != nil {
		p.t.Fatalf("%s: reply to %s refused: %v", p.name, req.CallID, f.Err)
	}
	return f.Body.(*wire.Routed).Routed
}

func (p *peer) cancel(n uint64) wire.CancelState {
	p.t.Helper()
	return p.ok(wire.OpRPCCancel, &wire.Cancel{CallID: wire.CallID(n)}).(*wire.CancelOK).State
}

func (p *peer) consume(ids ...wire.DeliveryID) uint64 {
	p.t.Helper()
	return p.ok(wire.OpDeliveryConsumed, &wire.Consumed{DeliveryIDs: ids}).(*wire.Released).Released
}

func (p *peer) releaseResponder(call wire.CallID, dlv wire.DeliveryID) uint64 {
	p.t.Helper()
	return p.ok(wire.OpRPCResponderRelease, &wire.ResponderRelease{CallID: call, RequestDeliveryID: dlv}).(*wire.Released).Released
}

func (p *peer) delivery(op wire.Op) inFrame {
	p.t.Helper()
	return p.take(op.String(), func(f inFrame) bool { return f.Kind == wire.KindDelivery && f.Op == op })
}

func (p *peer) request() *wire.Request {
	p.t.Helper()
	return p.delivery(wire.OpRPCRequest).Body.(*wire.Request)
}

func (p *peer) result() *wire.Result {
	p.t.Helper()
	return p.delivery(wire.OpRPCResult).Body.(*wire.Result)
}

func (p *peer) notice(op wire.Op) wire.Body {
	p.t.Helper()
	return p.take(op.String(), func(f inFrame) bool { return f.Kind == wire.KindNotice && f.Op == op }).Body
}

func (p *peer) callFailed() *wire.CallFailed {
	p.t.Helper()
	return p.notice(wire.OpCallFailed).(*wire.CallFailed)
}

// probeCall is a call id no test uses: cancelling it changes nothing.
const probeCall = math.MaxUint64

// quiet proves that no notice of op is queued for this client. Notices and
// replies share one FIFO lane, so anything queued before the probe's reply
// is written before it.
func (p *peer) quiet(op wire.Op) {
	p.t.Helper()
	msg := p.command(wire.OpRPCCancel, &wire.Cancel{CallID: probeCall})
	for _, f := range p.held {
		if f.Kind == wire.KindNotice && f.Op == op {
			p.t.Fatalf("%s: unexpected %s", p.name, f)
		}
	}
	for {
		f := p.read()
		if f.Kind == wire.KindReply && f.ReplyTo == msg {
			return
		}
		if f.Kind == wire.KindNotice && f.Op == op {
			p.t.Fatalf("%s: unexpected %s", p.name, f)
		}
		p.held = append(p.held, f)
	}
}

// settle waits for a router-internal condition that emits no frame, and
// reports the last snapshot when it does not come.
func settle(t *testing.T, h *harness, what string, cond func(s router.Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := h.r.Stats()
		if cond(s) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; stats %+v", what, s)
		}
		time.Sleep(time.Millisecond)
	}
}

// drained waits until no call, owner, capability or queued item is left.
func drained(t *testing.T, h *harness) {
	t.Helper()
	settle(t, h, "the router to hold no RPC state", func(s router.Stats) bool {
		return s.Calls == 0 && s.ActiveCalls == 0 && s.Owners == 0 && s.ReplyCapabilities == 0 && s.Queued == 0
	})
}

func wantErr(t *testing.T, what string, be *wire.BusError, c wire.ErrorCode, d wire.Dispatch) {
	t.Helper()
	if be == nil || be.Code != c || be.Dispatch != d {
		t.Fatalf("%s: got %v, want %s (%s)", what, be, c, d)
	}
}

// A call id must increase per client; a syntactically valid id advances the
// watermark even when admission refuses it, and gaps are fine.
func TestCallIDWatermark(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		svc := newPeer(t, h, "wm-svc")
		inc := svc.register("wm.svc", 8, 8)
		c := newPeer(t, h, "wm-caller")
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

// Only the connection a request was delivered to may answer it, quoting
// both its delivery id and its call id.
func TestForgedRepliesAreRefused(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		svc := newPeer(t, h, "forge-svc")
		svc.register("forge.svc", 4, 4)
		forger := newPeer(t, h, "forger")
		c := newPeer(t, h, "forge-caller")
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

// Admission sizes the delivery it would build, with the router-added ids at
// their longest: a call or reply whose own envelope fits can still be
// refused because its delivery would not.
func TestDeliverySizeIsCheckedAtAdmission(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		svc := newPeer(t, h, "size-svc")
		inc := svc.register("size.svc", 4, 4)
		c := newPeer(t, h, "size-caller")
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
		overR := &wire.Reply{CallID: 3, RequestDeliveryID: req.DeliveryID, Outcome: wire.RawJSON(pad(wire.MaxEnvelopeBytes - resLen(3, 0) + 1))}
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

// delivery.consumed takes 1..64 ids, is all or nothing against never-issued
// ids, and counts only roots it newly released.
func TestDeliveryConsumedBatches(t *testing.T) {
	l := wire.DefaultLimits()
	l.MaxServiceQueued, l.MaxServiceInFlight = 64, 64
	forEachTransport(t, router.Config{Policy: router.OpenPolicy(), Limits: l}, func(t *testing.T, h *harness) {
		svc := newPeer(t, h, "batch-svc")
		svc.register("batch.svc", 64, 64)
		c := newPeer(t, h, "batch-caller")
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
		svc := newPeer(t, h, "credit-svc")
		svc.register("credit.svc", 4, 1)
		c := newPeer(t, h, "credit-caller")
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
		svc := newPeer(t, h, "rel-svc")
		svc.register("rel.svc", 4, 4)
		c := newPeer(t, h, "rel-caller")

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
			svc.refused(wire.OpRPCResponderRelease, &wire.ResponderRelease{CallID: r2.CallID, RequestDeliveryID: r2.DeliveryID + 100}),
			wire.ErrOwnerInvalid, wire.NotDispatched)
		if !svc.replyTo(r2, `{}`) {
			t.Fatal("reply after a refused release was not routed")
		}
		c.consume(c.result().DeliveryID)
		svc.consume(r2.DeliveryID)

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

// maxActiveCallsPerClient bounds the calls a client still awaits; a slot
// frees when the result is consumed, the call is cancelled or it fails.
func TestActiveCallLimit(t *testing.T) {
	l := wire.DefaultLimits()
	l.MaxActiveCallsPerClient = 2
	forEachTransport(t, router.Config{Policy: router.OpenPolicy(), Limits: l}, func(t *testing.T, h *harness) {
		svc := newPeer(t, h, "act-svc")
		svc.register("act.svc", 8, 1)
		c := newPeer(t, h, "act-caller")
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

// A caller that disconnects takes its queued calls out of the service queue
// unsent; its dispatched request stays valid for the service, whose reply
// then goes nowhere; nothing is left once the service closes its request.
func TestCallerDisconnectWithQueuedAndDispatchedCalls(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		svc := newPeer(t, h, "cd-svc")
		svc.register("cd.svc", 4, 1)
		c := newPeer(t, h, "cd-caller")

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
		r0 := svc.request()
		svc.replyTo(r0, `{}`)
		finished.consume(finished.result().DeliveryID)
		svc.consume(r0.DeliveryID)

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
		if !svc.replyTo(req, `{}`) {
			t.Fatal("dispatched call not answerable after unregister")
		}
		dispatched.consume(dispatched.result().DeliveryID)
		svc.consume(req.DeliveryID)
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
		other.replyTo(otherReq, `{}`)
		elsewhere.consume(elsewhere.result().DeliveryID)
		other.consume(otherReq.DeliveryID)
		drained(t, h)
	})
}

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
				svc := newPeer(t, h, "cx-svc")
				svc.register("cx.svc", 4, 1)
				c := newPeer(t, h, "cx-caller")
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
		svc := newPeer(t, h, "race-svc")
		svc.register("race.svc", 4, 4)
		c := newPeer(t, h, "race-caller")
		var routedN, detachedN int
		for i := range 40 {
			n := uint64(i + 1)
			c.callOK(n, "race.svc")
			req := svc.request()
			// Send both before reading either reply, in alternating order.
			var replyMsg, cancelMsg uint64
			if i%2 == 0 {
				replyMsg = svc.command(wire.OpRPCReply, &wire.Reply{CallID: req.CallID, RequestDeliveryID: req.DeliveryID, Outcome: wire.RawJSON(`{}`)})
				cancelMsg = c.command(wire.OpRPCCancel, &wire.Cancel{CallID: wire.CallID(n)})
			} else {
				cancelMsg = c.command(wire.OpRPCCancel, &wire.Cancel{CallID: wire.CallID(n)})
				replyMsg = svc.command(wire.OpRPCReply, &wire.Reply{CallID: req.CallID, RequestDeliveryID: req.DeliveryID, Outcome: wire.RawJSON(`{}`)})
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
				res, err := helper.CallAndWait(ctx, "lanes.svc", 0, "Lanes.Helper", nil)
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
					p.command(wire.OpRPCReply, &wire.Reply{CallID: r.CallID, RequestDeliveryID: r.DeliveryID, Outcome: wire.RawJSON(`{}`)})
				} else {
					p.command(wire.OpRPCResponderRelease, &wire.ResponderRelease{CallID: r.CallID, RequestDeliveryID: r.DeliveryID})
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
			svc, err := s.c.Register(ctx, s.name, client.ServiceConfig{MaxQueued: 8, MaxInFlight: 1})
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
				p, err := s.c.Call(ctx, s.target, 0, "M", nil)
				if err != nil {
					t.Fatal(err)
				}
				pending = append(pending, p)
			}
		}
		for _, svc := range services {
			if _, err := svc.Next(ctx); err != nil {
				t.Fatal(err)
			}
		}
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

// An idle service with free in-flight credits admits calls whatever its
// writer's timing: a call that can be dispatched at once is not waiting in
// the service queue. With maxQueued 1 and maxInFlight 4, four calls sent
// back to back must all be admitted, every time.
func TestFreeCreditsAdmitPipelinedCalls(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		svc := newPeer(t, h, "cq-svc")
		svc.register("cq.svc", 1, 4)
		c := newPeer(t, h, "cq-caller")
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
		svc, err := svcClient.Register(ctx, "budget.svc", client.ServiceConfig{MaxQueued: 32, MaxInFlight: 16})
		if err != nil {
			t.Fatal(err)
		}
		c := newPeer(t, h, "budget-caller")
		// Pipeline every call and read nothing yet: the router's writer
		// for the caller stalls on the first frames it cannot write.
		for n := uint64(1); n <= calls; n++ {
			c.command(wire.OpRPCCall, callBody(n, "budget.svc", "{}"))
		}
		var routed, refused int
		for range calls {
			req, err := svc.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
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

// Admission validates every attachment's owner (bus-v1 section 6). Until the
// artifact store backs RPC attachments, an attachment naming an owner the
// sender was never issued must be refused, not admitted and dropped.
func TestCallAndReplyAttachmentsAreValidated(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		svc := newPeer(t, h, "att-svc")
		svc.register("att.svc", 4, 4)
		c := newPeer(t, h, "att-caller")
		att := []wire.Attachment{{Name: "frame", OwnerID: wire.HoldOwner(1), Ref: wire.ArtifactRef{
			StoreID: h.r.StoreID(), ArtifactID: 1, Generation: 1, ByteLength: 1228800, ContentType: "image/x-rgba"}}}

		f := c.await(c.sendAtts(wire.OpRPCCall, callBody(1, "att.svc", "{}"), att))
		if f.Err == nil {
			t.Errorf("rpc.call naming never-issued owner own-1 was admitted; its attachment is dropped silently")
		} else if f.Err.Dispatch != wire.NotDispatched {
			t.Errorf("refusal %v is not not-dispatched", f.Err)
		}

		c.callOK(2, "att.svc")
		req := svc.request()
		f = svc.await(svc.sendAtts(wire.OpRPCReply, &wire.Reply{CallID: req.CallID, RequestDeliveryID: req.DeliveryID, Outcome: wire.RawJSON(`{}`)}, att))
		if f.Err == nil {
			t.Errorf("rpc.reply naming never-issued owner own-1 was admitted (routed=%v); its attachment is dropped silently",
				f.Body.(*wire.Routed).Routed)
		}
	})
}
