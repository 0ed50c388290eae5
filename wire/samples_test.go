package wire

import (
	"reflect"
	"testing"
)

// Populated values of every body type, shared by the round-trip tests, the
// body refusal tests and the fuzz seeds. Every field holds a value other
// than its zero value where the type allows it, so a decoder that forgets a
// field cannot pass by leaving the zero value in place.

var (
	sampleStore = StoreID(0x00ff00ff12345678)
	sampleRef   = ArtifactRef{StoreID: sampleStore, ArtifactID: 41, Generation: 3, ByteLength: 1228800,
		ContentType: "image/x-rgba", Digest: Some(Digest{0: 0xde, 1: 0xad, 31: 0xef})}
	sampleRefNoDigest = ArtifactRef{StoreID: sampleStore, ArtifactID: 42, Generation: 18446744073709551615,
		ByteLength: 0, ContentType: `text/plain; charset="utf-8"`}
)

// sampleAttachments is what the attachment-carrying samples carry: one hold
// and one delivery owner, one digest and one null digest.
func sampleAttachments() []Attachment {
	return []Attachment{
		{Name: "frame", Ref: sampleRef, OwnerID: HoldOwner(9)},
		{Name: "depth.16", Ref: sampleRefNoDigest, OwnerID: DeliveryOwner(3)},
	}
}

// sampleBodies returns fresh populated values, keyed by body type. Types
// shared by several operations (TopicName, RefOwner, Removed, Released)
// have one sample each.
func sampleBodies() map[reflect.Type]Body {
	loc := Location{StoreID: sampleStore, RelativePath: "staging/a-41.3"}
	bodies := []Body{
		&Hello{ClientID: "edge-1", ClientIncarnation: "inc.7", SupportedMajors: []uint32{1, 2, 65535},
			Extensions: []string{ExtPresence, "x-unknown.2", ExtAwaitTopic}},
		&HelloOK{RouterID: 0x0123456789abcdef, ConnectionID: 3, SelectedMajor: 1, SelectedMinor: 2,
			ContractDigest: ContractDigestValue(), Limits: DefaultLimits(), Extensions: []string{ExtPresence, ExtAwaitTopic},
			StoreID: sampleStore},
		&Register{Name: "example.counter", MaxQueued: 16, MaxInFlight: 65535},
		&RegisterOK{ServiceIncarnation: 4},
		&Unregister{Name: "example.counter", ServiceIncarnation: 4},
		&Removed{Removed: true},
		&Call{CallID: 2, Target: "example.counter", ExpectedIncarnation: Some(ServiceInc(4)),
			Method: "Counter.Increment", Payload: RawJSON(`{"amount": 1, "nested": {"list": [1, "two", null]}}`)},
		&CallOK{Accepted: true, ServiceIncarnation: 4},
		&Reply{ReplyCapability: ReplyCapability{CallID: 2, RequestDeliveryID: 11}, Outcome: RawJSON(`{"ok":{"n":2}}`)},
		&Routed{Routed: true},
		&Cancel{CallID: 2},
		&CancelOK{State: ExecutionUnknown},
		&ResponderRelease{ReplyCapability: ReplyCapability{CallID: 2, RequestDeliveryID: 11}},
		&Released{Released: 18446744073709551615},
		&Declare{Name: "world.demo.frame", Retained: RetainLatest},
		&DeclareOK{Declared: true, TopicIncarnation: 5},
		&TopicName{Name: "world.demo.frame"},
		&Cleared{Cleared: true},
		&Deleted{Deleted: true},
		&Subscribe{Topic: "world.demo.frame", Mode: ModeBounded, MaxQueued: 64, MaxInFlight: 16, ReplayLatest: true,
			AwaitTopic: Some(true)},
		&SubscribeOK{SubscriptionID: 6, TopicIncarnation: Some(TopicInc(5))},
		&Unsubscribe{SubscriptionID: 6},
		&Publish{Topic: "world.demo.frame", Payload: RawJSON(`{"width":640,"height":480,"binding":{"image":"frame"}}`)},
		&PublishOK{TopicSequence: 100, Subscribers: 3, Replaced: 1},
		&Consumed{DeliveryIDs: []DeliveryID{1, 2, 18446744073709551615}},
		&Allocate{ByteLength: 1228800, ContentType: "image/x-rgba"},
		&AllocateOK{Allocation: Allocation{ArtifactID: 41, Generation: 3, OwnerID: HoldOwner(9)}, WriteLocation: loc},
		&Seal{Allocation: Allocation{ArtifactID: 41, Generation: 3, OwnerID: HoldOwner(9)}, Digest: Some(Digest{7: 7})},
		&SealOK{Ref: sampleRef, OwnerID: HoldOwner(9)},
		&RefOwner{Ref: sampleRef, OwnerID: DeliveryOwner(3)},
		&OpenOK{ReadLocation: Location{StoreID: sampleStore, RelativePath: "objects/41/3"}},
		&RetainOK{OwnerID: HoldOwner(10)},
		&Release{OwnerIDs: []OwnerID{HoldOwner(9), DeliveryOwner(3)}},
		&Request{DeliveryID: 12, CallID: 2, Caller: Identity{ClientID: "edge-1", ClientIncarnation: "inc.7"},
			Target: "example.counter", ServiceIncarnation: 4, Method: "Counter.Increment", Payload: RawJSON(`{"amount":1}`)},
		&Result{DeliveryID: 13, CallID: 2, Responder: Identity{ClientID: "svc-host", ClientIncarnation: "i2"},
			ServiceIncarnation: 4, Outcome: RawJSON(`{"error":{"kind":"domain"}}`)},
		&TopicMessage{DeliveryID: 14, SubscriptionID: 6, Topic: "world.demo.frame", TopicIncarnation: 5,
			TopicSequence: 100, Replaced: 2, Payload: RawJSON(`{"t":12.5}`)},
		&CallFailed{CallID: 2, Code: ErrTargetChanged, Message: "service re-registered", Dispatch: DispatchUnknown},
		&RouteRemoved{Name: "example.counter", ServiceIncarnation: 4, Reason: "unregistered"},
		&SubscriptionClosed{SubscriptionID: 6, Topic: "world.demo.frame", TopicIncarnation: Some(TopicInc(5)), Reason: "router-shutdown"},
		&SubscriptionTopic{SubscriptionID: 6, Topic: "world.demo.frame", TopicIncarnation: Some(TopicInc(7))},
		&SubscriptionPublishers{SubscriptionID: 6, Topic: "world.demo.frame", Publishers: 3},
		&ConnectionClosing{Code: ErrInvalidEnvelope, Message: "duplicate key"},
	}
	m := make(map[reflect.Type]Body, len(bodies))
	for _, b := range bodies {
		m[reflect.TypeOf(b)] = b
	}
	return m
}

