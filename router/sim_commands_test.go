package router

// The simulation's command generator: what each client sends, valid or
// tampered. See sim_test.go.

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/flybus/flybus/wire"
)

var (
	simServices = []string{"svc.a", "svc.b", "svc.c", "svc.d"}
	simTopics   = []string{"t.a", "t.b", "t.c", "t.d"}
)

// send encodes a command, decodes it as the connection's reader does and
// steps the core with it.
func (s *sim) send(ss *simSession, op wire.Op, body wire.Body, atts []wire.Attachment, cmd *simCmd) {
	ss.msg++
	cmd.op = op
	ss.pending[ss.msg] = cmd
	s.out = wire.AppendEnvelope(s.out[:0], wire.Header{ID: ss.msg, Kind: wire.KindCommand, Op: op}, body, atts)
	s.deliver(ss, s.out)
}

func (s *sim) deliver(ss *simSession, frame []byte) {
	err := s.dec.Decode(frame, &s.env)
	var pe *wire.ProtocolError
	var be *wire.BusError
	switch {
	case errors.As(err, &pe):
		s.stepCore(input{kind: inViolation, conn: ss.c, msg: pe.Msg})
	case err != nil && !errors.As(err, &be):
		s.stepCore(input{kind: inViolation, conn: ss.c, msg: err.Error()})
	default:
		s.stepCore(input{kind: inCommand, conn: ss.c, env: &s.env, bodyErr: be})
	}
}

func (s *sim) command() bool {
	var cands []*simSession
	for _, ss := range s.sessions {
		if ss.ready && !ss.c.closing {
			cands = append(cands, ss)
		}
	}
	if len(cands) == 0 {
		return false
	}
	ss := cands[s.rng.IntN(len(cands))]
	for {
		if op := simOps[simWeighted(s.rng, ss.cl.weights, func(w int) int { return w })]; op.run(s, ss) {
			return true
		}
	}
}

// simOp is a command a client sends; run returns false when the client has
// nothing to send it about.
type simOp struct {
	run    func(*sim, *simSession) bool
	weight int  // base weight; each client scales it
	gives  bool // gives ownership back: hoarders rarely do
}

var simOps = [...]simOp{
	{(*sim).opRegister, 4, false}, {(*sim).opUnregister, 2, false},
	{(*sim).opCall, 14, false}, {(*sim).opReply, 10, false}, {(*sim).opCancel, 3, false},
	{(*sim).opResponderRelease, 2, false},
	{(*sim).opDeclare, 3, false}, {(*sim).opClearOrDelete, 2, false},
	{(*sim).opSubscribe, 6, false}, {(*sim).opUnsubscribe, 2, false}, {(*sim).opPublish, 12, false},
	{(*sim).opConsumed, 14, true},
	{(*sim).opAllocate, 6, false}, {(*sim).opSeal, 6, false}, {(*sim).opOpenOrRetain, 5, false},
	{(*sim).opRelease, 5, true},
	{(*sim).opMalformed, 1, false},
}

// personality scales every client's command weights at random, so some
// call or publish much more than others and some hoard deliveries and
// holds, pressing the owner budgets.
func (s *sim) personality() []int {
	hoarder := s.rng.IntN(3) == 0
	w := make([]int, len(simOps))
	for i, op := range simOps {
		w[i] = op.weight * (1 + s.rng.IntN(3))
		if hoarder && op.gives {
			w[i] /= 4
		}
	}
	return w
}

// serviceName and topicName mostly name what exists, as a client that
// knows its peers would, and sometimes anything.
func (s *sim) serviceName() string {
	if len(s.k.services) > 0 && s.rng.IntN(5) != 0 {
		return slices.Sorted(maps.Keys(s.k.services))[s.rng.IntN(len(s.k.services))]
	}
	return simServices[s.rng.IntN(len(simServices))]
}

func (s *sim) topicName() string {
	if len(s.k.topics) > 0 && s.rng.IntN(5) != 0 {
		return slices.Sorted(maps.Keys(s.k.topics))[s.rng.IntN(len(s.k.topics))]
	}
	return simTopics[s.rng.IntN(len(simTopics))]
}

