package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	json "github.com/goccy/go-json"

	"github.com/flybus/flybus/wire"
)

// scanners validate outgoing payloads without allocating per call.
var scanners = sync.Pool{New: func() any { return new(wire.Scanner) }}

// encodePayload turns a typed payload into a JSON object. RawJSON and
// []byte pass through after a strict check; nil is {}.
func encodePayload(v any) (wire.RawJSON, error) {
	var raw []byte
	switch p := v.(type) {
	case nil:
		return wire.RawJSON("{}"), nil
	case wire.RawJSON:
		raw = p
	case []byte:
		raw = p
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		raw = b
	}
	sc := scanners.Get().(*wire.Scanner)
	err := sc.Scan(raw)
	scanners.Put(sc)
	if err != nil {
		return nil, wire.NewError(wire.ErrInvalidEnvelope, 0, "payload: %v", err)
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, wire.NewError(wire.ErrInvalidEnvelope, 0, "payload must be a JSON object")
	}
	return raw, nil
}

// Service is a registered endpoint. Next yields its requests.
type Service struct {
	cur   atomic.Pointer[conn] // the connection it is registered on
	owner *Client              // a Dial client that registers it again after a loss, or nil
	name  string
	opts  serviceOpts

	mu          sync.Mutex // guards incarnation, new on each registration
	incarnation wire.ServiceInc

	in     inbox[*Request]
	closed atomic.Bool
}

func (c *conn) Register(ctx context.Context, name string, opts ...ServiceOption) (*Service, error) {
	s := &Service{name: name, opts: serviceOptions(opts), in: newInbox[*Request]()}
	s.cur.Store(c)
	if err := c.register(ctx, s); err != nil {
		return nil, err
	}
	return s, nil
}

// register registers s on c: at Register, and for a Dial client again on
// each connection after a loss.
func (c *conn) register(ctx context.Context, s *Service) error {
	name := s.name
	var ok wire.RegisterOK
	// Deliveries may follow the reply at once: install the service under
	// its name before sending, and remove it if registration fails.
	c.mu.Lock()
	if c.services[name] != nil {
		c.mu.Unlock()
		return wire.NewError(wire.ErrConflict, 0, "service %s is already registered by this client", name)
	}
	c.services[name] = s
	c.mu.Unlock()
	err := c.do(ctx, request{op: wire.OpServiceRegister, body: &wire.Register{Name: name,
		MaxQueued: uint32(s.opts.queued), MaxInFlight: uint32(s.opts.inFlight)}, reply: &ok, orphan: func(err error) {
		if err == nil { // registered after the caller gave up: undo it
			c.fireAndForget(wire.OpServiceUnregister, &wire.Unregister{Name: name, ServiceIncarnation: ok.ServiceIncarnation})
		}
		takeEntry(&c.mu, &c.services, name)
	}})
	if err != nil {
		if !isCtxErr(err) {
			dropEntry(&c.mu, &c.services, name, s)
		}
		return err
	}
	s.mu.Lock()
	s.incarnation = ok.ServiceIncarnation
	s.mu.Unlock()
	s.cur.Store(c)
	return nil
}

func (s *Service) conn() *conn { return s.cur.Load() }

// Name and Incarnation identify the registration; callers pin
// Incarnation. A Dial client's service gets a new incarnation on each
// connection.
func (s *Service) Name() string { return s.name }

func (s *Service) Incarnation() wire.ServiceInc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.incarnation
}

// Next waits for the next request. It fails with ErrHandleClosed after the
// service's Close, ErrClosed after the client's, and ROUTER_LOST when the
// router went away.
func (s *Service) Next(ctx context.Context) (*Request, error) {
	if s.closed.Load() {
		return nil, closedHandle("service")
	}
	req, err := s.in.next(ctx)
	if err == nil {
		req.c.handles.handedOut(req.d.cleanup.rec)
	}
	return req, err
}

// TryNext returns a request if one is already queued, without waiting.
func (s *Service) TryNext() (*Request, bool) {
	if s.closed.Load() {
		return nil, false
	}
	req, ok := s.in.tryNext()
	if ok {
		req.c.handles.handedOut(req.d.cleanup.rec)
	}
	return req, ok
}

