package router

import (
	"maps"
	"math"
	"slices"

	"github.com/flybus/flybus/wire"
)

// service is one live registration.
type service struct {
	name        string
	inc         wire.ServiceInc
	conn        *conn
	maxQueued   int
	maxInFlight int
	queue       []*call // admitted, waiting for first dispatch, FIFO
	inflight    int     // dispatched, request delivery not yet consumed
	removed     bool
	// For Details: calls admitted, and calls that ended in call.failed.
	calls, failed uint64
}

// ready reports whether s has a queued call and an in-flight credit.
func (s *service) ready() bool { return len(s.queue) > 0 && s.inflight < s.maxInFlight }

// unqueue removes a call that is still waiting for dispatch.
func (s *service) unqueue(cl *call) {
	for i, x := range s.queue {
		if x == cl {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			return
		}
	}
}

type callState uint8

const (
	callQueued     callState = iota + 1 // in its service's queue
	callDispatched                      // request written; no reply admitted
	callReplied                         // result admitted; queued or delivered to the caller
)

// call is one RPC's correlation record. The caller side holds it in
// caller.calls from admission until its result is consumed, it is cancelled
// or it fails; the service side holds it through the request delivery root
// and the reply capability.
type call struct {
	id      wire.CallID
	caller  *conn // nil once detached
	svc     *service
	method  string
	payload []byte // owned copy
	atts    []wire.Attachment
	arts    []*artifact // roots of the queue entry, then of the request delivery
	state   callState

	reqDlv wire.DeliveryID // on svc.conn once dispatched

	// result, once admitted
	responder wire.Identity
	outcome   []byte
	resAtts   []wire.Attachment
	resArts   []*artifact
	resDlv    wire.DeliveryID // on the caller's connection once written
}

func (k *core) opRegister(c *conn, env *wire.Envelope, b *wire.Register) *wire.BusError {
	if err := denied(c.grants.Register, "register", b.Name); err != nil {
		return err
	}
	if int(b.MaxQueued) > k.limits.MaxServiceQueued || int(b.MaxInFlight) > k.limits.MaxServiceInFlight {
		return wire.NewError(wire.ErrInvalidEnvelope, 0, "maxQueued/maxInFlight exceed the router's limits (%d/%d)",
			k.limits.MaxServiceQueued, k.limits.MaxServiceInFlight)
	}
	if _, taken := k.services[b.Name]; taken {
		return wire.NewError(wire.ErrConflict, 0, "service %s is already registered", b.Name)
	}
	if len(k.services) >= k.limits.MaxServices {
		return wire.NewError(wire.ErrQuotaExceeded, 0, "maxServices registrations exist")
	}
	k.nextSvc++
	s := &service{name: b.Name, inc: wire.ServiceInc(k.nextSvc), conn: c,
		maxQueued: int(b.MaxQueued), maxInFlight: int(b.MaxInFlight)}
	k.services[b.Name] = s
	c.services = append(c.services, s)
	k.reply(c, env, &wire.RegisterOK{ServiceIncarnation: s.inc})
	return nil
}

func (k *core) opUnregister(c *conn, env *wire.Envelope, b *wire.Unregister) *wire.BusError {
	s := k.services[b.Name]
	if s == nil || s.conn != c || s.inc != b.ServiceIncarnation {
		k.reply(c, env, &wire.Removed{Removed: false})
		return nil
	}
	k.removeService(s, "unregistered", false)
	for i, x := range c.services {
		if x == s {
			c.services = append(c.services[:i], c.services[i+1:]...)
			break
		}
	}
	k.reply(c, env, &wire.Removed{Removed: true})
	return nil
}

