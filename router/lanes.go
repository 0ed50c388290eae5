package router

import (
	"github.com/flybus/flybus/fastpath"
	"github.com/flybus/flybus/wire"
)

// conn is one connection's state inside the core. Its outbound lanes are
// pulled by the connection's writer under the router lock:
//
//  1. control: replies and notices, bounded by maxControlFrames/Bytes;
//  2. rpc: results for this client and requests for its services, taking
//     turns, services round robin;
//  3. topic: subscription messages, subscriptions round robin.
//
// Control frames always go first: they answer the client's own commands
// (and a few notices), so only the client itself can keep that lane busy.
// A topic frame passes the RPC lane after topicStarve consecutive
// higher-priority frames, so RPC traffic cannot starve topic data.
//
// Every field is routing-core state, read and written only by a step,
// under the router's lock (Router.mu); id and bound never change after
// accept. The shell reaches the connection's transport through its shell,
// never through conn.
type conn struct {
	id    wire.ConnID
	bound string // launcher-bound client id, or "" when unbound

	helloDone bool
	ident     wire.Identity
	grants    Grants
	ext       uint8 // the extensions granted at hello (extAwaitTopic, extPresence, extQuietConsume)
	anyCmd    bool
	lastCmd   uint64
	anyCall   bool
	callWM    wire.CallID
	dlvNext   uint64           // next delivery serial; everything below was issued
	busNext   uint64           // next router envelope serial
	minor     wire.Opt[uint32] // selected at hello: every envelope to the connection is written in it

	closing    bool // no further input is processed; the writer ends after the control lane
	overflowed bool // the control lane overflowed: closed when the step settles
	gone       bool // the transport is finished
	dirty      bool // queued on core.dirty

	control      []outItem // control[ctrlHead:] is the lane; the array is reused once it drains
	ctrlHead     int
	controlBytes int
	results      []*call
	services     []*service
	rr           int  // next service to consider for dispatch
	resultsTurn  bool // results and requests alternate
	highStreak   int  // higher-priority frames since the last topic frame
	subs         []*subscription
	subRR        int      // next subscription to consider
	published    []*topic // topics this connection published on (extension presence), each once
	queuedBytes  int      // bounded subscriptions' queued delivery bytes
	calls        map[wire.CallID]*call
	holds        map[wire.HoldID]*hold
	holdNext     uint64 // every own-<n> up to this was issued
	dlvs         map[wire.DeliveryID]dlvRef
	caps         map[wire.DeliveryID]*call // reply capabilities by request delivery
	closeWritten bool
	// bodyFree holds reply and notice buffers already written, for the
	// next ones: a steady stream of replies allocates nothing.
	bodyFree [][]byte
}

// takeBody returns an empty buffer for a control body.
func (c *conn) takeBody() []byte {
	if n := len(c.bodyFree); n > 0 {
		b := c.bodyFree[n-1]
		c.bodyFree[n-1] = nil
		c.bodyFree = c.bodyFree[:n-1]
		return b
	}
	return nil
}

// recycle takes back the control bodies of frames its writer has encoded.
func (c *conn) recycle(bodies [][]byte) {
	for _, b := range bodies {
		// Bounded as fastpath says; a larger body is left to the collector.
		if cap(b) <= fastpath.FreeBodyBytes && len(c.bodyFree) < fastpath.FreeBodies {
			c.bodyFree = append(c.bodyFree, b[:0])
		}
	}
}

// dlvRef is what a delivery id of this connection roots.
type dlvRef struct {
	call   *call
	result bool // the caller's result delivery, not a service's request
	sub    *subscription
	msg    *topicMsg
	arts   []*artifact // the distinct artifacts this delivery roots
}

// outItem is a pre-encoded reply or notice.
type outItem struct {
	kind       wire.EnvKind
	op         wire.Op
	replyTo    wire.Opt[wire.MsgID]
	body       []byte
	closeAfter bool
}

func newConn(id wire.ConnID, bound string) *conn {
	return &conn{id: id, bound: bound, dlvNext: 1, busNext: 1,
		calls: map[wire.CallID]*call{}, dlvs: map[wire.DeliveryID]dlvRef{}, caps: map[wire.DeliveryID]*call{},
		holds: map[wire.HoldID]*hold{}}
}

// owners counts the roots and capabilities the connection holds against
// maxOwnersPerClient.
func (c *conn) owners() int { return len(c.dlvs) + len(c.caps) + len(c.holds) }

// hasRoom reports whether the connection can take n more owners within
// limit. Results admitted for it but not yet written count: each becomes
// a delivery it owns.
func (c *conn) hasRoom(n, limit int) bool { return c.owners()+len(c.results)+n <= limit }

// issued reports whether delivery id d was ever handed to this connection.
func (c *conn) issued(d wire.DeliveryID) bool { return d != 0 && uint64(d) < c.dlvNext }

// frame is one envelope ready to encode outside the lock. Everything it
// references is immutable once pulled.
type frame struct {
	hdr        wire.Header
	raw        wire.RawJSON
	req        wire.Request
	res        wire.Result
	msg        wire.TopicMessage
	atts       []wire.Attachment // source attachments; owners become the delivery id on the wire
	closeAfter bool
}

const topicStarve = 16