// sampleFor returns the populated sample of like's type.
func sampleFor(t testing.TB, like Body) Body {
	t.Helper()
	b, ok := sampleBodies()[reflect.TypeOf(like)]
	if !ok {
		t.Fatalf("no sample for %T: add one to sampleBodies", like)
	}
	return b
}

// fresh returns a new zero value of b's type, as a decode target.
func fresh(b Body) Body { return reflect.New(reflect.TypeOf(b).Elem()).Interface().(Body) }

// shapeOf returns the contract shape of op.
func shapeOf(op Op) (Shape, bool) {
	for _, s := range Shapes() {
		if s.Op == op {
			return s, true
		}
	}
	return Shape{}, false
}

// headerFor is a plausible header for a frame of this kind: commands carry
// msg- ids, everything the router sends carries bus- ids, and replies
// answer the command with the same serial.
func headerFor(kind EnvKind, op Op, n uint64) Header {
	h := Header{ID: n, Kind: kind, Op: op}
	if kind == KindReply {
		h.ReplyTo = Some(MsgID(n))
	}
	return h
}

type namedFrame struct {
	name  string
	frame []byte
}

// sampleFrames is one frame per shape (with attachments where the op
// carries them), one ok reply per command, one error reply, and the two
// typical frames.
func sampleFrames(t testing.TB) []namedFrame {
	var out []namedFrame
	n := uint64(1)
	for _, s := range Shapes() {
		var atts []Attachment
		if s.Op.CarriesAttachments() {
			atts = sampleAttachments()
		}
		out = append(out, namedFrame{s.Kind.String() + "/" + s.Op.String(),
			AppendEnvelope(nil, headerFor(s.Kind, s.Op, n), sampleFor(t, s.Body), atts)})
		if s.Reply != nil {
			out = append(out, namedFrame{"reply/" + s.Op.String(),
				AppendEnvelope(nil, headerFor(KindReply, s.Op, n), &ReplyBody{Value: sampleFor(t, s.Reply)}, nil)})
		}
		n++
	}
	out = append(out,
		namedFrame{"reply-error/rpc.call", AppendEnvelope(nil, headerFor(KindReply, OpRPCCall, n),
			&ReplyBody{Err: NewError(ErrNoService, NotDispatched, "no service %q", "example.counter")}, nil)},
		namedFrame{"typical/call", typicalCall()},
		namedFrame{"typical/publish", typicalPublish()},
	)
	return out
}