// upTo returns 1..limit, and limit+1 one time in ten.
func (s *sim) upTo(limit int) uint32 {
	if s.rng.IntN(10) == 0 {
		return uint32(limit + 1)
	}
	return uint32(1 + s.rng.IntN(limit))
}

// payload returns an object payload: mostly small, sometimes large enough
// to press the byte budgets, now and then just under what fits a frame
// (fill > 0 is the room to leave for the rest of the envelope).
func (s *sim) payload(fill int) wire.RawJSON {
	n := 0
	switch r := s.rng.IntN(100); {
	case r < 60:
		return wire.RawJSON(fmt.Sprintf(`{"n":%d}`, s.rng.IntN(1000)))
	case r < 85:
		n = 100 + s.rng.IntN(2000)
	case r < 98 || fill <= 0:
		n = 6000 + s.rng.IntN(20000)
	default:
		n = max(wire.MaxEnvelopeBytes-fill-s.rng.IntN(400), 0)
	}
	return wire.RawJSON(`{"p":"` + strings.Repeat("x", n) + `"}`)
}

func (s *sim) opRegister(ss *simSession) bool {
	b := &wire.Register{Name: simServices[s.rng.IntN(len(simServices))],
		MaxQueued: s.upTo(s.lim.MaxServiceQueued), MaxInFlight: s.upTo(s.lim.MaxServiceInFlight)}
	s.logf("%s > service.register %s q=%d f=%d", ss.name, b.Name, b.MaxQueued, b.MaxInFlight)
	s.send(ss, wire.OpServiceRegister, b, nil, &simCmd{name: b.Name})
	return true
}

func (s *sim) opUnregister(ss *simSession) bool {
	name, inc, ok := simPick(s.rng, ss.services)
	if !ok || s.rng.IntN(6) == 0 {
		name = simServices[s.rng.IntN(len(simServices))]
		inc = s.svcIncs[name] + wire.ServiceInc(s.rng.IntN(2))
	}
	s.logf("%s > service.unregister %s %s", ss.name, name, inc)
	s.send(ss, wire.OpServiceUnregister, &wire.Unregister{Name: name, ServiceIncarnation: inc}, nil,
		&simCmd{name: name, inc: inc})
	return true
}

func (s *sim) opCall(ss *simSession) bool {
	b := &wire.Call{Target: s.serviceName(), Method: "m"}
	cmd := &simCmd{}
	if ss.callNext > 0 && s.rng.IntN(25) == 0 {
		b.CallID = wire.CallID(1 + s.rng.IntN(int(ss.callNext))) // reused or decreasing
		cmd.reused = true
	} else {
		ss.callNext += wire.CallID(1 + s.rng.IntN(2))
		b.CallID = ss.callNext
	}
	if s.rng.IntN(3) == 0 {
		inc := s.svcIncs[b.Target]
		if s.rng.IntN(4) == 0 {
			inc++
		}
		b.ExpectedIncarnation = wire.Some(inc)
	}
	atts, tampered := s.attachments(ss)
	b.Payload = s.payload(500 + 70*len(atts))
	cmd.call, cmd.name, cmd.tampered, cmd.mustFail = b.CallID, b.Target, tampered, tampered != "" || cmd.reused
	if !cmd.reused {
		ss.calls[b.CallID] = &simCall{target: b.Target}
	}
	s.logf("%s > rpc.call %s %s pin=%s payload=%dB atts=%s%s", ss.name, b.CallID, b.Target,
		b.ExpectedIncarnation, len(b.Payload), simAtts(atts), simTag(tampered, cmd.reused, "reused id"))
	s.send(ss, wire.OpRPCCall, b, atts, cmd)
	return true
}

