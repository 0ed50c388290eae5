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

func TestTypicalDecodeDoesNotAllocate(t *testing.T) {
	var d Decoder
	var env Envelope
	var call Call
	var pub Publish
	// Fixed order: the checks after the loop read the publish's results.
	for _, tc := range []struct {
		name  string
		frame []byte
	}{{"call", typicalCall()}, {"publish", typicalPublish()}} {
		name, frame := tc.name, tc.frame
		decode := func() {
			if err := d.Decode(frame, &env); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var err error
			if env.Op == OpRPCCall {
				err = env.DecodeBody(&call)
			} else {
				err = env.DecodeBody(&pub)
			}
			if err != nil {
				t.Fatalf("%s body: %v", name, err)
			}
		}
		decode() // warm: intern table, tape, attachment slice
		if a := testing.AllocsPerRun(100, decode); a != 0 {
			t.Errorf("%s: %v allocs per decode once warm, want 0", name, a)
		}
	}
	if len(env.Attachments) != 2 || env.Attachments[1].Ref.Digest.V[2] != 3 || pub.Topic != "world.demo.frame" {
		t.Fatalf("decoded %+v %+v", env.Attachments, pub)
	}
}
