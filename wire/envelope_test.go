package wire

import (
	"errors"
	"strings"
	"testing"
)

// Envelope and body refusals. Decode reports a *ProtocolError when the
// connection must close and a *BusError (INVALID_ENVELOPE, not-dispatched)
// when the header is sound and a reply can still be sent (docs/protocol.md,
// envelope errors versus body errors).

// member is one raw "key":value pair; members keeps their order so a case
// can drop, replace or add one without editing a long literal.
type member struct{ k, v string }

type members []member

func (m members) String() string {
	var b strings.Builder
	b.WriteByte('{')
	for i, x := range m {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + x.k + `":` + x.v)
	}
	b.WriteByte('}')
	return b.String()
}

func (m members) bytes() []byte { return []byte(m.String()) }

func (m members) without(k string) members {
	out := make(members, 0, len(m))
	found := false
	for _, x := range m {
		if x.k == k {
			found = true
			continue
		}
		out = append(out, x)
	}
	if !found {
		panic("no member " + k)
	}
	return out
}

// with replaces k's value, or appends k when it is absent.
func (m members) with(k, v string) members {
	out := append(members(nil), m...)
	for i := range out {
		if out[i].k == k {
			out[i].v = v
			return out
		}
	}
	return append(out, member{k, v})
}

// membersOf splits one JSON object into its top-level members, using the
// scanner's tape so nested values come out whole. It panics on a
// non-object: its inputs are fixtures.
func membersOf(obj []byte) members {
	var s Scanner
	if err := s.Scan(obj); err != nil || s.toks[0].kind != KindObject {
		panic("membersOf: not an object: " + string(obj))
	}
	var out members
	for i := uint32(1); i < s.toks[0].next; {
		k, v := s.toks[i], s.toks[i+1]
		start, end := v.start, v.end
		if v.kind == KindString {
			start, end = start-1, end+1
		}
		out = append(out, member{string(obj[k.start:k.end]), string(obj[start:end])})
		i = v.next
	}
	return out
}

func cmdEnvelope(op, body string) members {
	return members{
		{"protocol", `"flybus"`}, {"major", "1"}, {"minor", "0"}, {"id", `"msg-1"`},
		{"replyTo", "null"}, {"kind", `"command"`}, {"op", `"` + op + `"`},
		{"body", body}, {"attachments", "[]"},
	}
}

var baseCmd = cmdEnvelope("topic.clear", `{"name":"t"}`)

func attachmentJSON(name string) members {
	return members{{"name", `"` + name + `"`}, {"ref", refMembers().String()}, {"ownerId", `"own-9"`}}
}

