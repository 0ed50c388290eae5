package router

// The simulation's client model: what each client knows of its resources,
// learned from the frames it reads. See sim_test.go.

import (
	"cmp"
	"maps"
	"slices"

	"github.com/flybus/flybus/wire"
)

// simClient is one client id across its incarnations.
type simClient struct {
	id    string
	incs  int
	speed int         // how eagerly its writer is scheduled, 1..4
	sess  *simSession // the transport it uses or is opening, nil when none

	weights []int // per simOps entry
}

// simSession is one transport and what its client learned from it.
type simSession struct {
	cl      *simClient // nil for a stray transport whose hello must fail
	c       *conn
	name    string
	hello   bool // bus.hello sent
	ready   bool // its HelloOK was read
	closed  bool // connection.closing was read
	closing bool // the trace said the core is closing it
	parked  bool // the writer waits for a wake-up
	bound   string
	stray   int // the failing hello a stray sends

	msg     uint64
	lastBus uint64
	lastDlv wire.DeliveryID
	dec     wire.Decoder
	env     wire.Envelope
	pending map[uint64]*simCmd

	services map[string]wire.ServiceInc
	calls    map[wire.CallID]*simCall
	callNext wire.CallID
	caps     map[wire.DeliveryID]wire.CallID
	dlvs     map[wire.DeliveryID]*simDlv
	retired  []wire.DeliveryID
	subs     map[wire.SubID]*simSub
	holds    map[uint64]*simHold
	released []uint64

	// The extensions the hello asked for, and those granted.
	asked              []string
	awaitExt, presence bool
	quiet              bool       // quiet-consume: an accepted consume has no reply
	quietQ             []simQuiet // quiet consumes sent, in order, not yet taken as done
}

type simCall struct {
	target     string
	accepted   bool
	resultSeen bool
}

type simDlv struct {
	op        wire.Op
	call      wire.CallID
	sub       wire.SubID
	atts      []wire.Attachment
	consuming int // delivery.consumed commands naming it await their replies
}

type simSub struct {
	topic   string
	inc     wire.TopicInc // 0 while it awaits a declaration
	mode    wire.Mode
	lastSeq uint64
	// await-topic: the subscription was made with awaitTopic; known are
	// the incarnations it was told of, msgInc the latest a message named.
	await  bool
	known  []wire.TopicInc
	msgInc wire.TopicInc
	// presence: the count the latest subscription.publishers gave, and
	// whether one came yet (one must follow the subscribe reply).
	publishers int
	counted    bool
}

// simHold is an explicit owner: a writer (staging or sealing) or a hold on
// a sealed artifact.
type simHold struct {
	writer    bool
	seals     int // artifact.seal commands awaiting their replies
	releasing int // artifact.release commands naming it await their replies
	art       wire.ArtifactID
	gen       uint64 // a writer's: the generation it writes
	size      uint64
	ctype     string
	ref       wire.ArtifactRef
}

// simCmd is a command awaiting its reply, with what the reply is checked
// against.
type simCmd struct {
	op       wire.Op
	expectOK bool // the reply must be ok
	mustFail bool // the reply must be a refusal
	tampered string
	name     string
	inc      wire.ServiceInc
	call     wire.CallID
	reused   bool
	dlv      wire.DeliveryID
	dlvs     []wire.DeliveryID
	owners   []wire.OwnerID
	own      uint64
	gen      uint64
	size     uint64
	ctype    string
	ref      wire.ArtifactRef
	topic    string
	mode     wire.Mode
	await    bool
	sub      wire.SubID
}

// ---- frames the client reads ----------------------------------------------