func (s *sim) opReply(ss *simSession) bool {
	dlv, call, ok := simPick(s.rng, ss.caps)
	cmd := &simCmd{}
	switch r := s.rng.IntN(20); {
	case !ok && r != 0 && (r != 2 || len(ss.retired) == 0):
		return false
	case r == 0:
		dlv, call, cmd.tampered = ss.lastDlv+1+wire.DeliveryID(s.rng.IntN(3)), 1, "a never-issued delivery"
	case r == 1:
		call, cmd.tampered = call+1000, "the wrong call id"
	case r == 2 && len(ss.retired) > 0:
		dlv, cmd.tampered = ss.retired[s.rng.IntN(len(ss.retired))], "a retired delivery"
		if c, live := ss.caps[dlv]; live {
			call = c + 1000
		}
	}
	atts, tampered := s.attachments(ss)
	if cmd.tampered == "" {
		cmd.tampered = tampered
	}
	b := &wire.Reply{ReplyCapability: wire.ReplyCapability{CallID: call, RequestDeliveryID: dlv}, Outcome: s.payload(500 + 70*len(atts))}
	cmd.dlv, cmd.call, cmd.mustFail = dlv, call, cmd.tampered != ""
	s.logf("%s > rpc.reply %s %s outcome=%dB atts=%s%s", ss.name, call, dlv, len(b.Outcome), simAtts(atts),
		simTag(cmd.tampered, false, ""))
	s.send(ss, wire.OpRPCReply, b, atts, cmd)
	return true
}

func (s *sim) opCancel(ss *simSession) bool {
	id, _, ok := simPick(s.rng, ss.calls)
	if !ok || s.rng.IntN(8) == 0 {
		id = wire.CallID(1 + s.rng.IntN(int(ss.callNext)+3))
	}
	s.logf("%s > rpc.cancel %s", ss.name, id)
	s.send(ss, wire.OpRPCCancel, &wire.Cancel{CallID: id}, nil, &simCmd{call: id})
	return true
}

func (s *sim) opResponderRelease(ss *simSession) bool {
	dlv, call, ok := simPick(s.rng, ss.caps)
	cmd := &simCmd{}
	switch r := s.rng.IntN(8); {
	case !ok && r != 0:
		return false
	case r == 0:
		dlv, call, cmd.mustFail = ss.lastDlv+1, 1, true
	case r == 1:
		call += 1000
	}
	cmd.dlv, cmd.call = dlv, call
	s.logf("%s > rpc.responder.release %s %s", ss.name, call, dlv)
	s.send(ss, wire.OpRPCResponderRelease, &wire.ResponderRelease{ReplyCapability: wire.ReplyCapability{CallID: call, RequestDeliveryID: dlv}}, nil, cmd)
	return true
}

func (s *sim) opDeclare(ss *simSession) bool {
	b := &wire.Declare{Name: simTopics[s.rng.IntN(len(simTopics))], Retained: wire.RetainNone}
	if s.rng.IntN(2) == 0 {
		b.Retained = wire.RetainLatest
	}
	s.logf("%s > topic.declare %s retained=%s", ss.name, b.Name, b.Retained)
	s.send(ss, wire.OpTopicDeclare, b, nil, &simCmd{topic: b.Name})
	return true
}

func (s *sim) opClearOrDelete(ss *simSession) bool {
	name := s.topicName()
	op := wire.OpTopicClear
	if s.rng.IntN(2) == 0 {
		op = wire.OpTopicDelete
	}
	s.logf("%s > %s %s", ss.name, op, name)
	s.send(ss, op, &wire.TopicName{Name: name}, nil, &simCmd{topic: name})
	return true
}

func (s *sim) opSubscribe(ss *simSession) bool {
	b := &wire.Subscribe{Topic: s.topicName(), ReplayLatest: s.rng.IntN(2) == 0}
	if s.rng.IntN(2) == 0 {
		b.Mode, b.MaxQueued = wire.ModeLatest, 1
		if s.rng.IntN(15) == 0 {
			b.MaxQueued = 2
		}
		b.MaxInFlight = s.upTo(s.lim.MaxLatestInFlight)
	} else {
		b.Mode = wire.ModeBounded
		b.MaxQueued, b.MaxInFlight = s.upTo(s.lim.MaxBoundedQueued), s.upTo(s.lim.MaxBoundedInFlight)
	}
	cmd := &simCmd{topic: b.Topic, mode: b.Mode}
	switch r := s.rng.IntN(40); {
	case ss.awaitExt && r < 20:
		// Mostly a name nobody declared yet, or one a deletion may free.
		b.AwaitTopic, cmd.await = wire.Some(r < 18), r < 18
		if r < 8 {
			b.Topic = simTopics[s.rng.IntN(len(simTopics))]
			cmd.topic = b.Topic
		}
	case !ss.awaitExt && r == 0:
		b.AwaitTopic, cmd.mustFail, cmd.tampered = wire.Some(true), true, "awaitTopic without the extension"
	}
	s.logf("%s > subscribe %s %s q=%d f=%d replay=%v await=%s%s", ss.name, b.Topic, b.Mode, b.MaxQueued, b.MaxInFlight, b.ReplayLatest,
		b.AwaitTopic, simTag(cmd.tampered, false, ""))
	s.send(ss, wire.OpSubscribe, b, nil, cmd)
	return true
}