func attachmentList(n int, dupLast bool) string {
	parts := make([]string, n)
	for i := range parts {
		name := "att" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		if dupLast && i == n-1 {
			name = "atta"
		}
		parts[i] = attachmentJSON(name).String()
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func publishEnvelope(atts string) []byte {
	return cmdEnvelope("publish", `{"topic":"t","payload":{}}`).with("attachments", atts).bytes()
}

func TestDecodeFatal(t *testing.T) {
	cases := []struct {
		name  string
		frame []byte
	}{
		{"Frame/Empty", nil},
		{"Frame/TooLong", []byte(`{"x":"` + strings.Repeat("a", MaxEnvelopeBytes+1-8) + `"}`)},
		{"JSON/Invalid", []byte(`{"protocol":`)},
		{"JSON/DuplicateKey", []byte(`{"protocol":"flybus",` + baseCmd.String()[1:])},
		{"JSON/DuplicateKeyInBody", baseCmd.with("body", `{"name":"t","name":"u"}`).bytes()},
		{"Envelope/NotAnObject", []byte(`[` + baseCmd.String() + `]`)},
		{"Envelope/UnknownField", baseCmd.with("extra", "1").bytes()},
		{"Envelope/UnknownFieldNull", baseCmd.with("Op", "null").bytes()},
		{"Protocol/Wrong", baseCmd.with("protocol", `"flybuz"`).bytes()},
		{"Protocol/NotAString", baseCmd.with("protocol", "1").bytes()},
		{"Major/String", baseCmd.with("major", `"1"`).bytes()},
		{"Major/Fraction", baseCmd.with("major", "1.0").bytes()},
		{"Major/Negative", baseCmd.with("major", "-1").bytes()},
		{"Minor/OutOfRange", baseCmd.with("minor", "65536").bytes()},
		{"Kind/Unknown", baseCmd.with("kind", `"request"`).bytes()},
		{"Kind/Uppercase", baseCmd.with("kind", `"Command"`).bytes()},
		{"Kind/NotAString", baseCmd.with("kind", "1").bytes()},
		{"ID/BusOnCommand", baseCmd.with("id", `"bus-1"`).bytes()},
		{"ID/LeadingZero", baseCmd.with("id", `"msg-01"`).bytes()},
		{"ID/NotANumber", baseCmd.with("id", `"msg-x"`).bytes()},
		{"ID/PrefixOnly", baseCmd.with("id", `"msg-"`).bytes()},
		{"ID/Number", baseCmd.with("id", "1").bytes()},
		{"ID/MsgOnDelivery", baseCmd.with("kind", `"delivery"`).bytes()},
		{"ID/MsgOnReply", baseCmd.with("kind", `"reply"`).with("replyTo", `"msg-1"`).bytes()},
		{"ReplyTo/OnCommand", baseCmd.with("replyTo", `"msg-1"`).bytes()},
		{"ReplyTo/OnDelivery", baseCmd.with("kind", `"delivery"`).with("id", `"bus-1"`).with("replyTo", `"msg-1"`).bytes()},
		{"ReplyTo/OnNotice", baseCmd.with("kind", `"notice"`).with("id", `"bus-1"`).with("replyTo", `"msg-1"`).bytes()},
		{"ReplyTo/NullOnReply", baseCmd.with("kind", `"reply"`).with("id", `"bus-1"`).bytes()},
		{"ReplyTo/BusOnReply", baseCmd.with("kind", `"reply"`).with("id", `"bus-1"`).with("replyTo", `"bus-1"`).bytes()},
		{"ReplyTo/NotCanonical", baseCmd.with("kind", `"reply"`).with("id", `"bus-1"`).with("replyTo", `"msg-00"`).bytes()},
		{"Op/NotAString", baseCmd.with("op", "null").bytes()},
		{"Body/Array", baseCmd.with("body", "[]").bytes()},
		{"Body/String", baseCmd.with("body", `"x"`).bytes()},
		{"Body/Null", baseCmd.with("body", "null").bytes()},
		{"Attachments/Object", baseCmd.with("attachments", "{}").bytes()},
		{"Attachments/Null", baseCmd.with("attachments", "null").bytes()},
	}
	for _, f := range envFieldNames {
		cases = append(cases, struct {
			name  string
			frame []byte
		}{"Missing/" + f, baseCmd.without(f).bytes()})
	}
	var d Decoder
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var env Envelope
			err := d.Decode(c.frame, &env)
			var pe *ProtocolError
			if !errors.As(err, &pe) {
				t.Fatalf("got %v (%T), want a *ProtocolError", err, err)
			}
			var be *BusError
			if errors.As(err, &be) {
				t.Errorf("a fatal error is also a *BusError: %v", err)
			}
		})
	}
}

// A frame of exactly MaxEnvelopeBytes passes the length check.
func TestDecodeMaxLengthFrame(t *testing.T) {
	frame := padPublish(t, MaxEnvelopeBytes)
	var d Decoder
	var env Envelope
	if err := d.Decode(frame, &env); err != nil {
		t.Fatalf("%d-byte frame: %v", len(frame), err)
	}
	if err := d.Decode(append(frame, ' '), &env); !errors.As(err, new(*ProtocolError)) {
		t.Fatalf("%d-byte frame: %v, want a *ProtocolError", len(frame)+1, err)
	}
}

// padPublish builds a publish envelope of exactly n bytes by padding a
// string in its payload.
func padPublish(t testing.TB, n int) []byte {
	t.Helper()
	build := func(pad int) []byte {
		body := &Publish{Topic: "t", Payload: RawJSON(`{"pad":"` + strings.Repeat("p", pad) + `"}`)}
		return AppendEnvelope(nil, Header{ID: 1, Kind: KindCommand, Op: OpPublish}, body, nil)
	}
	frame := build(n - len(build(0)))
	if len(frame) != n {
		t.Fatalf("padded to %d bytes, want %d", len(frame), n)
	}
	return frame
}

