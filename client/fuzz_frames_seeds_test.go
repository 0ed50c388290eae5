package client

import (
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flybus/flybus/wire"
)

// The seed corpus of FuzzRouterFrames: what a router sends in answer to the
// fuzz program's script, built frame by frame (replies, deliveries with
// artifacts, notices, refusals) and each rule of the router's side of the
// protocol broken once. Rewrite it with
//
//	go test -run TestWriteRouterFrameSeeds ./client/ -args -record

var recordSeeds = flag.Bool("record", false, "rewrite testdata/fuzz/FuzzRouterFrames (TestWriteRouterFrameSeeds)")

// seedStream builds one seed: frames from bus-2 on, and the plan.
type seedStream struct {
	bus    uint64
	frames []byte
	plan   []byte
}

func newSeedStream(end byte) *seedStream { return &seedStream{bus: 1, plan: []byte{end}} }

// raw appends bytes as one write.
func (s *seedStream) raw(b []byte) *seedStream {
	s.frames = append(s.frames, b...)
	s.plan = binary.AppendUvarint(s.plan, uint64(len(b))<<1)
	return s
}

// wait makes the fake router wait until the SDK has written n commands.
func (s *seedStream) wait(n int) *seedStream {
	s.plan = binary.AppendUvarint(s.plan, uint64(n)<<1|1)
	return s
}

func (s *seedStream) send(h wire.Header, body wire.Body, atts []wire.Attachment) *seedStream {
	s.bus++
	h.ID = s.bus
	b, err := wire.AppendFrame(nil, h, body, atts)
	if err != nil {
		panic(err)
	}
	return s.raw(b)
}

// edit sends an envelope with one textual change, for what the encoder
// cannot produce.
func (s *seedStream) edit(h wire.Header, body wire.Body, atts []wire.Attachment, old, repl string) *seedStream {
	s.bus++
	h.ID = s.bus
	json := strings.Replace(string(wire.AppendEnvelope(nil, h, body, atts)), old, repl, 1)
	return s.raw(append(binary.LittleEndian.AppendUint32(nil, uint32(len(json))), json...))
}

func (s *seedStream) ok(msg uint64, op wire.Op, v wire.Body) *seedStream {
	return s.send(wire.Header{Kind: wire.KindReply, Op: op, ReplyTo: wire.Some(wire.MsgID(msg))}, &wire.ReplyBody{Value: v}, nil)
}

func (s *seedStream) refuse(msg uint64, op wire.Op, code wire.ErrorCode) *seedStream {
	return s.send(wire.Header{Kind: wire.KindReply, Op: op, ReplyTo: wire.Some(wire.MsgID(msg))},
		&wire.ReplyBody{Err: wire.NewError(code, 0, "seed")}, nil)
}

func (s *seedStream) deliver(op wire.Op, body wire.Body, atts ...wire.Attachment) *seedStream {
	return s.send(wire.Header{Kind: wire.KindDelivery, Op: op}, body, atts)
}

func (s *seedStream) notice(op wire.Op, body wire.Body) *seedStream {
	return s.send(wire.Header{Kind: wire.KindNotice, Op: op}, body, nil)
}

func seedRef(id wire.ArtifactID, n uint64) wire.ArtifactRef {
	return wire.ArtifactRef{StoreID: fuzzStore, ArtifactID: id, Generation: 1, ByteLength: n, ContentType: "application/x-fuzz"}
}

func seedAtt(name string, d wire.DeliveryID, ref wire.ArtifactRef) wire.Attachment {
	return wire.Attachment{Name: name, Ref: ref, OwnerID: wire.DeliveryOwner(d)}
}

var (
	seedSealed = wire.Location{StoreID: fuzzStore, RelativePath: fuzzSealedFile}
	seedStage  = wire.Location{StoreID: fuzzStore, RelativePath: fuzzStageFile}
	seedSlot   = wire.Location{StoreID: fuzzStore, RelativePath: fuzzSlotFile}
	seedCaller = wire.Identity{ClientID: "seed-caller", ClientIncarnation: "inc-caller"}
)