func (s *sim) opUnsubscribe(ss *simSession) bool {
	id, _, ok := simPick(s.rng, ss.subs)
	if !ok || s.rng.IntN(6) == 0 {
		id = wire.SubID(1 + s.rng.IntN(int(s.k.nextSub)+2))
	}
	s.logf("%s > unsubscribe %s", ss.name, id)
	s.send(ss, wire.OpUnsubscribe, &wire.Unsubscribe{SubscriptionID: id}, nil, &simCmd{sub: id})
	return true
}

func (s *sim) opPublish(ss *simSession) bool {
	atts, tampered := s.attachments(ss)
	b := &wire.Publish{Topic: s.topicName(), Payload: s.payload(300 + 70*len(atts))}
	s.logf("%s > publish %s payload=%dB atts=%s%s", ss.name, b.Topic, len(b.Payload), simAtts(atts), simTag(tampered, false, ""))
	s.send(ss, wire.OpPublish, b, atts, &simCmd{topic: b.Topic, tampered: tampered, mustFail: tampered != ""})
	return true
}

func (s *sim) opConsumed(ss *simSession) bool {
	ids := simPickSome(s.rng, ss.dlvs, 4)
	if len(ss.retired) > 0 && (len(ids) == 0 || s.rng.IntN(6) == 0) {
		ids = append(ids, ss.retired[s.rng.IntN(len(ss.retired))])
	}
	cmd := &simCmd{}
	if len(ids) == 0 && s.rng.IntN(5) != 0 {
		return false
	}
	if len(ids) == 0 || s.rng.IntN(30) == 0 {
		ids = append(ids, ss.lastDlv+1+wire.DeliveryID(s.rng.IntN(5)))
		cmd.mustFail, cmd.tampered = true, "a never-issued delivery"
	}
	cmd.dlvs = ids
	simSendGiveBack(s, ss, wire.OpDeliveryConsumed, &wire.Consumed{DeliveryIDs: ids}, ids, ss.consuming, cmd)
	if ss.quiet && !cmd.mustFail {
		// Under quiet-consume only a refusal answers, and a consume of
		// issued ids is never refused: the client takes it as done where
		// its reply would have come, after the replies to what it sent
		// before, and checkView holds the core to it.
		delete(ss.pending, ss.msg)
		ss.quietQ = append(ss.quietQ, simQuiet{msg: ss.msg, dlvs: ids})
		s.applyQuiet(ss)
	}
	return true
}

// simQuiet is a consume sent under quiet-consume, not yet taken as done.
type simQuiet struct {
	msg  uint64
	dlvs []wire.DeliveryID
}

// applyQuiet takes as done the quiet consumes no earlier command's reply
// still precedes. Allocations and seals are left out: the router answers
// them after the store's I/O, later than commands sent after them, and
// their replies say nothing of deliveries or calls.
func (s *sim) applyQuiet(ss *simSession) {
	for len(ss.quietQ) > 0 {
		q := ss.quietQ[0]
		for id, cmd := range ss.pending {
			if id < q.msg && cmd.op != wire.OpArtifactAllocate && cmd.op != wire.OpArtifactSeal {
				return
			}
		}
		ss.quietQ = ss.quietQ[1:]
		simPending(q.dlvs, ss.consuming, -1)
		for _, d := range q.dlvs {
			if ss.dlvs[d] != nil {
				s.consumedQuietly(ss, d)
			}
		}
	}
}

// simSendGiveBack sends a command that gives back ids the client holds
// (delivery.consumed, artifact.release), counting it as pending for each
// of them that pending finds.
func simSendGiveBack[I any](s *sim, ss *simSession, op wire.Op, body wire.Body, ids []I, pending func(I) *int, cmd *simCmd) {
	simPending(ids, pending, 1)
	s.logf("%s > %s %v%s", ss.name, op, ids, simTag(cmd.tampered, false, ""))
	s.send(ss, op, body, nil, cmd)
}