// receive encodes a pulled frame exactly as the writer does and has the
// client decode and interpret it.
func (s *sim) receive(ss *simSession, f *frame) {
	var atts []wire.Attachment
	for _, a := range f.atts {
		a.OwnerID = wire.DeliveryOwner(f.deliveryID())
		atts = append(atts, a)
	}
	b, err := wire.AppendFrame(s.frameBuf[:0], f.hdr, f.body(), atts)
	if err != nil {
		s.fail("frames", "%s: the writer cannot encode %s %s: %v", ss.name, f.hdr.Kind, f.hdr.Op, err)
		return
	}
	s.frameBuf = b
	env := &ss.env
	if err := ss.dec.Decode(b[wire.FrameHeaderLen:], env); err != nil {
		s.fail("frames", "%s: router frame %s %s does not decode: %v", ss.name, f.hdr.Kind, f.hdr.Op, err)
		return
	}
	if ss.closed {
		s.fail("frames", "%s: %s %s after connection.closing", ss.name, env.Kind, env.Op)
	}
	if env.ID <= ss.lastBus {
		s.fail("frames", "%s: bus-%d after bus-%d", ss.name, env.ID, ss.lastBus)
	}
	ss.lastBus = env.ID
	if f.closeAfter != (env.Op == wire.OpConnectionClosing) {
		s.fail("frames", "%s: %s with closeAfter=%v", ss.name, env.Op, f.closeAfter)
	}
	switch env.Kind {
	case wire.KindReply:
		s.onReply(ss, env)
	case wire.KindDelivery:
		s.onDelivery(ss, env)
	case wire.KindNotice:
		s.onNotice(ss, env)
	default:
		s.fail("frames", "%s: router sent a %s", ss.name, env.Kind)
	}
}

// replyValue is a fresh decode target for the reply to op, the one
// wire.Shapes names (the simulation's clients and the fuzz harness decode
// replies into it).
func replyValue(op wire.Op) wire.Body {
	for _, sh := range wire.Shapes() {
		if sh.Op == op && sh.Reply != nil {
			return sh.Reply
		}
	}
	return &wire.Released{}
}