// script answers msg-2 to msg-7, the allocation refused unless allocate.
func (s *seedStream) script(allocate bool) *seedStream {
	s.ok(2, wire.OpServiceRegister, &wire.RegisterOK{ServiceIncarnation: 1})
	s.ok(3, wire.OpSubscribe, &wire.SubscribeOK{SubscriptionID: 1, TopicIncarnation: wire.Some[wire.TopicInc](1)})
	s.ok(4, wire.OpRPCCall, &wire.CallOK{Accepted: true, ServiceIncarnation: 1})
	if allocate {
		s.ok(5, wire.OpArtifactAllocate, &wire.AllocateOK{Allocation: wire.Allocation{ArtifactID: 1, Generation: 1, OwnerID: wire.HoldOwner(1)}, WriteLocation: seedStage})
	} else {
		s.refuse(5, wire.OpArtifactAllocate, wire.ErrQuotaExceeded)
	}
	s.ok(6, wire.OpPublish, &wire.PublishOK{TopicSequence: 1, Subscribers: 1})
	return s.ok(7, wire.OpTopicDeclare, &wire.DeclareOK{Declared: true, TopicIncarnation: 2})
}

// request delivers rpc.request dlv-d for call-1 to fuzz.svc.
func (s *seedStream) request(d wire.DeliveryID, atts ...wire.Attachment) *seedStream {
	return s.deliver(wire.OpRPCRequest, &wire.Request{DeliveryID: d, CallID: 1, Caller: seedCaller, Target: "fuzz.svc",
		ServiceIncarnation: 1, Method: "M", Payload: wire.RawJSON(`{}`)}, atts...)
}

func (s *seedStream) message(d wire.DeliveryID, atts ...wire.Attachment) *seedStream {
	return s.deliver(wire.OpTopicMessage, &wire.TopicMessage{DeliveryID: d, SubscriptionID: 1, Topic: "fuzz.topic",
		TopicIncarnation: 1, TopicSequence: 1, Payload: wire.RawJSON(`{"n":1}`)}, atts...)
}

func (s *seedStream) result(d wire.DeliveryID, atts ...wire.Attachment) *seedStream {
	return s.deliver(wire.OpRPCResult, &wire.Result{DeliveryID: d, CallID: 1, Responder: seedCaller,
		ServiceIncarnation: 1, Outcome: wire.RawJSON(`{}`)}, atts...)
}

// smallPieces rewrites a seed's writes into pieces of 1 to 13 bytes,
// keeping its waits.
func smallPieces(s *seedStream) []byte {
	out := []byte{s.plan[0]}
	b, i := s.plan[1:], 0
	for len(b) > 0 {
		v, k := binary.Uvarint(b)
		b = b[k:]
		if v&1 == 1 {
			out = binary.AppendUvarint(out, v)
			continue
		}
		for n := v >> 1; n > 0; i++ {
			p := min(n, uint64(1+(i*7)%13))
			out = binary.AppendUvarint(out, p<<1)
			n -= p
		}
	}
	return out
}