func (s *sim) opAllocate(ss *simSession) bool {
	var size uint64
	switch r := s.rng.IntN(10); {
	case r < 7:
		size = uint64(s.rng.Int64N(int64(s.lim.MaxArtifactBytes/2) + 1))
	case r < 9:
		size = uint64(s.rng.Int64N(int64(s.lim.MaxArtifactBytes) + 1))
	default:
		size = s.lim.MaxArtifactBytes + 1 + uint64(s.rng.IntN(100))
	}
	ctype := [...]string{"application/octet-stream", "image/x-raw"}[s.rng.IntN(2)]
	s.logf("%s > artifact.allocate %dB %s", ss.name, size, ctype)
	s.send(ss, wire.OpArtifactAllocate, &wire.Allocate{ByteLength: size, ContentType: ctype}, nil,
		&simCmd{size: size, ctype: ctype})
	return true
}

func (s *sim) opSeal(ss *simSession) bool {
	var writers []uint64
	for _, own := range slices.Sorted(maps.Keys(ss.holds)) {
		if ss.holds[own].writer {
			writers = append(writers, own)
		}
	}
	if len(writers) == 0 {
		return false
	}
	own := writers[s.rng.IntN(len(writers))]
	h := ss.holds[own]
	b := &wire.Seal{Allocation: wire.Allocation{ArtifactID: h.art, Generation: h.gen, OwnerID: wire.HoldOwner(wire.HoldID(own))}}
	if s.rng.IntN(2) == 0 {
		var d wire.Digest
		for i := range d {
			d[i] = byte(s.rng.IntN(256))
		}
		b.Digest = wire.Some(d)
	}
	cmd := &simCmd{own: own}
	switch s.rng.IntN(25) {
	case 0:
		b.Generation, cmd.mustFail, cmd.tampered = h.gen+1, true, "another generation"
	case 1:
		b.OwnerID, cmd.mustFail, cmd.tampered = wire.DeliveryOwner(ss.lastDlv+1), true, "a delivery owner"
	case 2:
		b.ArtifactID, cmd.mustFail, cmd.tampered = h.art+1000, true, "another artifact id"
	}
	cmd.gen = b.Generation
	h.seals++
	pendingNote := ""
	if h.seals > 1 {
		pendingNote = " (another seal pending)"
	}
	s.logf("%s > artifact.seal %s own-%d digest=%v%s%s", ss.name, b.ArtifactID, own, b.Digest.Valid,
		simTag(cmd.tampered, false, ""), pendingNote)
	s.send(ss, wire.OpArtifactSeal, b, nil, cmd)
	return true
}

func (s *sim) opOpenOrRetain(ss *simSession) bool {
	op := wire.OpArtifactOpen
	if s.rng.IntN(2) == 0 {
		op = wire.OpArtifactRetain
	}
	owned := ss.owned()
	cmd := &simCmd{}
	var b wire.RefOwner
	if len(owned) > 0 && s.rng.IntN(8) != 0 {
		b = owned[s.rng.IntN(len(owned))]
		cmd.expectOK = op == wire.OpArtifactOpen
	} else if len(owned) == 0 && s.rng.IntN(4) != 0 {
		return false
	} else {
		var ok bool
		if b, cmd.tampered, ok = s.tamperedRef(ss); !ok {
			return false
		}
		cmd.mustFail = true
	}
	cmd.ref, cmd.owners = b.Ref, []wire.OwnerID{b.OwnerID}
	s.logf("%s > %s %s via %s%s", ss.name, op, b.Ref.ArtifactID, b.OwnerID, simTag(cmd.tampered, false, ""))
	s.send(ss, op, &b, nil, cmd)
	return true
}

