package wire

import "testing"

// Typical frames: the shapes the router decodes most, shared by the
// allocation test here and the benchmarks.

func typicalCall() []byte {
	body := &Call{CallID: 2, Target: "example.counter", ExpectedIncarnation: Some(ServiceInc(1)),
		Method: "Counter.Increment", Payload: RawJSON(`{"amount":1,"note":"tick"}`)}
	return AppendEnvelope(nil, Header{ID: 7, Kind: KindCommand, Op: OpRPCCall}, body, nil)
}

func typicalPublish() []byte {
	ref := ArtifactRef{StoreID: 0x1234abcd5678ef00, ArtifactID: 41, Generation: 1, ByteLength: 1228800, ContentType: "image/x-rgba"}
	atts := []Attachment{
		{Name: "frame", Ref: ref, OwnerID: HoldOwner(9)},
		{Name: "depth", Ref: ArtifactRef{StoreID: ref.StoreID, ArtifactID: 42, Generation: 1, ByteLength: 307200, ContentType: "image/x-depth16", Digest: Some(Digest{1, 2, 3})}, OwnerID: DeliveryOwner(3)},
	}
	body := &Publish{Topic: "world.demo.frame", Payload: RawJSON(`{"width":640,"height":480,"t":12.5,"binding":{"image":"frame"}}`)}
	return AppendEnvelope(nil, Header{ID: 8, Kind: KindCommand, Op: OpPublish}, body, atts)
}

// decodesWithoutAllocating fails t unless decode, once warm (intern table,
// tape, attachment slice), allocates nothing.
func decodesWithoutAllocating(t *testing.T, name string, decode func()) {
	t.Helper()
	decode()
	if a := testing.AllocsPerRun(100, decode); a != 0 {
		t.Errorf("%s: %v allocs per decode once warm, want 0", name, a)
	}
}

func TestTypicalDecodeDoesNotAllocate(t *testing.T) {
	var d Decoder
	var env Envelope
	call, pub := &Call{}, &Publish{}
	// Fixed order: the checks after the loop read the publish's results.
	for _, tc := range []struct {
		name  string
		frame []byte
		body  Body
	}{{"call", typicalCall(), call}, {"publish", typicalPublish(), pub}} {
		decodesWithoutAllocating(t, tc.name, func() {
			if err := d.Decode(tc.frame, &env); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if err := env.DecodeBody(tc.body); err != nil {
				t.Fatalf("%s body: %v", tc.name, err)
			}
		})
	}
	if len(env.Attachments) != 2 || env.Attachments[1].Ref.Digest.V[2] != 3 || pub.Topic != "world.demo.frame" {
		t.Fatalf("decoded %+v %+v", env.Attachments, pub)
	}
}

// The replies a client decodes for every frame it consumes or produces
// (delivery.consumed, artifact.release, artifact.open, artifact.retain,
// artifact.seal) must not allocate either.
func TestFrameRepliesDoNotAllocate(t *testing.T) {
	ref := ArtifactRef{StoreID: 0x1234abcd5678ef00, ArtifactID: 41, Generation: 3, ByteLength: 1228800, ContentType: "image/x-rgba"}
	released, open, retain, seal := &Released{}, &OpenOK{}, &RetainOK{}, &SealOK{}
	for _, tc := range []struct {
		op   Op
		sent Body
		into Body
	}{
		{OpDeliveryConsumed, &Released{Released: 2}, released},
		{OpArtifactRelease, &Released{Released: 1}, released},
		{OpArtifactOpen, &OpenOK{ReadLocation: Location{StoreID: sampleStore, RelativePath: "slot-0000000000000029"}}, open},
		{OpArtifactRetain, &RetainOK{OwnerID: HoldOwner(7)}, retain},
		{OpArtifactSeal, &SealOK{Ref: ref, OwnerID: HoldOwner(9)}, seal},
	} {
		frame := AppendEnvelope(nil, headerFor(KindReply, tc.op, 5), &ReplyBody{Value: tc.sent}, nil)
		var d Decoder
		var env Envelope
		decodesWithoutAllocating(t, tc.op.String()+" reply", func() {
			if err := d.Decode(frame, &env); err != nil {
				t.Fatalf("%s: %v", tc.op, err)
			}
			if be, err := env.DecodeReply(tc.into); be != nil || err != nil {
				t.Fatalf("%s reply: %v %v", tc.op, be, err)
			}
		})
	}
	if released.Released != 1 || open.ReadLocation.RelativePath != "slot-0000000000000029" || retain.OwnerID != HoldOwner(7) || seal.Ref != ref {
		t.Fatalf("decoded %+v %+v %+v %+v", released, open, retain, seal)
	}
}
