package bench_test

import (
	"encoding/json"
	"reflect"
	"testing"

	gojson "github.com/goccy/go-json"

	"github.com/flybus/flybus/wire"
)

// Wire hot paths: envelope decode and encode of the two typical frames, and
// the strict scanner beside encoding/json and goccy/go-json on the same
// bytes. The frames are copies of wire/typical_test.go's, which test helpers
// cannot export.

func typicalCall() []byte {
	body := &wire.Call{CallID: 2, Target: "example.counter", ExpectedIncarnation: wire.Some(wire.ServiceInc(1)),
		Method: "Counter.Increment", Payload: wire.RawJSON(`{"amount":1,"note":"tick"}`)}
	return wire.AppendEnvelope(nil, wire.Header{ID: 7, Kind: wire.KindCommand, Op: wire.OpRPCCall}, body, nil)
}

func typicalPublish() []byte {
	ref := wire.ArtifactRef{StoreID: 0x1234abcd5678ef00, ArtifactID: 41, Generation: 1, ByteLength: 1228800, ContentType: "image/x-rgba"}
	atts := []wire.Attachment{
		{Name: "frame", Ref: ref, OwnerID: wire.HoldOwner(9)},
		{Name: "depth", Ref: wire.ArtifactRef{StoreID: ref.StoreID, ArtifactID: 42, Generation: 1, ByteLength: 307200,
			ContentType: "image/x-depth16", Digest: wire.Some(wire.Digest{1, 2, 3})}, OwnerID: wire.DeliveryOwner(3)},
	}
	body := &wire.Publish{Topic: "world.demo.frame", Payload: wire.RawJSON(`{"width":640,"height":480,"t":12.5,"binding":{"image":"frame"}}`)}
	return wire.AppendEnvelope(nil, wire.Header{ID: 8, Kind: wire.KindCommand, Op: wire.OpPublish}, body, atts)
}

// typical pairs each frame with what encoding it needs and an empty body
// to decode into.
type typical struct {
	name  string
	frame []byte
	body  wire.Body // decode target, reused across iterations
	atts  []wire.Attachment
}

func typicals() []typical {
	out := []typical{
		{name: "frame=call", frame: typicalCall(), body: &wire.Call{}},
		{name: "frame=publish", frame: typicalPublish(), body: &wire.Publish{}},
	}
	// Decode once to get the values the encoder benchmark appends.
	for i := range out {
		var d wire.Decoder
		var env wire.Envelope
		if err := d.Decode(out[i].frame, &env); err != nil {
			panic(err) // fixed frames: a failure here is a broken fixture
		}
		if err := env.DecodeBody(out[i].body); err != nil {
			panic(err)
		}
		out[i].atts = append([]wire.Attachment(nil), env.Attachments...)
	}
	return out
}