func (s *sim) onReply(ss *simSession, env *wire.Envelope) {
	id := uint64(env.ReplyTo.V)
	cmd := ss.pending[id]
	if cmd == nil {
		s.fail("frames", "%s: reply %s to msg-%d, which awaits no reply", ss.name, env.Op, id)
		return
	}
	delete(ss.pending, id)
	defer s.applyQuiet(ss) // quiet consumes sent after this command take effect now
	if env.Op != cmd.op {
		s.fail("frames", "%s: msg-%d was %s, its reply says %s", ss.name, id, cmd.op, env.Op)
	}
	v := replyValue(cmd.op)
	be, err := env.DecodeReply(v)
	if err != nil {
		s.fail("frames", "%s: malformed %s reply: %v", ss.name, cmd.op, err)
		return
	}
	s.outcome(cmd.op, be)
	if be != nil {
		s.logf("%s < bus-%d %s msg-%d refused %s: %s", ss.name, env.ID, cmd.op, id, be.Code, be.Message)
		if cmd.expectOK {
			s.fail("refusals", "%s: msg-%d %s refused, but the client owns what it names: %v", ss.name, id, cmd.op, be)
		}
	} else {
		detail := string(v.AppendJSON(nil))
		if ok, hello := v.(*wire.HelloOK); hello {
			detail = ok.ConnectionID.String()
		}
		s.logf("%s < bus-%d %s msg-%d ok %s", ss.name, env.ID, cmd.op, id, detail)
		if cmd.mustFail {
			s.fail("refusals", "%s: msg-%d %s admitted despite %s", ss.name, id, cmd.op, cmp.Or(cmd.tampered, "being invalid"))
		}
	}
	switch cmd.op {
	case wire.OpHello:
		if be == nil {
			ok := v.(*wire.HelloOK)
			if ok.ConnectionID != ss.c.id || ok.Limits != s.lim || ok.StoreID != s.k.storeID {
				s.fail("frames", "%s: HelloOK names %s, %s and limits %+v", ss.name, ok.ConnectionID, ok.StoreID, ok.Limits)
			}
			var want []string
			for _, e := range ss.asked {
				if wire.KnownExtension(e) {
					want = append(want, e)
				}
			}
			if !slices.Equal(ok.Extensions, want) {
				s.fail("frames", "%s: asked for extensions %v, granted %v", ss.name, ss.asked, ok.Extensions)
			}
			ss.awaitExt = slices.Contains(ok.Extensions, wire.ExtAwaitTopic)
			ss.presence = slices.Contains(ok.Extensions, wire.ExtPresence)
			ss.quiet = slices.Contains(ok.Extensions, wire.ExtQuietConsume)
			ss.ready = true
		}
	case wire.OpServiceRegister:
		if be == nil {
			inc := v.(*wire.RegisterOK).ServiceIncarnation
			if _, dup := ss.services[cmd.name]; dup {
				s.fail("client-view", "%s: registered %s twice", ss.name, cmd.name)
			}
			ss.services[cmd.name] = inc
			s.svcIncs[cmd.name] = inc
		}
	case wire.OpServiceUnregister:
		if be == nil {
			inc, held := ss.services[cmd.name]
			mine := held && inc == cmd.inc
			if removed := v.(*wire.Removed).Removed; removed != mine {
				s.fail("client-view", "%s: unregister %s %s says removed=%v; the client holds it: %v",
					ss.name, cmd.name, cmd.inc, removed, mine)
			}
			if mine {
				delete(ss.services, cmd.name)
			}
		}
	case wire.OpRPCCall:
		if cmd.reused {
			break
		}
		cl := ss.calls[cmd.call]
		switch {
		case cl == nil || cl.accepted:
			s.fail("client-view", "%s: reply for %s, which the client does not await", ss.name, cmd.call)
		case be != nil:
			delete(ss.calls, cmd.call)
		default:
			cl.accepted = true
		}
	case wire.OpRPCReply:
		call, live := ss.caps[cmd.dlv]
		live = live && call == cmd.call
		if be == nil {
			if !live {
				s.fail("client-view", "%s: reply to %s on %s routed without a capability", ss.name, cmd.call, cmd.dlv)
			}
			delete(ss.caps, cmd.dlv)
		} else if live && be.Code == wire.ErrCallGone {
			s.fail("client-view", "%s: reply on the live capability %s refused CALL_GONE", ss.name, cmd.dlv)
		}
	case wire.OpRPCCancel:
		s.onCancel(ss, cmd, be, v.(*wire.CancelOK))
	case wire.OpRPCResponderRelease:
		call, live := ss.caps[cmd.dlv]
		live = live && call == cmd.call
		if be == nil {
			if n := v.(*wire.Released).Released; (n == 1) != live {
				s.fail("client-view", "%s: responder.release of %s released %d; the client holds it: %v", ss.name, cmd.dlv, n, live)
			}
			if live {
				delete(ss.caps, cmd.dlv)
			}
		} else if live {
			s.fail("client-view", "%s: responder.release of the live %s refused", ss.name, cmd.dlv)
		}
	case wire.OpSubscribe:
		if be == nil {
			ok := v.(*wire.SubscribeOK)
			if _, dup := ss.subs[ok.SubscriptionID]; dup {
				s.fail("client-view", "%s: %s issued twice", ss.name, ok.SubscriptionID)
			}
			sub := &simSub{topic: cmd.topic, mode: cmd.mode, await: cmd.await, counted: !ss.presence}
			if ok.TopicIncarnation.Valid {
				sub.inc = ok.TopicIncarnation.V
				sub.known = []wire.TopicInc{sub.inc}
			} else if !cmd.await {
				s.fail("frames", "%s: %s has no topic incarnation, and it does not await one", ss.name, ok.SubscriptionID)
			}
			ss.subs[ok.SubscriptionID] = sub
		}
	case wire.OpUnsubscribe:
		if be == nil {
			id := cmd.sub
			_, mine := ss.subs[id]
			if removed := v.(*wire.Removed).Removed; removed != mine {
				s.fail("client-view", "%s: unsubscribe %s says removed=%v; the client holds it: %v", ss.name, id, removed, mine)
			}
			delete(ss.subs, id)
		}
	case wire.OpDeliveryConsumed:
		s.onConsumed(ss, cmd, be, v.(*wire.Released))
	case wire.OpArtifactAllocate:
		if be == nil {
			ok := v.(*wire.AllocateOK)
			if _, dup := ss.holds[ok.OwnerID.N]; dup || ok.OwnerID.Delivery {
				s.fail("client-view", "%s: allocate handed out %s again", ss.name, ok.OwnerID)
			}
			// A closing connection abandons the writer before the client
			// reads the grant.
			if !ss.c.closing && (s.files[ok.WriteLocation.RelativePath] != simStaging || ok.WriteLocation.StoreID != s.k.storeID) {
				s.fail("files", "%s: allocate's write location %+v is no staging file", ss.name, ok.WriteLocation)
			}
			ss.holds[ok.OwnerID.N] = &simHold{writer: true, art: ok.ArtifactID, gen: ok.Generation, size: cmd.size, ctype: cmd.ctype}
		}
	case wire.OpArtifactSeal:
		s.onSeal(ss, cmd, be, v.(*wire.SealOK))
	case wire.OpArtifactOpen:
		if be == nil {
			// The file must exist while the client still owns the artifact.
			loc := v.(*wire.OpenOK).ReadLocation
			if ss.stillOwns(cmd.owners[0]) && (s.files[loc.RelativePath] != simSealed || loc.StoreID != s.k.storeID) {
				s.fail("files", "%s: open of %s returned %+v, which is no sealed file", ss.name, cmd.ref.ArtifactID, loc)
			}
		}
	case wire.OpArtifactRetain:
		if be == nil {
			own := v.(*wire.RetainOK).OwnerID
			if _, dup := ss.holds[own.N]; dup || own.Delivery {
				s.fail("client-view", "%s: retain handed out %s again", ss.name, own)
			}
			ss.holds[own.N] = &simHold{ref: cmd.ref, art: cmd.ref.ArtifactID}
			s.stale = append(s.stale, cmd.ref)
		} else if !cmd.mustFail && be.Code != wire.ErrQuotaExceeded {
			s.fail("refusals", "%s: retain of an owned %s refused: %v", ss.name, cmd.ref.ArtifactID, be)
		}
	case wire.OpArtifactRelease:
		s.onRelease(ss, cmd, be, v.(*wire.Released))
	}
}