func TestDecodeBodyLevel(t *testing.T) {
	attWith := func(k, v string) string { return "[" + attachmentJSON("a").with(k, v).String() + "]" }
	refWith := func(k, v string) string {
		a := attachmentJSON("a")
		ref := membersOf([]byte(a[1].v))
		if v == "" {
			ref = ref.without(k)
		} else {
			ref = ref.with(k, v)
		}
		return "[" + a.with("ref", ref.String()).String() + "]"
	}
	// want is a fragment of the message, so a case cannot pass by tripping
	// over an unrelated mistake in its fixture.
	cases := []struct {
		name  string
		frame []byte
		want  string
	}{
		{"Op/Unknown", baseCmd.with("op", `"topic.clearr"`).bytes(), "unknown operation"},
		{"Op/Empty", baseCmd.with("op", `""`).bytes(), "unknown operation"},
		{"Op/Uppercase", baseCmd.with("op", `"Publish"`).bytes(), "unknown operation"},
		{"Attachments/33", publishEnvelope(attachmentList(33, false)), "more than 32"},
		{"Attachments/DuplicateName", publishEnvelope(attachmentList(3, true)), "duplicate attachment name atta"},
		{"Attachments/OnTopicDeclare", cmdEnvelope("topic.declare", `{"name":"t","retained":"none"}`).with("attachments", attachmentList(1, false)).bytes(), "not allowed"},
		{"Attachments/OnHello", cmdEnvelope("bus.hello", `{}`).with("attachments", attachmentList(1, false)).bytes(), "not allowed"},
		{"Attachments/OnCallFailed", cmdEnvelope("call.failed", `{}`).with("kind", `"notice"`).with("id", `"bus-1"`).with("attachments", attachmentList(1, false)).bytes(), "not allowed"},
		{"Attachment/NotAnObject", publishEnvelope(`["frame"]`), "want an object"},
		{"Attachment/UnknownField", publishEnvelope(attWith("extra", "1")), "extra: unknown field"},
		{"Attachment/MissingOwner", publishEnvelope("[" + attachmentJSON("a").without("ownerId").String() + "]"), "ownerId: missing"},
		{"Attachment/BadName", publishEnvelope(attWith("name", `"Frame"`)), "name: not a valid Id"},
		{"Attachment/OwnerFromOtherFamily", publishEnvelope(attWith("ownerId", `"a-1"`)), "ownerId: want dlv-"},
		{"Attachment/RefNotAnObject", publishEnvelope(attWith("ref", "null")), "want an object"},
		{"Ref/UnknownField", publishEnvelope(refWith("path", `"/tmp/x"`)), "path: unknown field"},
		{"Ref/MissingDigest", publishEnvelope(refWith("digest", "")), "digest: missing"},
		{"Ref/BadStore", publishEnvelope(refWith("storeId", `"router-00ff00ff12345678"`)), "storeId: want store-"},
		{"Ref/ByteLengthNumber", publishEnvelope(refWith("byteLength", "1")), "byteLength: want a string"},
		{"Ref/EmptyContentType", publishEnvelope(refWith("contentType", `""`)), "contentType: not 1..127"},
		{"Ref/UppercaseDigest", publishEnvelope(refWith("digest", `"`+strings.Repeat("A", 64)+`"`)), "digest: want 64 lowercase hex"},
	}
	var d Decoder
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var env Envelope
			err := d.Decode(c.frame, &env)
			if errors.As(err, new(*ProtocolError)) {
				t.Fatalf("got fatal %v, want a body-level refusal", err)
			}
			var be *BusError
			if !errors.As(err, &be) || be == nil || be.Code != ErrInvalidEnvelope || be.Dispatch != NotDispatched {
				t.Fatalf("got %v, want INVALID_ENVELOPE not-dispatched", err)
			}
			if !strings.Contains(be.Message, c.want) {
				t.Errorf("message %q, want it to contain %q", be.Message, c.want)
			}
			// The header survives so the router can address its reply.
			if env.ID != 1 || env.Kind == 0 {
				t.Errorf("header lost: id %d kind %v", env.ID, env.Kind)
			}
		})
	}

	// The same shapes at their limits are accepted.
	for name, frame := range map[string][]byte{
		"32": publishEnvelope(attachmentList(32, false)),
		"0":  publishEnvelope("[]"),
	} {
		var env Envelope
		if err := d.Decode(frame, &env); err != nil {
			t.Errorf("%s attachments: %v", name, err)
		}
	}
}