// removeService ends a registration: queued calls fail not-dispatched, and
// every caller with a queued or dispatched call on it hears route.removed.
// Dispatched calls stay answerable while a reply capability exists; on a
// disconnect the capabilities go too (releaseServiceSide).
func (k *core) removeService(s *service, reason string, disconnect bool) {
	s.removed = true
	delete(k.services, s.name)
	told := map[*conn]bool{}
	tell := func(c *conn) {
		if c != nil && !told[c] {
			told[c] = true
			k.notice(c, wire.OpRouteRemoved, &wire.RouteRemoved{Name: s.name, ServiceIncarnation: s.inc, Reason: reason})
		}
	}
	for _, cl := range s.queue {
		tell(cl.caller)
	}
	for _, cl := range s.conn.caps {
		if cl.svc == s && cl.state == callDispatched {
			tell(cl.caller)
		}
	}
	for _, cl := range s.queue {
		k.dropRoots(cl.arts)
		k.failCall(cl, wire.ErrNoService, wire.NotDispatched, "service "+s.name+" was "+reason)
	}
	s.queue = nil
}

// failCall ends an attached call with call.failed and retires its caller
// slot.
func (k *core) failCall(cl *call, code wire.ErrorCode, disp wire.Dispatch, msg string) {
	c := cl.caller
	if c == nil {
		return
	}
	delete(c.calls, cl.id)
	cl.caller = nil
	if cl.svc != nil {
		cl.svc.failed++
	}
	k.notice(c, wire.OpCallFailed, &wire.CallFailed{CallID: cl.id, Code: code, Message: msg, Dispatch: disp})
}

// maxSerial is the longest delivery id the router adds to a request or a
// result, used to size the delivery before admitting what would make it.
const maxSerial = math.MaxUint64

func (k *core) opCall(c *conn, env *wire.Envelope, b *wire.Call) *wire.BusError {
	// The watermark advances for any syntactically valid id, admitted or not.
	if c.anyCall && b.CallID <= c.callWM {
		return wire.NewError(wire.ErrInvalidEnvelope, 0, "call id %s reused or decreasing", b.CallID)
	}
	c.anyCall, c.callWM = true, b.CallID
	if err := deniedCall(c.grants.Call, b.Target, b.Method); err != nil {
		return err
	}
	s := k.services[b.Target]
	if s == nil {
		return wire.NewError(wire.ErrNoService, 0, "no service %s", b.Target)
	}
	if b.ExpectedIncarnation.Valid && b.ExpectedIncarnation.V != s.inc {
		return wire.NewError(wire.ErrTargetChanged, 0, "service %s is now %s", b.Target, s.inc)
	}
	if len(c.calls) >= k.limits.MaxActiveCallsPerClient {
		return wire.NewError(wire.ErrBackpressure, 0, "maxActiveCallsPerClient calls are active")
	}
	// maxQueued counts calls waiting for an in-flight credit. Calls in the
	// queue that a free credit will dispatch as soon as the service's
	// writer pulls them are not waiting for one.
	if free := max(s.maxInFlight-s.inflight, 0); len(s.queue) >= s.maxQueued+free {
		return wire.NewError(wire.ErrBackpressure, 0, "service %s queue is full", b.Target)
	}
	req := wire.Request{DeliveryID: maxSerial, CallID: b.CallID, Caller: c.ident, Target: s.name,
		ServiceIncarnation: s.inc, Method: b.Method, Payload: b.Payload}
	if n := k.deliverySize(wire.OpRPCRequest, &req, env.Attachments); n > wire.MaxEnvelopeBytes {
		return wire.NewError(wire.ErrInvalidEnvelope, 0, "the request delivery would be %d bytes, over 65536", n)
	}
	arts, aerr := k.checkAttachments(c, env.Attachments)
	if aerr != nil {
		return aerr
	}
	cl := &call{id: b.CallID, caller: c, svc: s, method: b.Method, payload: k.payloads.copyOf(b.Payload),
		state: callQueued, arts: k.artLists.copyOf(arts), atts: k.attLists.copyOf(env.Attachments)}
	k.addRoots(arts)
	s.queue = append(s.queue, cl)
	c.calls[cl.id] = cl
	k.stats.callsTotal++
	s.calls++
	k.reply(c, env, &wire.CallOK{Accepted: true, ServiceIncarnation: s.inc})
	k.markDirty(s.conn)
	return nil
}