// Serve hands each request to handle, in arrival order, and closes it when
// handle returns: a handler that answers later keeps a Responder. It
// returns nil once ctx is done or the service or its client was closed,
// and the cause when delivery ended otherwise (ROUTER_LOST). Serve may run
// in several goroutines at once, up to the service's MaxInFlight requests
// being handled together.
func (s *Service) Serve(ctx context.Context, handle func(ctx context.Context, req *Request)) error {
	return handleEach(ctx, s.Next, handle)
}

// closeQueue stops delivery with err and closes requests nobody took.
func (s *Service) closeQueue(err error) { s.in.close(err) }

// Close unregisters the service. Requests already handed out stay valid and
// can still be answered. Idempotent.
func (s *Service) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.owner != nil {
		s.owner.forget(s)
	}
	c := s.conn()
	dropEntry(&c.mu, &c.services, s.name, s)
	c.fireAndForget(wire.OpServiceUnregister, &wire.Unregister{Name: s.name, ServiceIncarnation: s.Incarnation()})
	s.closeQueue(closedHandle("service"))
	return nil
}

func (c *conn) onRequest(r *wire.Request, arts attachSet) error {
	c.mu.Lock()
	s := c.services[r.Target]
	c.mu.Unlock()
	g := c.deliveryGuard(r.DeliveryID, arts)
	rc := &replyCap{c: c, rcap: r.ReplyCapability(), refCount: refCount{refs: 1}}
	req := &Request{Method: r.Method, Payload: r.Payload.Clone(), Caller: r.Caller,
		CallID: r.CallID, ServiceIncarnation: r.ServiceIncarnation,
		delivery: delivery{c: c, d: delivered{what: "request", g: g}, arts: arts}, rc: rc}
	req.d.cleanup = watch(c, req, "Request", g, func() { g.drop(); rc.drop() })
	if s == nil || !s.in.push(req) {
		req.Close() // nobody will serve it: consume and give up the reply
	}
	return nil
}

// Request is one incoming call. Close it when the handler is done with it;
// that consumes the delivery (returning the service's credit) and, unless a
// Responder is still open, gives up the right to reply.
type Request struct {
	delivery           // consumed when the request and its artifacts are closed
	Method             string
	Payload            wire.RawJSON
	Caller             wire.Identity // authenticated only on a launcher-bound transport
	CallID             wire.CallID
	ServiceIncarnation wire.ServiceInc

	rc *replyCap
}

// replyCap is a call's right to reply, shared by its Request and
// Responders: the last of them to close without a reply releases the call.
type replyCap struct {
	c    *conn
	rcap wire.ReplyCapability

	refCount // its mu guards replied too
	replied  bool
}

func (rc *replyCap) drop() {
	if !rc.dropRef() {
		return
	}
	// No handle is left that could reply now: replied is final.
	rc.mu.Lock()
	replied := rc.replied
	rc.mu.Unlock()
	if !replied {
		rc.c.fireAndForget(wire.OpRPCResponderRelease, &wire.ResponderRelease{ReplyCapability: rc.rcap})
	}
}

// Decode unmarshals the payload into v.
func (r *Request) Decode(v any) error {
	return r.d.decode(r.Payload, v)
}

// Reply answers the call with outcome (any JSON object value) and the
// service's own artifacts. It reports routed=false when the caller has
// detached; a second reply fails with CALL_GONE. After Close, reply through
// a Responder taken before.
func (r *Request) Reply(ctx context.Context, outcome any, atts ...Attachment) (bool, error) {
	if err := r.d.live(); err != nil {
		return false, err
	}
	return r.rc.reply(ctx, outcome, atts)
}

func (rc *replyCap) reply(ctx context.Context, outcome any, atts []Attachment) (bool, error) {
	raw, err := encodePayload(outcome)
	if err != nil {
		return false, err
	}
	var ok wire.Routed
	_, err = sendAttached(rc.c, atts, func(watts []wire.Attachment, undo func()) (struct{}, error) {
		return struct{}{}, rc.c.do(ctx, request{op: wire.OpRPCReply, body: &wire.Reply{ReplyCapability: rc.rcap, Outcome: raw}, atts: watts, reply: &ok, orphan: func(error) { undo() }})
	})
	if err != nil {
		return false, err
	}
	rc.mu.Lock()
	rc.replied = true
	rc.mu.Unlock()
	return ok.Routed, nil
}