// badValue is one member value that a body must refuse.
type badValue struct {
	op, name, key, value string
}

var bodyBadValues = []badValue{
	{"bus.hello", "ClientIDUppercase", "clientId", `"Edge"`},
	{"bus.hello", "ClientIDEmpty", "clientId", `""`},
	{"bus.hello", "IncarnationNumber", "clientIncarnation", "1"},
	{"bus.hello", "MajorsEmpty", "supportedMajors", "[]"},
	{"bus.hello", "MajorZero", "supportedMajors", "[0]"},
	{"bus.hello", "MajorTooBig", "supportedMajors", "[65536]"},
	{"bus.hello", "MajorFraction", "supportedMajors", "[1.0]"},
	{"bus.hello", "MajorString", "supportedMajors", `["1"]`},
	{"bus.hello", "Majors17", "supportedMajors", "[" + strings.Repeat("1,", 16) + "1]"},
	{"bus.hello", "MajorsObject", "supportedMajors", "{}"},
	{"service.register", "NameDoubleDot", "name", `"a..b"`},
	{"service.register", "NameEmpty", "name", `""`},
	{"service.register", "QueuedZero", "maxQueued", "0"},
	{"service.register", "Queued65536", "maxQueued", "65536"},
	{"service.register", "QueuedNegative", "maxQueued", "-1"},
	{"service.register", "QueuedFraction", "maxQueued", "1.5"},
	{"service.register", "QueuedExponent", "maxQueued", "1e1"},
	{"service.register", "QueuedString", "maxQueued", `"16"`},
	{"service.register", "InFlightZero", "maxInFlight", "0"},
	{"service.register", "InFlight65536", "maxInFlight", "65536"},
	{"service.unregister", "IncarnationWrongFamily", "serviceIncarnation", `"top-1"`},
	{"service.unregister", "IncarnationLeadingZero", "serviceIncarnation", `"svc-01"`},
	{"service.unregister", "IncarnationNull", "serviceIncarnation", "null"},
	{"rpc.call", "CallIDWrongFamily", "callId", `"dlv-1"`},
	{"rpc.call", "CallIDPrefixOnly", "callId", `"call-"`},
	{"rpc.call", "CallIDNumber", "callId", "2"},
	{"rpc.call", "TargetUppercase", "target", `"Example"`},
	{"rpc.call", "ExpectedWrongFamily", "expectedIncarnation", `"sub-1"`},
	{"rpc.call", "ExpectedNumber", "expectedIncarnation", "1"},
	{"rpc.call", "MethodEmpty", "method", `""`},
	{"rpc.call", "MethodTooLong", "method", `"` + strings.Repeat("m", 129) + `"`},
	{"rpc.call", "MethodControl", "method", `"a\u0001"`},
	{"rpc.call", "MethodDEL", "method", `"a\u007f"`},
	{"rpc.call", "MethodNonASCII", "method", `"Zähler"`},
	{"rpc.call", "MethodNumber", "method", "1"},
	{"rpc.call", "PayloadArray", "payload", "[]"},
	{"rpc.call", "PayloadString", "payload", `"x"`},
	{"rpc.call", "PayloadNull", "payload", "null"},
	{"rpc.reply", "CallIDWrongFamily", "callId", `"own-1"`},
	{"rpc.reply", "RequestWrongFamily", "requestDeliveryId", `"call-1"`},
	{"rpc.reply", "OutcomeArray", "outcome", "[]"},
	{"rpc.cancel", "CallIDWrongFamily", "callId", `"msg-1"`},
	{"rpc.responder.release", "RequestWrongFamily", "requestDeliveryId", `"own-1"`},
	{"rpc.responder.release", "CallIDWrongFamily", "callId", `"sub-1"`},
	{"topic.declare", "RetainedUnknown", "retained", `"all"`},
	{"topic.declare", "RetainedCapital", "retained", `"None"`},
	{"topic.declare", "RetainedBool", "retained", "true"},
	{"topic.declare", "NameLeadingDot", "name", `".a"`},
	{"topic.clear", "NameLeadingDot", "name", `".a"`},
	{"topic.delete", "NameTrailingDot", "name", `"a."`},
	{"subscribe", "ModeUnknown", "mode", `"none"`},
	{"subscribe", "QueuedZero", "maxQueued", "0"},
	{"subscribe", "Queued65536", "maxQueued", "65536"},
	{"subscribe", "InFlightZero", "maxInFlight", "0"},
	{"subscribe", "InFlight65536", "maxInFlight", "65536"},
	{"subscribe", "ReplayString", "replayLatest", `"true"`},
	{"subscribe", "ReplayNumber", "replayLatest", "1"},
	{"subscribe", "TopicWildcard", "topic", `"a.*"`},
	{"unsubscribe", "WrongFamily", "subscriptionId", `"svc-1"`},
	{"publish", "TopicSpace", "topic", `"a b"`},
	{"publish", "PayloadArray", "payload", "[1]"},
	{"delivery.consumed", "Batch0", "deliveryIds", "[]"},
	{"delivery.consumed", "Batch65", "deliveryIds", serialBatch("dlv-", 65)},
	{"delivery.consumed", "WrongFamily", "deliveryIds", `["own-1"]`},
	{"delivery.consumed", "NotAnArray", "deliveryIds", `"dlv-1"`},
	{"artifact.allocate", "LengthNumber", "byteLength", "1"},
	{"artifact.allocate", "LengthNegative", "byteLength", `"-1"`},
	{"artifact.allocate", "LengthLeadingZero", "byteLength", `"01"`},
	{"artifact.allocate", "LengthOverflow", "byteLength", `"18446744073709551616"`},
	{"artifact.allocate", "ContentTypeEmpty", "contentType", `""`},
	{"artifact.allocate", "ContentTypeTooLong", "contentType", `"` + strings.Repeat("c", 128) + `"`},
	{"artifact.allocate", "ContentTypeNewline", "contentType", `"a\n"`},
	{"artifact.allocate", "ContentTypeNonASCII", "contentType", `"é"`},
	{"artifact.seal", "ArtifactWrongFamily", "artifactId", `"own-1"`},
	{"artifact.seal", "GenerationText", "generation", `"x"`},
	{"artifact.seal", "OwnerArtifact", "ownerId", `"a-1"`},
	{"artifact.seal", "OwnerMessage", "ownerId", `"msg-1"`},
	{"artifact.seal", "DigestUppercase", "digest", `"` + strings.Repeat("A", 64) + `"`},
	{"artifact.seal", "DigestShort", "digest", `"` + strings.Repeat("a", 63) + `"`},
	{"artifact.seal", "DigestNumber", "digest", "1"},
	{"artifact.open", "RefNull", "ref", "null"},
	{"artifact.open", "RefUnknownField", "ref", refMembers().with("path", `"/etc/passwd"`).String()},
	{"artifact.open", "RefMissingField", "ref", refMembers().without("generation").String()},
	{"artifact.open", "RefRouterTag", "ref", refMembers().with("storeId", `"router-00ff00ff12345678"`).String()},
	{"artifact.open", "OwnerCall", "ownerId", `"call-1"`},
	{"artifact.retain", "RefUnknownField", "ref", refMembers().with("x", "1").String()},
	{"artifact.retain", "OwnerNull", "ownerId", "null"},
	{"artifact.release", "Batch0", "ownerIds", "[]"},
	{"artifact.release", "Batch65", "ownerIds", serialBatch("own-", 65)},
	{"artifact.release", "WrongFamily", "ownerIds", `["a-1"]`},
}