func (s *sim) opRelease(ss *simSession) bool {
	var ids []wire.OwnerID
	for _, k := range simPickSome(s.rng, ss.holds, 3) {
		ids = append(ids, wire.HoldOwner(wire.HoldID(k)))
	}
	if len(ss.released) > 0 && (len(ids) == 0 || s.rng.IntN(5) == 0) {
		ids = append(ids, wire.HoldOwner(wire.HoldID(ss.released[s.rng.IntN(len(ss.released))])))
	}
	cmd := &simCmd{}
	switch s.rng.IntN(20) {
	case 0:
		ids = append(ids, wire.HoldOwner(1<<40))
		cmd.mustFail, cmd.tampered = true, "a never-issued hold"
	case 1:
		ids = append(ids, wire.DeliveryOwner(1))
		cmd.mustFail, cmd.tampered = true, "a delivery owner"
	}
	if len(ids) == 0 {
		return false
	}
	cmd.owners = ids
	simSendGiveBack(s, ss, wire.OpArtifactRelease, &wire.Release{OwnerIDs: ids}, ids, ss.releasing, cmd)
	return true
}

// opMalformed sends what a broken client would: a refusal that changes
// nothing, or a violation that closes the connection.
func (s *sim) opMalformed(ss *simSession) bool {
	owned := ss.owned()
	switch r := s.rng.IntN(11); {
	case r == 0 && len(owned) > 0:
		att := []wire.Attachment{{Name: "f0", Ref: owned[0].Ref, OwnerID: owned[0].OwnerID}}
		s.logf("%s > topic.declare with an attachment", ss.name)
		s.send(ss, wire.OpTopicDeclare, &wire.Declare{Name: "t.a", Retained: wire.RetainNone}, att, &simCmd{mustFail: true})
	case r == 1 && len(owned) > 0:
		att := []wire.Attachment{{Name: "f0", Ref: owned[0].Ref, OwnerID: owned[0].OwnerID},
			{Name: "f0", Ref: owned[0].Ref, OwnerID: owned[0].OwnerID}}
		s.logf("%s > publish with two attachments named f0", ss.name)
		s.send(ss, wire.OpPublish, &wire.Publish{Topic: "t.a", Payload: wire.RawJSON(`{}`)}, att, &simCmd{mustFail: true})
	case r < 8:
		s.logf("%s > service.register maxQueued=0", ss.name)
		s.send(ss, wire.OpServiceRegister, &wire.Register{Name: "svc.a", MaxQueued: 0, MaxInFlight: 1}, nil, &simCmd{mustFail: true})
	case r == 8:
		s.logf("%s > a second bus.hello (violation)", ss.name)
		s.send(ss, wire.OpHello, &wire.Hello{ClientID: ss.cl.id, ClientIncarnation: "again", SupportedMajors: []uint32{1}}, nil, &simCmd{})
		if !ss.c.closing {
			s.fail("conns", "%s: a second hello did not close the connection", ss.name)
		}
	case r == 9:
		s.logf("%s > a command reusing msg-%d (violation)", ss.name, ss.msg)
		s.out = wire.AppendEnvelope(s.out[:0], wire.Header{ID: ss.msg, Kind: wire.KindCommand, Op: wire.OpRPCCancel},
			&wire.Cancel{CallID: 1}, nil)
		s.deliver(ss, s.out)
		if !ss.c.closing {
			s.fail("conns", "%s: a repeated command id did not close the connection", ss.name)
		}
	default:
		s.logf("%s > a notice instead of a command (violation)", ss.name)
		ss.msg++
		s.out = wire.AppendEnvelope(s.out[:0], wire.Header{ID: ss.msg, Kind: wire.KindNotice, Op: wire.OpRouteRemoved},
			&wire.RouteRemoved{Name: "svc.a", ServiceIncarnation: 1, Reason: "x"}, nil)
		s.deliver(ss, s.out)
		if !ss.c.closing {
			s.fail("conns", "%s: a notice from a client did not close the connection", ss.name)
		}
	}
	return true
}

// owned lists the (ref, owner) pairs the client may name: its holds on
// sealed artifacts and the attachments of deliveries it has not consumed
// (nor asked to), in a stable order.
func (ss *simSession) owned() []wire.RefOwner {
	var out []wire.RefOwner
	for _, own := range slices.Sorted(maps.Keys(ss.holds)) {
		if h := ss.holds[own]; !h.writer && h.releasing == 0 {
			out = append(out, wire.RefOwner{Ref: h.ref, OwnerID: wire.HoldOwner(wire.HoldID(own))})
		}
	}
	for _, d := range slices.Sorted(maps.Keys(ss.dlvs)) {
		if ss.dlvs[d].consuming > 0 {
			continue
		}
		for _, a := range ss.dlvs[d].atts {
			out = append(out, wire.RefOwner{Ref: a.Ref, OwnerID: wire.DeliveryOwner(d)})
		}
	}
	return out
}