// Responder returns a handle that can reply after the Request is closed.
// Close it when done; the last of Request and Responders to close without
// a reply releases the call (the caller sees CALL_GONE, dispatched). Take
// it before closing the Request: afterwards its Reply fails with
// ErrHandleClosed.
func (r *Request) Responder() *Responder {
	p := &Responder{rc: r.rc}
	if r.d.live() != nil || !r.rc.add() {
		p.closed.Store(true)
		return p
	}
	p.cleanup = watch(r.c, p, "Responder", nil, r.rc.drop)
	return p
}

// Close consumes the delivery and drops this handle's reply capability.
// Idempotent.
func (r *Request) Close() error {
	if r.d.close() {
		r.rc.drop()
	}
	return nil
}

// Responder keeps the right to reply to a request.
type Responder struct {
	rc      *replyCap
	closed  atomic.Bool
	cleanup handleWatch
}

// Reply answers the call; see Request.Reply.
func (p *Responder) Reply(ctx context.Context, outcome any, atts ...Attachment) (bool, error) {
	if p.closed.Load() {
		return false, closedHandle("responder")
	}
	return p.rc.reply(ctx, outcome, atts)
}

// Close drops this responder's capability. Idempotent.
func (p *Responder) Close() error {
	if !p.closed.Swap(true) {
		p.cleanup.Stop()
		p.rc.drop()
	}
	return nil
}

// Result is a call's outcome. Close it to consume the result delivery.
type Result struct {
	delivery
	Responder          wire.Identity
	ServiceIncarnation wire.ServiceInc
	Outcome            wire.RawJSON
}

// Decode unmarshals the outcome into v.
func (r *Result) Decode(v any) error {
	return r.d.decode(r.Outcome, v)
}

// PendingCall is an admitted call awaiting its one terminal outcome.
type PendingCall struct {
	c           *conn
	id          wire.CallID
	incarnation wire.ServiceInc

	out     oneShot[*Result] // the one outcome, set under mu
	once    sync.Once
	mu      sync.Mutex
	settled bool // out is set
	taken   bool // Result returned the result to the user
	abandon bool // Close before the result: consume it on arrival
	closed  bool // Close was called
}

// ID and Incarnation identify the admitted call.
func (p *PendingCall) ID() wire.CallID              { return p.id }
func (p *PendingCall) Incarnation() wire.ServiceInc { return p.incarnation }

// finish settles the call with its one outcome; a later one is consumed.
func (p *PendingCall) finish(res *Result, err error) {
	delivered := false
	p.once.Do(func() { delivered = p.settle(res, err) })
	if !delivered && res != nil {
		res.Close()
	}
}

// settle records the outcome under the lock Close decides under, and
// reports whether the program may still take it: false once Close ran,
// and then the result is the settler's to consume. Close, for its part,
// consumes a result settled before it.
func (p *PendingCall) settle(res *Result, err error) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.out.set(res, err)
	p.settled = true
	return !p.abandon
}

// Result waits for the outcome. It is safe to call again after ctx expires.
func (p *PendingCall) Result(ctx context.Context) (*Result, error) {
	if err := p.live(); err != nil {
		return nil, err
	}
	res, err := p.out.wait(ctx)
	if _, _, settled := p.out.get(); !settled {
		return nil, err // ctx ended first
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, closedHandle("pending call")
	}
	if res != nil && !p.taken {
		p.taken = true
		p.c.handles.handedOut(res.d.cleanup.rec)
	}
	return res, err
}

func (p *PendingCall) live() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return closedHandle("pending call")
	}
	return nil
}