// bodyGoodValues are the boundary values that must be accepted.
var bodyGoodValues = []badValue{
	{"bus.hello", "Majors16", "supportedMajors", "[" + strings.Repeat("1,", 15) + "65535]"},
	{"service.register", "Credit1", "maxQueued", "1"},
	{"service.register", "Credit65535", "maxInFlight", "65535"},
	{"subscribe", "Credit1", "maxQueued", "1"},
	{"subscribe", "Credit65535", "maxInFlight", "65535"},
	{"subscribe", "ModeLatest", "mode", `"latest"`},
	{"rpc.call", "Method128", "method", `"` + strings.Repeat("m", 128) + `"`},
	{"rpc.call", "ExpectedNull", "expectedIncarnation", "null"},
	{"rpc.call", "MethodEscaped", "method", `"Say \"hi\" \\ \u0041"`},
	{"rpc.call", "PayloadEmpty", "payload", "{}"},
	{"delivery.consumed", "Batch1", "deliveryIds", `["dlv-0"]`},
	{"delivery.consumed", "Batch64", "deliveryIds", serialBatch("dlv-", 64)},
	{"artifact.release", "Batch64", "ownerIds", serialBatch("own-", 64)},
	{"artifact.release", "Mixed", "ownerIds", `["own-1","dlv-1"]`},
	{"artifact.seal", "DigestNull", "digest", "null"},
	{"artifact.allocate", "LengthMax", "byteLength", `"18446744073709551615"`},
	{"artifact.allocate", "ContentType127", "contentType", `"` + strings.Repeat("c", 127) + `"`},
	{"topic.declare", "RetainedNone", "retained", `"none"`},
}