func (s *sim) onCancel(ss *simSession, cmd *simCmd, be *wire.BusError, ok *wire.CancelOK) {
	if be != nil {
		s.fail("refusals", "%s: rpc.cancel refused: %v", ss.name, be)
		return
	}
	cl := ss.calls[cmd.call]
	active := cl != nil && cl.accepted
	switch ok.State {
	case wire.CancelledBeforeDispatch, wire.ExecutionUnknown:
		if !active || cl.resultSeen {
			s.fail("client-view", "%s: cancel of %s says %s, but the client saw it end", ss.name, cmd.call, ok.State)
		}
		delete(ss.calls, cmd.call)
	case wire.Completed:
		if !active {
			s.fail("client-view", "%s: cancel of %s says completed, but the client saw it end", ss.name, cmd.call)
		}
	case wire.CallGoneState:
		if active {
			s.fail("client-view", "%s: cancel of %s says call-gone, but no result or failure reached the client", ss.name, cmd.call)
		}
	}
}

func (s *sim) onConsumed(ss *simSession, cmd *simCmd, be *wire.BusError, ok *wire.Released) {
	held := func(d wire.DeliveryID) (wire.DeliveryID, bool) { return d, ss.dlvs[d] != nil }
	for _, d := range simOnGiveBack(s, ss, cmd, be, ok, cmd.dlvs, ss.consuming, held) {
		s.consumedQuietly(ss, d)
	}
}

// consumedQuietly forgets a delivery the client consumed, as the client
// does once the consume is accepted (or, under quiet-consume, sent).
func (s *sim) consumedQuietly(ss *simSession, d wire.DeliveryID) {
	dv := ss.dlvs[d]
	delete(ss.dlvs, d)
	ss.retire(d)
	if dv.op == wire.OpRPCResult {
		if cl := ss.calls[dv.call]; cl == nil || !cl.resultSeen {
			s.fail("client-view", "%s: consumed the result of %s, which the client does not await", ss.name, dv.call)
		}
		delete(ss.calls, dv.call)
	}
}

func (ss *simSession) retire(d wire.DeliveryID) {
	ss.retired = append(ss.retired, d)
	if len(ss.retired) > 16 {
		ss.retired = ss.retired[1:]
	}
}

