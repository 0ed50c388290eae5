package router_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// RPC conformance (docs/protocol.md: envelope, lifecycle, errors,
// operations, limits), driven by raw clients so that every id, refusal and
// notice is visible. Each test runs over the in-memory and the Unix-socket
// transport through forEachTransport.

// peer is a raw client that keeps frames it has read but nobody has claimed
// yet, so a test can wait for one reply while deliveries and notices for the
// same connection arrive around it. Every frame it reads must carry a
// router envelope id above the previous one (docs/protocol.md, Increasing
// ids and Lanes: ids are assigned in write order).
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

// servicePeers registers name on a raw peer and says hello with a second,
// the caller: where most raw RPC tests start. For a name "x.svc" the peers
// are x-svc and x-caller.
func servicePeers(t *testing.T, h *harness, name string, queued, inFlight uint32) (svc, c *peer, inc wire.ServiceInc) {
	t.Helper()
	prefix, _, _ := strings.Cut(name, ".")
	svc = newPeer(t, h, prefix+"-svc")
	inc = svc.register(name, queued, inFlight)
	return svc, newPeer(t, h, prefix+"-caller"), inc
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
	return p.do(wire.OpRPCReply, &wire.Reply{ReplyCapability: wire.ReplyCapability{CallID: call, RequestDeliveryID: dlv}, Outcome: wire.RawJSON(outcome)})
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

// finishCall answers req with {} (the reply must be routed to caller) and
// consumes the caller's result and the request, each releasing its root: a
// call that leaves nothing behind.
func (p *peer) finishCall(caller *peer, req *wire.Request) {
	p.t.Helper()
	if !p.replyTo(req, `{}`) {
		p.t.Fatalf("%s: reply to %s was not routed", p.name, req.CallID)
	}
	if n := caller.consume(caller.result().DeliveryID); n != 1 {
		p.t.Fatalf("%s: the result of %s released %d", caller.name, req.CallID, n)
	}
	if n := p.consume(req.DeliveryID); n != 1 {
		p.t.Fatalf("%s: the request of %s released %d", p.name, req.CallID, n)
	}
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
	return p.ok(wire.OpRPCResponderRelease, &wire.ResponderRelease{ReplyCapability: wire.ReplyCapability{CallID: call, RequestDeliveryID: dlv}}).(*wire.Released).Released
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s, err := h.r.Await(ctx, cond); err != nil {
		t.Fatalf("timed out waiting for %s; stats %+v", what, s)
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