func routerFrameSeeds() map[string]*seedStream {
	seeds := map[string]*seedStream{}
	add := func(name string, s *seedStream) { seeds[name] = s }

	// Everything granted; the program seals (msg-8), reads back through
	// artifact.open (msg-9) and releases its hold (msg-10).
	for end := range byte(2) {
		add(fmt.Sprintf("granted-end-%d", end), newSeedStream(end).script(true).
			wait(8).ok(8, wire.OpArtifactSeal, &wire.SealOK{Ref: seedRef(1, 64), OwnerID: wire.HoldOwner(2)}).
			wait(9).ok(9, wire.OpArtifactOpen, &wire.OpenOK{ReadLocation: seedSealed}).
			wait(10).ok(10, wire.OpArtifactRelease, &wire.Released{Released: 1}))
	}
	// A request with an artifact: the service reads it (open msg-8),
	// replies (msg-9) and consumes (msg-10).
	add("request", newSeedStream(1).script(false).
		request(1, seedAtt("in", 1, seedRef(2, 64))).
		wait(8).ok(8, wire.OpArtifactOpen, &wire.OpenOK{ReadLocation: seedSealed}).
		wait(9).ok(9, wire.OpRPCReply, &wire.Routed{Routed: true}).
		wait(10).ok(10, wire.OpDeliveryConsumed, &wire.Released{Released: 1}))
	// A message with an artifact: the subscriber maps it (open msg-8) and
	// consumes (msg-9).
	add("message", newSeedStream(1).script(false).
		message(1, seedAtt("frame", 1, seedRef(3, 64))).
		wait(8).ok(8, wire.OpArtifactOpen, &wire.OpenOK{ReadLocation: seedSealed}).
		wait(9).ok(9, wire.OpDeliveryConsumed, &wire.Released{Released: 1}))
	// Messages naming one slot of a pooled store, generation after
	// generation: the first view maps the slot (open msg-8, consume msg-9),
	// a longer one maps it again (open msg-10, consume msg-11), a shorter
	// one is served from the cached mapping (consume msg-12).
	slotRef := func(gen, n uint64) wire.ArtifactRef {
		r := seedRef(1, n)
		r.Generation = gen
		return r
	}
	add("pool-slot-views", newSeedStream(1).script(false).
		message(1, seedAtt("frame", 1, slotRef(1, 32))).
		wait(8).ok(8, wire.OpArtifactOpen, &wire.OpenOK{ReadLocation: seedSlot}).
		wait(9).ok(9, wire.OpDeliveryConsumed, &wire.Released{Released: 1}).
		message(2, seedAtt("frame", 2, slotRef(2, 64))).
		wait(10).ok(10, wire.OpArtifactOpen, &wire.OpenOK{ReadLocation: seedSlot}).
		wait(11).ok(11, wire.OpDeliveryConsumed, &wire.Released{Released: 1}).
		message(3, seedAtt("frame", 3, slotRef(3, 16))).
		wait(12).ok(12, wire.OpDeliveryConsumed, &wire.Released{Released: 1}))
	// A result with an artifact: the caller retains it (msg-8).
	add("result", newSeedStream(0).script(false).
		result(1, seedAtt("out", 1, seedRef(4, 64))).
		wait(8).ok(8, wire.OpArtifactRetain, &wire.RetainOK{OwnerID: wire.HoldOwner(1)}).
		wait(10))
	// Deliveries without artifacts, then the notices.
	add("notices", newSeedStream(0).script(false).
		request(1).message(2).
		notice(wire.OpCallFailed, &wire.CallFailed{CallID: 1, Code: wire.ErrNoService, Message: "gone", Dispatch: wire.Dispatched}).
		notice(wire.OpRouteRemoved, &wire.RouteRemoved{Name: "fuzz.svc", ServiceIncarnation: 1, Reason: "seed"}).
		notice(wire.OpSubscriptionClosed, &wire.SubscriptionClosed{SubscriptionID: 1, Topic: "fuzz.topic", TopicIncarnation: wire.Some[wire.TopicInc](1), Reason: "seed"}).
		notice(wire.OpConnectionClosing, &wire.ConnectionClosing{Code: wire.ErrRouterLost, Message: "seed"}))
	// Every script command refused.
	add("refused", newSeedStream(1).
		refuse(2, wire.OpServiceRegister, wire.ErrConflict).
		refuse(3, wire.OpSubscribe, wire.ErrNoTopic).
		refuse(4, wire.OpRPCCall, wire.ErrNoService).
		refuse(5, wire.OpArtifactAllocate, wire.ErrStoreFailure).
		refuse(6, wire.OpPublish, wire.ErrBackpressure).
		refuse(7, wire.OpTopicDeclare, wire.ErrNotAuthorized))
	// Locations the program cannot use: another store, a missing file.
	add("bad-locations", newSeedStream(0).script(false).
		request(1, seedAtt("in", 1, seedRef(2, 64))).
		wait(8).ok(8, wire.OpArtifactOpen, &wire.OpenOK{ReadLocation: wire.Location{StoreID: 7, RelativePath: fuzzSealedFile}}).
		message(2, seedAtt("frame", 2, seedRef(3, 1<<20))).
		wait(10).ok(10, wire.OpArtifactOpen, &wire.OpenOK{ReadLocation: seedSealed}))

	// One rule of the router's side broken after the script's answers.
	route := &wire.RouteRemoved{Name: "fuzz.svc", ServiceIncarnation: 1, Reason: "seed"}
	violations := map[string]func(s *seedStream){
		"repeated-bus-id": func(s *seedStream) {
			s.bus--
			s.notice(wire.OpRouteRemoved, route)
		},
		"decreasing-bus-id": func(s *seedStream) {
			s.bus = 0
			s.notice(wire.OpRouteRemoved, route)
		},
		"reply-to-unknown": func(s *seedStream) { s.ok(99, wire.OpTopicDeclare, &wire.DeclareOK{TopicIncarnation: 1}) },
		"second-reply":     func(s *seedStream) { s.ok(7, wire.OpTopicDeclare, &wire.DeclareOK{TopicIncarnation: 1}) },
		"reply-wrong-op": func(s *seedStream) {
			s.wait(8).ok(8, wire.OpArtifactOpen, &wire.OpenOK{ReadLocation: seedSealed})
		},
		"reply-with-attachments": func(s *seedStream) {
			s.wait(8).send(wire.Header{Kind: wire.KindReply, Op: wire.OpArtifactSeal, ReplyTo: wire.Some(wire.MsgID(8))},
				&wire.ReplyBody{Value: &wire.SealOK{Ref: seedRef(1, 64), OwnerID: wire.HoldOwner(2)}}, []wire.Attachment{seedAtt("x", 1, seedRef(1, 64))})
		},
		"malformed-value": func(s *seedStream) {
			s.wait(8).edit(wire.Header{Kind: wire.KindReply, Op: wire.OpArtifactSeal, ReplyTo: wire.Some(wire.MsgID(8))},
				&wire.ReplyBody{Value: &wire.SealOK{Ref: seedRef(1, 64), OwnerID: wire.HoldOwner(2)}}, nil, `"own-2"`, `"dlv-2"`)
		},
		"unknown-field-in-result": func(s *seedStream) {
			s.edit(wire.Header{Kind: wire.KindDelivery, Op: wire.OpRPCResult}, &wire.Result{DeliveryID: 1, CallID: 1,
				Responder: seedCaller, ServiceIncarnation: 1, Outcome: wire.RawJSON(`{}`)}, nil, `"outcome":{}`, `"outcome":{},"extra":1`)
		},
		"attachment-of-another-delivery": func(s *seedStream) { s.message(1, seedAtt("frame", 2, seedRef(3, 64))) },
		"notice-with-attachments": func(s *seedStream) {
			s.send(wire.Header{Kind: wire.KindNotice, Op: wire.OpRouteRemoved}, route, []wire.Attachment{seedAtt("x", 1, seedRef(1, 64))})
		},
		"command-from-router": func(s *seedStream) {
			s.send(wire.Header{Kind: wire.KindCommand, Op: wire.OpRPCCancel}, &wire.Cancel{CallID: 1}, nil)
		},
		"minor-1": func(s *seedStream) {
			s.edit(wire.Header{Kind: wire.KindNotice, Op: wire.OpRouteRemoved}, route, nil, `"minor":1`, `"minor":2`)
		},
		"unknown-notice": func(s *seedStream) {
			s.edit(wire.Header{Kind: wire.KindNotice, Op: wire.OpRouteRemoved}, route, nil, `"route.removed"`, `"route.renamed"`)
		},
		"delivery-op-as-notice": func(s *seedStream) {
			s.edit(wire.Header{Kind: wire.KindNotice, Op: wire.OpRouteRemoved}, route, nil, `"notice"`, `"delivery"`)
		},
		"zero-length":     func(s *seedStream) { s.raw([]byte{0, 0, 0, 0}) },
		"length-over-64k": func(s *seedStream) { s.raw(binary.LittleEndian.AppendUint32(nil, wire.MaxEnvelopeBytes+1)) },
		"bad-json":        func(s *seedStream) { s.raw(append(binary.LittleEndian.AppendUint32(nil, 12), `{"protocol":`...)) },
		"torn-frame": func(s *seedStream) {
			s.raw(append(binary.LittleEndian.AppendUint32(nil, 400), `{"protocol":"flybus"`...))
		},
	}
	for name, v := range violations {
		for end := range byte(2) {
			s := newSeedStream(end).script(true)
			v(s)
			add(fmt.Sprintf("violation-%s-end-%d", name, end), s)
		}
	}
	return seeds
}

func TestWriteRouterFrameSeeds(t *testing.T) {
	if !*recordSeeds {
		t.Skip("rewrites the seed corpus; run with -args -record")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzRouterFrames")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string, frames, plan []byte) {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n[]byte(%q)\n", frames, plan)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, s := range routerFrameSeeds() {
		write(name, s.frames, s.plan)
		if !strings.HasPrefix(name, "violation-") {
			write(name+"-small-pieces", s.frames, smallPieces(s))
		}
	}
}