// popFront takes the head of a queue of at most a few dozen entries. It
// shifts the rest down rather than reslicing past the head, so the queue
// keeps its array: a steady push-then-pop allocates nothing.
func popFront[T any](q *[]T) T {
	s := *q
	head := s[0]
	n := copy(s, s[1:])
	var zero T
	s[n] = zero
	*q = s[:n]
	return head
}

// pickRoundRobin returns the first of xs, starting at *rr, that is ready,
// and moves *rr past it, so that queues take turns.
func pickRoundRobin[T any](xs []T, rr *int, ready func(T) bool) (T, bool) {
	n := len(xs)
	for i := range n {
		if x := xs[(*rr+i)%n]; ready(x) {
			*rr = (*rr + i + 1) % n
			return x, true
		}
	}
	var zero T
	return zero, false
}

// deliveryID is the delivery a frame carries, for rewriting attachment
// owners.
func (f *frame) deliveryID() wire.DeliveryID {
	switch f.hdr.Op {
	case wire.OpRPCRequest:
		return f.req.DeliveryID
	case wire.OpRPCResult:
		return f.res.DeliveryID
	}
	return f.msg.DeliveryID
}

// body is the frame's body: a delivery's typed one, or the control lane's
// encoded bytes. The kind decides, not the op: a refusal of a command that
// named a delivery op carries that op too.
func (f *frame) body() wire.Body {
	if f.hdr.Kind != wire.KindDelivery {
		return &f.raw
	}
	switch f.hdr.Op {
	case wire.OpRPCRequest:
		return &f.req
	case wire.OpRPCResult:
		return &f.res
	case wire.OpTopicMessage:
		return &f.msg
	}
	return &f.raw
}

// pull moves up to cap(dst)-len(dst) frames off c's lanes in write order,
// assigning router envelope ids as it goes so they increase on the wire.
// Dispatching a request happens here: this is the moment its bytes are
// about to reach the service.
func (k *core) pull(c *conn, dst []frame) []frame {
	for len(dst) < cap(dst) && !c.closeWritten {
		f, ok := k.next(c)
		if !ok {
			break
		}
		f.hdr.ID = c.busNext
		f.hdr.Minor = c.minor
		c.busNext++
		dst = append(dst, f)
		if f.closeAfter {
			c.closeWritten = true
		}
	}
	return dst
}

func (k *core) next(c *conn) (frame, bool) {
	if c.ctrlHead < len(c.control) {
		it := c.control[c.ctrlHead]
		c.control[c.ctrlHead] = outItem{}
		c.ctrlHead++
		if c.ctrlHead == len(c.control) {
			c.control, c.ctrlHead = c.control[:0], 0
		}
		c.controlBytes -= len(it.body) + controlOverhead
		c.highStreak++
		return frame{hdr: wire.Header{Kind: it.kind, Op: it.op, ReplyTo: it.replyTo}, raw: it.body, closeAfter: it.closeAfter}, true
	}
	if c.closing {
		return frame{}, false
	}
	if c.highStreak >= topicStarve {
		if f, ok := k.nextTopicMessage(c); ok {
			c.highStreak = 0
			return f, true
		}
	}
	// RPC lane: results and requests take turns.
	for range 2 {
		c.resultsTurn = !c.resultsTurn
		if c.resultsTurn {
			if f, ok := k.nextResult(c); ok {
				c.highStreak++
				return f, true
			}
		} else if f, ok := k.nextRequest(c); ok {
			c.highStreak++
			return f, true
		}
	}
	if f, ok := k.nextTopicMessage(c); ok {
		c.highStreak = 0
		return f, true
	}
	return frame{}, false
}

func (k *core) nextResult(c *conn) (frame, bool) {
	if len(c.results) == 0 {
		return frame{}, false
	}
	cl := popFront(&c.results)
	d := wire.DeliveryID(c.dlvNext)
	c.dlvNext++
	cl.resDlv = d
	c.dlvs[d] = dlvRef{call: cl, result: true, arts: cl.resArts}
	return frame{hdr: wire.Header{Kind: wire.KindDelivery, Op: wire.OpRPCResult},
		res: wire.Result{DeliveryID: d, CallID: cl.id, Responder: cl.responder,
			ServiceIncarnation: cl.svc.inc, Outcome: cl.outcome}, atts: cl.resAtts}, true
}

// nextRequest dispatches the head of the next service queue, round robin,
// that has an in-flight credit and owner room (a request root and a reply
// capability) on this connection.
func (k *core) nextRequest(c *conn) (frame, bool) {
	if len(c.services) == 0 || !c.hasRoom(2, k.limits.MaxOwnersPerClient) {
		return frame{}, false
	}
	s, ok := pickRoundRobin(c.services, &c.rr, (*service).ready)
	if !ok {
		return frame{}, false
	}
	cl := popFront(&s.queue)
	d := wire.DeliveryID(c.dlvNext)
	c.dlvNext++
	cl.state, cl.reqDlv = callDispatched, d
	s.inflight++
	c.dlvs[d] = dlvRef{call: cl, arts: cl.arts}
	c.caps[d] = cl
	var caller wire.Identity
	if cl.caller != nil {
		caller = cl.caller.ident
	}
	return frame{hdr: wire.Header{Kind: wire.KindDelivery, Op: wire.OpRPCRequest},
		req: wire.Request{DeliveryID: d, CallID: cl.id, Caller: caller, Target: s.name,
			ServiceIncarnation: s.inc, Method: cl.method, Payload: cl.payload}, atts: cl.atts}, true
}