// Cancel asks the router to cancel the call and returns its state. After
// any state but Completed, Result fails with CALL_GONE.
func (p *PendingCall) Cancel(ctx context.Context) (wire.CancelState, error) {
	if err := p.live(); err != nil {
		return 0, err
	}
	var ok wire.CancelOK
	if err := p.c.do(ctx, request{op: wire.OpRPCCancel, body: &wire.Cancel{CallID: p.id}, reply: &ok}); err != nil {
		return 0, err
	}
	if ok.State != wire.Completed {
		dropEntry(&p.c.mu, &p.c.calls, p.id, p)
		disp := wire.DispatchUnknown
		if ok.State == wire.CancelledBeforeDispatch {
			disp = wire.NotDispatched
		}
		p.finish(nil, &wire.BusError{Code: wire.ErrCallGone, Dispatch: disp, Message: "call cancelled: " + ok.State.String()})
	}
	return ok.State, nil
}

// Close abandons the call: an unfinished call gets a best-effort cancel and
// any result that still arrives is consumed. A result already returned by
// Result is the caller's to Close. Idempotent.
func (p *PendingCall) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.abandon = true
	res, taken, settled := p.out.v, p.taken, p.settled
	p.mu.Unlock()
	if !settled {
		p.c.fireAndForget(wire.OpRPCCancel, &wire.Cancel{CallID: p.id})
	} else if res != nil && !taken {
		res.Close()
	}
	return nil
}

func (c *conn) Call(ctx context.Context, target, method string, payload any, opts ...CallOption) (*PendingCall, error) {
	raw, err := encodePayload(payload)
	if err != nil {
		return nil, err
	}
	o := callOptions(opts)
	return sendAttached(c, o.atts, func(watts []wire.Attachment, undo func()) (*PendingCall, error) {
		return c.call(ctx, target, o.pin, method, raw, watts, undo)
	})
}

// call admits one call with attachments in wire form; undo gives back the
// owners they hold, when the router's answer comes after ctx ended.
func (c *conn) call(ctx context.Context, target string, pin wire.ServiceInc, method string, raw wire.RawJSON,
	watts []wire.Attachment, undo func()) (*PendingCall, error) {
	p := &PendingCall{c: c, out: oneShot[*Result]{done: make(chan struct{})}}
	body := &wire.Call{Target: target, Method: method, Payload: raw}
	if pin != 0 {
		body.ExpectedIncarnation = wire.Some(pin)
	}
	// The call id is taken as the command is queued (under the client
	// lock), so concurrent calls reach the router in id order; the call is
	// registered first because its result can follow admission at once.
	assign := func() {
		c.nextCall++
		p.id = wire.CallID(c.nextCall)
		body.CallID = p.id
		c.calls[p.id] = p
	}
	var ok wire.CallOK
	err := c.do(ctx, request{op: wire.OpRPCCall, body: body, atts: watts, reply: &ok, orphan: func(err error) {
		undo()
		if err == nil { // admitted after the caller gave up
			p.Close()
		}
	}, prepare: assign})
	id := p.id
	if err != nil {
		if !isCtxErr(err) {
			takeEntry(&c.mu, &c.calls, id)
		} else {
			p.mu.Lock()
			p.abandon = true
			p.mu.Unlock()
		}
		return nil, err
	}
	p.incarnation = ok.ServiceIncarnation
	return p, nil
}

func (c *conn) CallAndWait(ctx context.Context, target, method string, payload any, opts ...CallOption) (*Result, error) {
	p, err := c.Call(ctx, target, method, payload, opts...)
	if err != nil {
		return nil, err
	}
	res, err := p.Result(ctx)
	if err != nil {
		p.Close()
	}
	return res, err
}

// isCtxErr reports a local deadline or cancellation: the operation's
// outcome at the router is still unknown.
func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

func (c *conn) onResult(r *wire.Result, arts attachSet) error {
	p := takeEntry(&c.mu, &c.calls, r.CallID)
	g := c.deliveryGuard(r.DeliveryID, arts)
	res := &Result{Responder: r.Responder,
		ServiceIncarnation: r.ServiceIncarnation, Outcome: r.Outcome.Clone(),
		delivery: delivery{c: c, d: delivered{what: "result", g: g}, arts: arts}}
	res.d.cleanup = watch(c, res, "Result", g, g.drop)
	if p == nil {
		res.Close() // nobody waits: consume it
		return nil
	}
	p.finish(res, nil)
	return nil
}