// replyCap finds c's reply capability for call id on the request delivery
// dlv: OWNER_INVALID if dlv was never issued to c, nil if no capability
// for that call remains (replied, released, or another call's delivery).
func (c *conn) replyCap(id wire.CallID, dlv wire.DeliveryID) (*call, *wire.BusError) {
	if !c.issued(dlv) {
		return nil, wire.NewError(wire.ErrOwnerInvalid, 0, "request delivery %s was never issued here", dlv)
	}
	if cl := c.caps[dlv]; cl != nil && cl.id == id {
		return cl, nil
	}
	return nil, nil
}

func (k *core) opReply(c *conn, env *wire.Envelope, b *wire.Reply) *wire.BusError {
	cl, err := c.replyCap(b.CallID, b.RequestDeliveryID)
	if err != nil {
		return err
	}
	if cl == nil {
		return wire.NewError(wire.ErrCallGone, wire.Dispatched, "no reply capability for %s on %s", b.CallID, b.RequestDeliveryID)
	}
	arts, aerr := k.checkAttachments(c, env.Attachments)
	if aerr != nil {
		return aerr
	}
	caller := cl.caller
	if caller == nil {
		// The caller detached: the reply goes nowhere and creates no roots.
		delete(c.caps, b.RequestDeliveryID)
		k.reply(c, env, &wire.Routed{Routed: false})
		return nil
	}
	res := wire.Result{DeliveryID: maxSerial, CallID: cl.id, Responder: c.ident,
		ServiceIncarnation: cl.svc.inc, Outcome: b.Outcome}
	if n := k.deliverySize(wire.OpRPCResult, &res, env.Attachments); n > wire.MaxEnvelopeBytes {
		return wire.NewError(wire.ErrInvalidEnvelope, 0, "the result delivery would be %d bytes, over 65536", n)
	}
	if !caller.hasRoom(1, k.limits.MaxOwnersPerClient) {
		return wire.NewError(wire.ErrQuotaExceeded, 0, "the caller holds maxOwnersPerClient owners")
	}
	delete(c.caps, b.RequestDeliveryID)
	cl.state = callReplied
	cl.responder = c.ident
	cl.outcome = k.payloads.copyOf(b.Outcome)
	cl.resArts = k.artLists.copyOf(arts)
	if len(env.Attachments) > 0 {
		cl.resAtts = k.attLists.copyOf(env.Attachments)
	}
	k.addRoots(arts)
	caller.results = append(caller.results, cl)
	k.markDirty(caller)
	k.reply(c, env, &wire.Routed{Routed: true})
	return nil
}

func (k *core) opCancel(c *conn, env *wire.Envelope, b *wire.Cancel) *wire.BusError {
	state := wire.CallGoneState
	if cl := c.calls[b.CallID]; cl != nil {
		switch cl.state {
		case callQueued:
			cl.svc.unqueue(cl)
			k.dropRoots(cl.arts)
			delete(c.calls, cl.id)
			cl.caller = nil
			state = wire.CancelledBeforeDispatch
		case callDispatched:
			delete(c.calls, cl.id)
			cl.caller = nil
			state = wire.ExecutionUnknown
		case callReplied:
			state = wire.Completed // the client consumes the result it will not show
		}
	}
	k.reply(c, env, &wire.CancelOK{State: state})
	return nil
}

func (k *core) opResponderRelease(c *conn, env *wire.Envelope, b *wire.ResponderRelease) *wire.BusError {
	cl, err := c.replyCap(b.CallID, b.RequestDeliveryID)
	if err != nil {
		return err
	}
	if cl == nil {
		k.reply(c, env, &wire.Released{Released: 0})
		return nil
	}
	delete(c.caps, b.RequestDeliveryID)
	k.capabilityGone(cl)
	k.reply(c, env, &wire.Released{Released: 1})
	return nil
}