func serialBatch(prefix string, n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = `"` + prefix + FormatU64(uint64(i)) + `"`
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func refMembers() members { return membersOf(sampleRef.AppendJSON(nil)) }

// bodyFrame wraps a body in the envelope its shape expects.
func bodyFrame(s Shape, body string) []byte {
	env := cmdEnvelope(s.Op.String(), body)
	if s.Kind != KindCommand {
		env = env.with("kind", `"`+s.Kind.String()+`"`).with("id", `"bus-1"`)
	}
	return env.bytes()
}

// decodeBodyFrame decodes frame and its body as s.Body; decode errors of
// the envelope itself fail the test.
func decodeBodyFrame(t *testing.T, d *Decoder, s Shape, frame []byte) error {
	t.Helper()
	var env Envelope
	if err := d.Decode(frame, &env); err != nil {
		t.Fatalf("envelope: %v\n%s", err, frame)
	}
	if err := env.DecodeBody(fresh(s.Body)); err != nil {
		return err
	}
	return nil
}

func wantBodyRefusal(t *testing.T, err error, frame []byte) {
	t.Helper()
	var be *BusError
	if !errors.As(err, &be) || be == nil || be.Code != ErrInvalidEnvelope || be.Dispatch != NotDispatched {
		t.Fatalf("got %v, want INVALID_ENVELOPE not-dispatched\n%.300s", err, frame)
	}
}

// Every body of every shape refuses an unknown field, each missing field and
// a non-object, and accepts its sample.
func TestBodyRefusesShape(t *testing.T) {
	var d Decoder
	for _, s := range Shapes() {
		good := membersOf(sampleFor(t, s.Body).AppendJSON(nil))
		prefix := s.Kind.String() + "/" + s.Op.String() + "/"
		t.Run(prefix+"Sample", func(t *testing.T) {
			if err := decodeBodyFrame(t, &d, s, bodyFrame(s, good.String())); err != nil {
				t.Fatal(err)
			}
		})
		variants := map[string]string{
			"UnknownField":      good.with("zzz", "0").String(),
			"UnknownFieldFirst": append(members{{"extra", "null"}}, good...).String(),
			"CaseVariant":       good.with(strings.ToUpper(good[0].k[:1])+good[0].k[1:], good[0].v).String(),
			"Empty":             "{}",
		}
		for _, m := range good {
			variants["Missing/"+m.k] = good.without(m.k).String()
		}
		for name, body := range variants {
			t.Run(prefix+name, func(t *testing.T) {
				frame := bodyFrame(s, body)
				wantBodyRefusal(t, decodeBodyFrame(t, &d, s, frame), frame)
			})
		}
	}
}

func TestBodyRefusesValue(t *testing.T) {
	var d Decoder
	check := func(cases []badValue, wantOK bool) {
		for _, c := range cases {
			t.Run(c.op+"/"+c.name, func(t *testing.T) {
				s, ok := shapeOf(lookupOp([]byte(c.op)))
				if !ok {
					t.Fatalf("no shape %q", c.op)
				}
				good := membersOf(sampleFor(t, s.Body).AppendJSON(nil))
				good.without(c.key) // the key must be a real member
				frame := bodyFrame(s, good.with(c.key, c.value).String())
				err := decodeBodyFrame(t, &d, s, frame)
				if wantOK {
					if err != nil {
						t.Fatalf("%v\n%.300s", err, frame)
					}
					return
				}
				wantBodyRefusal(t, err, frame)
				// The message names the offending member.
				if !strings.Contains(err.Error(), c.key) {
					t.Errorf("message %q does not name %q", err, c.key)
				}
			})
		}
	}
	check(bodyBadValues, false)
	check(bodyGoodValues, true)
}

// An escaped key followed by an escaped value: both pass through the
// decoder's scratch buffer, and the error must still name the key.
func TestBodyErrorNamesEscapedKey(t *testing.T) {
	var d Decoder
	s, _ := shapeOf(OpTopicClear)
	frame := bodyFrame(s, `{"n\u0061me":"a\u002e.b"}`)
	err := decodeBodyFrame(t, &d, s, frame)
	wantBodyRefusal(t, err, frame)
	if !strings.Contains(err.Error(), ": name: ") {
		t.Errorf("message %q does not name the member", err)
	}
}

func TestDecodeReplyRefusals(t *testing.T) {
	reply := func(body string) []byte {
		return cmdEnvelope("rpc.cancel", body).with("kind", `"reply"`).with("id", `"bus-1"`).with("replyTo", `"msg-1"`).bytes()
	}
	errObj := `{"code":"NO_SERVICE","message":"m","dispatch":"unknown"}`
	cases := []struct{ name, body string }{
		{"OkMissing", `{"value":{"state":"completed"}}`},
		{"OkNotBool", `{"ok":1,"value":{"state":"completed"}}`},
		{"TrueWithoutValue", `{"ok":true}`},
		{"TrueWithError", `{"ok":true,"value":{"state":"completed"},"error":` + errObj + `}`},
		{"FalseWithoutError", `{"ok":false}`},
		{"FalseWithValue", `{"ok":false,"value":{},"error":` + errObj + `}`},
		{"UnknownField", `{"ok":true,"value":{"state":"completed"},"x":1}`},
		{"ValueBad", `{"ok":true,"value":{"state":"done"}}`},
		{"ValueArray", `{"ok":true,"value":[]}`},
		{"ErrorNotObject", `{"ok":false,"error":"NO_SERVICE"}`},
		{"ErrorUnknownCode", `{"ok":false,"error":{"code":"NOPE","message":"m","dispatch":"unknown"}}`},
		{"ErrorLowercaseCode", `{"ok":false,"error":{"code":"no_service","message":"m","dispatch":"unknown"}}`},
		{"ErrorUnknownDispatch", `{"ok":false,"error":{"code":"NO_SERVICE","message":"m","dispatch":"maybe"}}`},
		{"ErrorMissingMessage", `{"ok":false,"error":{"code":"NO_SERVICE","dispatch":"unknown"}}`},
		{"ErrorExtraField", `{"ok":false,"error":{"code":"NO_SERVICE","message":"m","dispatch":"unknown","callId":"call-1"}}`},
		{"ErrorMessageTooLong", `{"ok":false,"error":{"code":"NO_SERVICE","message":"` + strings.Repeat("m", MaxErrorMessageLen+1) + `","dispatch":"unknown"}}`},
	}
	var d Decoder
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var env Envelope
			if err := d.Decode(reply(c.body), &env); err != nil {
				t.Fatal(err)
			}
			be, err := env.DecodeReply(&CancelOK{})
			if be != nil {
				t.Fatalf("carried error %v from a malformed reply", be)
			}
			wantBodyRefusal(t, err, reply(c.body))
		})
	}
	// ReplyBody is for encoding only.
	var env Envelope
	if err := d.Decode(reply(`{"ok":true,"value":{"state":"completed"}}`), &env); err != nil {
		t.Fatal(err)
	}
	wantBodyRefusal(t, env.DecodeBody(&ReplyBody{}), nil)
}