// onSeal tells, as a client would, a refused seal (the writer stays) from a
// failed one (the store's I/O failed and the writer is gone).
func (s *sim) onSeal(ss *simSession, cmd *simCmd, be *wire.BusError, ok *wire.SealOK) {
	h := ss.holds[cmd.own]
	if h != nil && h.writer {
		h.seals--
	}
	if be == nil {
		if h == nil || !h.writer {
			s.fail("client-view", "%s: seal ok for own-%d, which is no writer of the client", ss.name, cmd.own)
			return
		}
		// A pooled store's copying seal moves the artifact to another slot.
		moved := s.pool && ok.Ref.ArtifactID != h.art
		if ok.OwnerID != wire.HoldOwner(wire.HoldID(cmd.own)) || ok.Ref.ByteLength != h.size ||
			ok.Ref.ContentType != h.ctype || ok.Ref.StoreID != s.k.storeID ||
			!moved && (ok.Ref.ArtifactID != h.art || ok.Ref.Generation != h.gen) {
			s.fail("frames", "%s: seal of %s answered %+v", ss.name, h.art, ok)
		}
		ss.holds[cmd.own] = &simHold{ref: ok.Ref, art: ok.Ref.ArtifactID, releasing: h.releasing}
		s.stale = append(s.stale, ok.Ref)
		return
	}
	switch {
	case be.Code == wire.ErrStoreFailure || be.Code == wire.ErrArtifactMismatch && h != nil && cmd.gen == h.gen:
		if h != nil && h.writer {
			delete(ss.holds, cmd.own)
			ss.released = append(ss.released, cmd.own)
		}
	case be.Code == wire.ErrArtifactGone:
		// In pool mode a seal naming a generation other than the writer's
		// is as gone as a collected artifact; the writer stays.
		if h != nil && h.writer && !(s.pool && cmd.gen != h.gen) {
			s.fail("client-view", "%s: seal of own-%d says ARTIFACT_GONE, but the client still holds the writer", ss.name, cmd.own)
		}
	}
}

func (s *sim) onRelease(ss *simSession, cmd *simCmd, be *wire.BusError, ok *wire.Released) {
	held := func(o wire.OwnerID) (uint64, bool) { return o.N, ss.holds[o.N] != nil }
	for _, own := range simOnGiveBack(s, ss, cmd, be, ok, cmd.owners, ss.releasing, held) {
		delete(ss.holds, own)
		ss.released = append(ss.released, own)
	}
}

// consuming is the count of delivery.consumed commands awaiting their
// replies that name d, or nil when the client does not hold d.
func (ss *simSession) consuming(d wire.DeliveryID) *int {
	if dv := ss.dlvs[d]; dv != nil {
		return &dv.consuming
	}
	return nil
}

// releasing is the count of artifact.release commands awaiting their
// replies that name o, or nil when o is no hold the client has.
func (ss *simSession) releasing(o wire.OwnerID) *int {
	if h := ss.holds[o.N]; h != nil && !o.Delivery {
		return &h.releasing
	}
	return nil
}

// simPending adds n to the count that counter finds for each of ids.
func simPending[I any](ids []I, counter func(I) *int, n int) {
	for _, id := range ids {
		if c := counter(id); c != nil {
			*c += n
		}
	}
}

// simOnGiveBack checks the reply to a command that gives back ids the
// client holds (delivery.consumed, artifact.release). Only a tampered one
// may be refused, and then its ids are no longer pending (pending finds
// their counts); otherwise it must have released exactly the ids the client
// held, which it returns sorted and once each, keyed as held says.
func simOnGiveBack[I any, K cmp.Ordered](s *sim, ss *simSession, cmd *simCmd, be *wire.BusError, ok *wire.Released,
	ids []I, pending func(I) *int, held func(I) (K, bool)) []K {
	if be != nil {
		if !cmd.mustFail {
			s.fail("refusals", "%s: %s of issued ids refused: %v", ss.name, cmd.op, be)
		}
		simPending(ids, pending, -1)
		return nil
	}
	keys := map[K]bool{}
	for _, id := range ids {
		if k, ok := held(id); ok {
			keys[k] = true
		}
	}
	if ok.Released != uint64(len(keys)) {
		s.fail("client-view", "%s: %s %v released %d; the client held %d of them", ss.name, cmd.op, ids, ok.Released, len(keys))
	}
	return slices.Sorted(maps.Keys(keys))
}