// stillOwns reports whether the client holds owner and has not asked to
// give it up.
func (ss *simSession) stillOwns(owner wire.OwnerID) bool {
	if ss.c.closing {
		return false
	}
	if owner.Delivery {
		dv := ss.dlvs[wire.DeliveryID(owner.N)]
		return dv != nil && dv.consuming == 0
	}
	h := ss.holds[owner.N]
	return h != nil && !h.writer && h.releasing == 0
}

// tamperedRef returns a (ref, owner) pair that must be refused, and why.
func (s *sim) tamperedRef(ss *simSession) (wire.RefOwner, string, bool) {
	owned := ss.owned()
	var writers []uint64
	for _, own := range slices.Sorted(maps.Keys(ss.holds)) {
		if h := ss.holds[own]; h.writer && h.seals == 0 {
			writers = append(writers, own)
		}
	}
	switch r := s.rng.IntN(6); {
	case r < 4 && len(owned) > 0:
		p := owned[s.rng.IntN(len(owned))]
		switch r {
		case 0:
			p.Ref.ByteLength++
			return p, "a wrong byteLength", true
		case 1:
			p.Ref.StoreID++
			return p, "another store", true
		case 2:
			if p.Ref.Digest.Valid {
				p.Ref.Digest.V[0]++
			} else {
				p.Ref.Digest = wire.Some(wire.Digest{1})
			}
			return p, "a wrong digest", true
		default:
			p.OwnerID = wire.HoldOwner(1 << 40)
			return p, "an owner never issued", true
		}
	case r == 4 && len(writers) > 0:
		own := writers[s.rng.IntN(len(writers))]
		h := ss.holds[own]
		ref := wire.ArtifactRef{StoreID: s.k.storeID, ArtifactID: h.art, Generation: h.gen, ByteLength: h.size, ContentType: h.ctype}
		return wire.RefOwner{Ref: ref, OwnerID: wire.HoldOwner(wire.HoldID(own))}, "an unsealed artifact", true
	case len(s.stale) > 0:
		ref := s.stale[s.rng.IntN(len(s.stale))]
		return wire.RefOwner{Ref: ref, OwnerID: wire.HoldOwner(1 << 40)}, "a stale ref and no owner", true
	}
	return wire.RefOwner{}, "", false
}

// attachments picks what a call, reply or publish carries: mostly nothing,
// otherwise refs the client owns, and now and then one that must be
// refused.
func (s *sim) attachments(ss *simSession) ([]wire.Attachment, string) {
	n := 0
	switch r := s.rng.IntN(20); {
	case r < 11:
		return nil, ""
	case r < 17:
		n = 1
	default:
		n = 2 + s.rng.IntN(3)
	}
	owned := ss.owned()
	var atts []wire.Attachment
	for i := range n {
		if len(owned) == 0 {
			break
		}
		p := owned[s.rng.IntN(len(owned))]
		atts = append(atts, wire.Attachment{Name: fmt.Sprintf("f%d", i), Ref: p.Ref, OwnerID: p.OwnerID})
	}
	if s.rng.IntN(8) == 0 {
		if p, why, ok := s.tamperedRef(ss); ok {
			atts = append(atts, wire.Attachment{Name: "bad", Ref: p.Ref, OwnerID: p.OwnerID})
			return atts, why
		}
	}
	return atts, ""
}

func simAtts(atts []wire.Attachment) string {
	if len(atts) == 0 {
		return "[]"
	}
	parts := make([]string, len(atts))
	for i, a := range atts {
		parts[i] = fmt.Sprintf("%s=%s@%s", a.Name, a.Ref.ArtifactID, a.OwnerID)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func simTag(tampered string, bad bool, what string) string {
	switch {
	case tampered != "":
		return " (bad: " + tampered + ")"
	case bad:
		return " (bad: " + what + ")"
	}
	return ""
}