func BenchmarkEnvelopeDecode(b *testing.B) {
	for _, tc := range typicals() {
		b.Run(tc.name, func(b *testing.B) {
			var d wire.Decoder
			var env wire.Envelope
			b.ReportAllocs()
			b.SetBytes(int64(len(tc.frame)))
			for b.Loop() {
				if err := d.Decode(tc.frame, &env); err != nil {
					b.Fatal(err)
				}
				if err := env.DecodeBody(tc.body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkEnvelopeEncode(b *testing.B) {
	for _, tc := range typicals() {
		b.Run(tc.name, func(b *testing.B) {
			h := wire.Header{ID: 7, Kind: wire.KindCommand, Op: wire.OpRPCCall}
			if len(tc.atts) > 0 {
				h = wire.Header{ID: 8, Kind: wire.KindCommand, Op: wire.OpPublish}
			}
			buf := make([]byte, 0, 4096)
			b.ReportAllocs()
			b.SetBytes(int64(len(tc.frame)))
			for b.Loop() {
				buf = wire.AppendEnvelope(buf[:0], h, tc.body, tc.atts)
			}
			if string(buf) != string(tc.frame) {
				b.Fatalf("encoded\n%s\nwant\n%s", buf, tc.frame)
			}
		})
	}
}

// jsonEnvelope mirrors the envelope for the reflection-based decoders, with
// the union of the call and publish bodies; payloads stay raw, as ours do.
type jsonEnvelope struct {
	Protocol    string           `json:"protocol"`
	Major       int              `json:"major"`
	Minor       int              `json:"minor"`
	ID          string           `json:"id"`
	ReplyTo     *string          `json:"replyTo"`
	Kind        string           `json:"kind"`
	Op          string           `json:"op"`
	Body        jsonBody         `json:"body"`
	Attachments []jsonAttachment `json:"attachments"`
}

type jsonBody struct {
	CallID              string          `json:"callId"`
	Target              string          `json:"target"`
	ExpectedIncarnation *string         `json:"expectedIncarnation"`
	Method              string          `json:"method"`
	Topic               string          `json:"topic"`
	Payload             json.RawMessage `json:"payload"`
}

type jsonAttachment struct {
	Name    string  `json:"name"`
	Ref     jsonRef `json:"ref"`
	OwnerID string  `json:"ownerId"`
}

type jsonRef struct {
	StoreID     string  `json:"storeId"`
	ArtifactID  string  `json:"artifactId"`
	Generation  string  `json:"generation"`
	ByteLength  string  `json:"byteLength"`
	ContentType string  `json:"contentType"`
	Digest      *string `json:"digest"`
}

// scanners are the contenders on the same bytes: validation alone, then a
// full decode into typed values.
var scanners = []struct {
	name string
	new  func() func([]byte) error // per sub-benchmark state
}{
	{"impl=wire-scan", func() func([]byte) error {
		var s wire.Scanner
		return s.Scan
	}},
	{"impl=json-valid", func() func([]byte) error {
		return func(p []byte) error { return validErr(json.Valid(p)) }
	}},
	{"impl=goccy-valid", func() func([]byte) error {
		return func(p []byte) error { return validErr(gojson.Valid(p)) }
	}},
	{"impl=wire-decode", func() func([]byte) error {
		var d wire.Decoder
		var env wire.Envelope
		var call wire.Call
		var pub wire.Publish
		return func(p []byte) error {
			if err := d.Decode(p, &env); err != nil {
				return err
			}
			body := wire.Body(&pub)
			if env.Op == wire.OpRPCCall {
				body = &call
			}
			if err := env.DecodeBody(body); err != nil {
				return err // a nil *BusError would be a non-nil error
			}
			return nil
		}
	}},
	{"impl=json-unmarshal", func() func([]byte) error {
		var v jsonEnvelope
		return func(p []byte) error { return json.Unmarshal(p, &v) }
	}},
	{"impl=goccy-unmarshal", func() func([]byte) error {
		var v jsonEnvelope
		return func(p []byte) error { return gojson.Unmarshal(p, &v) }
	}},
}

type invalidJSON struct{}

func (invalidJSON) Error() string { return "invalid JSON" }

func validErr(ok bool) error {
	if ok {
		return nil
	}
	return invalidJSON{}
}

func BenchmarkScan(b *testing.B) {
	for _, tc := range typicals() {
		b.Run(tc.name, func(b *testing.B) {
			for _, sc := range scanners {
				b.Run(sc.name, func(b *testing.B) {
					scan := sc.new()
					b.ReportAllocs()
					b.SetBytes(int64(len(tc.frame)))
					for b.Loop() {
						if err := scan(tc.frame); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}

// The baselines must do the same work as ours: both reflection decoders
// fill the mirror with the values wire decodes, so a mistyped tag cannot
// make them look faster by skipping fields.
func TestMirrorsAgree(t *testing.T) {
	for _, tc := range typicals() {
		var std, goccy jsonEnvelope
		if err := json.Unmarshal(tc.frame, &std); err != nil {
			t.Fatal(err)
		}
		if err := gojson.Unmarshal(tc.frame, &goccy); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(std, goccy) {
			t.Errorf("%s: encoding/json %+v\ngoccy %+v", tc.name, std, goccy)
		}
		var d wire.Decoder
		var env wire.Envelope
		if err := d.Decode(tc.frame, &env); err != nil {
			t.Fatal(err)
		}
		if std.ID != wire.FormatSerial(wire.FamMsg, env.ID) || std.Op != env.Op.String() || len(std.Attachments) != len(env.Attachments) {
			t.Errorf("%s: mirror header %+v", tc.name, std)
		}
		for i, a := range env.Attachments {
			m := std.Attachments[i]
			if m.Name != a.Name || m.OwnerID != a.OwnerID.String() || m.Ref.ByteLength != wire.FormatU64(a.Ref.ByteLength) ||
				m.Ref.StoreID != a.Ref.StoreID.String() || m.Ref.ContentType != a.Ref.ContentType || (m.Ref.Digest != nil) != a.Ref.Digest.Valid {
				t.Errorf("%s: attachment %d mirrors as %+v", tc.name, i, m)
			}
		}
		switch body := tc.body.(type) {
		case *wire.Call:
			if std.Body.CallID != body.CallID.String() || std.Body.Method != body.Method || string(std.Body.Payload) != string(body.Payload) {
				t.Errorf("call body mirrors as %+v", std.Body)
			}
		case *wire.Publish:
			if std.Body.Topic != body.Topic || string(std.Body.Payload) != string(body.Payload) {
				t.Errorf("publish body mirrors as %+v", std.Body)
			}
		}
	}
}