// capabilityGone settles an attached call whose last reply capability went
// without a reply.
func (k *core) capabilityGone(cl *call) {
	if cl.state != callDispatched {
		return
	}
	if cl.svc.removed {
		k.failCall(cl, wire.ErrNoService, wire.Dispatched, "service "+cl.svc.name+" went away without replying")
	} else {
		k.failCall(cl, wire.ErrCallGone, wire.Dispatched, "the responder released the call without replying")
	}
}

func (k *core) opConsumed(c *conn, env *wire.Envelope, b *wire.Consumed) *wire.BusError {
	for _, d := range b.DeliveryIDs {
		if !c.issued(d) {
			return wire.NewError(wire.ErrOwnerInvalid, 0, "delivery %s was never issued here", d)
		}
	}
	var n uint64
	for _, d := range b.DeliveryIDs {
		if k.consume(c, d) {
			n++
		}
	}
	if c.ext&extQuietConsume != 0 {
		return nil // accepted: no reply (extension quiet-consume)
	}
	k.scratch.released = wire.Released{Released: n}
	k.reply(c, env, &k.scratch.released)
	return nil
}

// consume releases one delivery root; false when it was already gone.
func (k *core) consume(c *conn, d wire.DeliveryID) bool {
	ref, ok := c.dlvs[d]
	if !ok {
		return false
	}
	delete(c.dlvs, d)
	k.dropRoots(ref.arts)
	// An owner of c is free: a delivery its budget held back may go now.
	// (A reply used to wake the writer anyway; a quiet consume has none.)
	k.markDirty(c)
	if s := ref.sub; s != nil {
		s.inflight-- // a credit returns, even to a closed subscription
		return true
	}
	if cl := ref.call; cl != nil {
		if ref.result {
			delete(c.calls, cl.id) // the call is complete
		} else {
			cl.svc.inflight--
			k.markDirty(cl.svc.conn) // a credit came back
		}
	}
	return true
}

// detachCaller handles a caller's connection ending: queued calls leave
// their queues, dispatched ones detach (the service may still reply, to no
// one), results are dropped.
func (k *core) detachCaller(c *conn) {
	for _, id := range slices.Sorted(maps.Keys(c.calls)) {
		cl := c.calls[id]
		if cl.state == callQueued {
			cl.svc.unqueue(cl)
			k.dropRoots(cl.arts)
		}
		cl.caller = nil
		delete(c.calls, id)
	}
	for _, cl := range c.results {
		k.dropRoots(cl.resArts) // admitted results never written
	}
	c.results = nil
}

// releaseServiceSide drops a closing connection's request roots and reply
// capabilities. A dispatched call whose service left without replying fails
// NO_SERVICE, dispatched.
func (k *core) releaseServiceSide(c *conn) {
	for _, d := range slices.Sorted(maps.Keys(c.dlvs)) {
		ref := c.dlvs[d]
		delete(c.dlvs, d)
		for _, a := range ref.arts {
			a.retire = true // the program may still map it
		}
		k.dropRoots(ref.arts)
		if ref.call != nil && !ref.result {
			ref.call.svc.inflight--
		}
	}
	// In delivery order, so a caller hears its failures in a stable order.
	ds := make([]wire.DeliveryID, 0, len(c.caps))
	for d := range c.caps {
		ds = append(ds, d)
	}
	slices.Sort(ds)
	for _, d := range ds {
		cl := c.caps[d]
		delete(c.caps, d)
		if cl.state == callDispatched {
			k.failCall(cl, wire.ErrNoService, wire.Dispatched, "service "+cl.svc.name+" disconnected without replying")
		}
	}
}