// decodeBody decodes env's body into v, failing "frames" when it is
// malformed.
func (s *sim) decodeBody(ss *simSession, env *wire.Envelope, v wire.Body) {
	if be := env.DecodeBody(v); be != nil {
		s.fail("frames", "%s: malformed %s: %v", ss.name, env.Op, be)
	}
}

func (s *sim) onDelivery(ss *simSession, env *wire.Envelope) {
	var dlv wire.DeliveryID
	atts := slices.Clone(env.Attachments)
	switch env.Op {
	case wire.OpRPCRequest:
		var req wire.Request
		s.decodeBody(ss, env, &req)
		dlv = req.DeliveryID
		if ss.services[req.Target] != req.ServiceIncarnation {
			s.fail("client-view", "%s: request for %s %s, which the client does not serve", ss.name, req.Target, req.ServiceIncarnation)
		}
		ss.caps[dlv] = req.CallID
		ss.dlvs[dlv] = &simDlv{op: env.Op, call: req.CallID, atts: atts}
		s.logf("%s < bus-%d rpc.request %s %s from %s/%s payload=%dB atts=%s", ss.name, env.ID, dlv, req.CallID,
			req.Caller.ClientID, req.Caller.ClientIncarnation, len(req.Payload), simAtts(atts))
	case wire.OpRPCResult:
		var res wire.Result
		s.decodeBody(ss, env, &res)
		dlv = res.DeliveryID
		cl := ss.calls[res.CallID]
		if cl == nil || !cl.accepted || cl.resultSeen {
			s.fail("client-view", "%s: result for %s, which the client does not await", ss.name, res.CallID)
		} else {
			cl.resultSeen = true
		}
		ss.dlvs[dlv] = &simDlv{op: env.Op, call: res.CallID, atts: atts}
		s.logf("%s < bus-%d rpc.result %s %s outcome=%dB atts=%s", ss.name, env.ID, dlv, res.CallID, len(res.Outcome), simAtts(atts))
	case wire.OpTopicMessage:
		var m wire.TopicMessage
		s.decodeBody(ss, env, &m)
		dlv = m.DeliveryID
		sub := ss.subs[m.SubscriptionID]
		switch {
		case sub == nil:
			s.fail("client-view", "%s: message for %s, which the client does not hold", ss.name, m.SubscriptionID)
		case sub.topic != m.Topic || !slices.Contains(sub.known, m.TopicIncarnation):
			s.fail("frames", "%s: %s of %s %v carries %s %s", ss.name, m.SubscriptionID, sub.topic, sub.known, m.Topic, m.TopicIncarnation)
		case m.TopicIncarnation < sub.msgInc:
			// A queue is FIFO across a deletion: the old incarnation's
			// messages come first.
			s.fail("frames", "%s: %s message of %s after one of %s", ss.name, m.SubscriptionID, m.TopicIncarnation, sub.msgInc)
		case m.TopicIncarnation == sub.msgInc && m.TopicSequence <= sub.lastSeq:
			s.fail("frames", "%s: %s sequence %d after %d", ss.name, m.SubscriptionID, m.TopicSequence, sub.lastSeq)
		case sub.mode == wire.ModeBounded && m.Replaced != 0:
			s.fail("frames", "%s: bounded %s reports %d replaced", ss.name, m.SubscriptionID, m.Replaced)
		default:
			sub.msgInc, sub.lastSeq = m.TopicIncarnation, m.TopicSequence
		}
		ss.dlvs[dlv] = &simDlv{op: env.Op, sub: m.SubscriptionID, atts: atts}
		s.logf("%s < bus-%d topic.message %s %s %s seq=%d replaced=%d payload=%dB atts=%s", ss.name, env.ID, dlv,
			m.SubscriptionID, m.Topic, m.TopicSequence, m.Replaced, len(m.Payload), simAtts(atts))
	default:
		s.fail("frames", "%s: delivery op %s", ss.name, env.Op)
	}
	if dlv <= ss.lastDlv {
		s.fail("frames", "%s: %s after %s", ss.name, dlv, ss.lastDlv)
	}
	ss.lastDlv = dlv
	for _, a := range atts {
		if a.OwnerID != wire.DeliveryOwner(dlv) || a.Ref.StoreID != s.k.storeID {
			s.fail("frames", "%s: attachment %s of %s is owned by %s in %s", ss.name, a.Name, dlv, a.OwnerID, a.Ref.StoreID)
		}
		s.stale = append(s.stale, a.Ref)
	}
	if len(s.stale) > 64 {
		s.stale = s.stale[len(s.stale)-64:]
	}
}

func (s *sim) onNotice(ss *simSession, env *wire.Envelope) {
	switch env.Op {
	case wire.OpCallFailed:
		var n wire.CallFailed
		s.decodeBody(ss, env, &n)
		s.logf("%s < bus-%d call.failed %s %s %s", ss.name, env.ID, n.CallID, n.Code, n.Dispatch)
		cl := ss.calls[n.CallID]
		if cl == nil || !cl.accepted || cl.resultSeen {
			s.fail("client-view", "%s: call.failed for %s, which the client does not await", ss.name, n.CallID)
		}
		delete(ss.calls, n.CallID)
	case wire.OpRouteRemoved:
		var n wire.RouteRemoved
		s.decodeBody(ss, env, &n)
		s.logf("%s < bus-%d route.removed %s %s %s", ss.name, env.ID, n.Name, n.ServiceIncarnation, n.Reason)
	case wire.OpSubscriptionClosed:
		var n wire.SubscriptionClosed
		s.decodeBody(ss, env, &n)
		s.logf("%s < bus-%d subscription.closed %s %s", ss.name, env.ID, n.SubscriptionID, n.Reason)
		if ss.subs[n.SubscriptionID] == nil {
			s.fail("client-view", "%s: subscription.closed for %s, which the client does not hold", ss.name, n.SubscriptionID)
		}
		delete(ss.subs, n.SubscriptionID)
	case wire.OpSubscriptionTopic:
		var n wire.SubscriptionTopic
		s.decodeBody(ss, env, &n)
		s.logf("%s < bus-%d subscription.topic %s %s %s", ss.name, env.ID, n.SubscriptionID, n.Topic, n.TopicIncarnation)
		switch sub := ss.subs[n.SubscriptionID]; {
		case !ss.awaitExt:
			s.fail("frames", "%s: subscription.topic without extension await-topic", ss.name)
		case sub == nil || !sub.await || sub.topic != n.Topic:
			s.fail("client-view", "%s: subscription.topic for %s, which the client does not hold awaiting %s", ss.name, n.SubscriptionID, n.Topic)
		case n.TopicIncarnation.Valid == (sub.inc != 0):
			// Declarations and deletions alternate.
			s.fail("frames", "%s: %s on %s is told %s", ss.name, n.SubscriptionID, sub.inc, n.TopicIncarnation)
		default:
			sub.inc = n.TopicIncarnation.V
			if n.TopicIncarnation.Valid {
				sub.known = append(sub.known, sub.inc)
			}
		}
	case wire.OpSubscriptionPublishers:
		var n wire.SubscriptionPublishers
		s.decodeBody(ss, env, &n)
		s.logf("%s < bus-%d subscription.publishers %s %s %d", ss.name, env.ID, n.SubscriptionID, n.Topic, n.Publishers)
		switch sub := ss.subs[n.SubscriptionID]; {
		case !ss.presence:
			s.fail("frames", "%s: subscription.publishers without extension presence", ss.name)
		case sub == nil || sub.topic != n.Topic:
			s.fail("client-view", "%s: subscription.publishers for %s, which the client does not hold on %s", ss.name, n.SubscriptionID, n.Topic)
		case sub.counted && int(n.Publishers) == sub.publishers:
			s.fail("frames", "%s: %s told %d publishers again", ss.name, n.SubscriptionID, n.Publishers)
		default:
			sub.publishers, sub.counted = int(n.Publishers), true
		}
	case wire.OpConnectionClosing:
		var n wire.ConnectionClosing
		s.decodeBody(ss, env, &n)
		s.logf("%s < bus-%d connection.closing %s: %s", ss.name, env.ID, n.Code, n.Message)
		s.outcomes["closing:"+n.Code.String()]++
		ss.closed = true
	default:
		s.fail("frames", "%s: notice op %s", ss.name, env.Op)
	}
}
