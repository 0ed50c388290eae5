package wire

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
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

// namedValue is a member value and the name of its case. The value goes
// into the body as encoding/json writes it, a jsonText as it is spelled.
type namedValue struct {
	name  string
	value any
}

// jsonText is a value spelled as JSON text, where the spelling is the
// point (an escape, an exponent) or no Go value marshals to it.
type jsonText string

// labelCases are the values of one label: bad ones a member so labelled
// must refuse, good ones (at the boundaries) it must accept.
type labelCases struct{ bad, good []namedValue }

// labelValues holds, for a value label of the Contract, values that every
// member so labelled must refuse and, at the boundaries, accept. Each
// member of each shape's body is tried with those of its label; an
// optional member (label|null) also refuses its base label's values but
// null.
var labelValues = map[string]labelCases{
	"Id": {bad: []namedValue{
		{"Uppercase", "Edge"},
		{"Empty", ""},
		{"Number", 1},
	}},
	"[int 1..65535]": {bad: []namedValue{
		{"Empty", []int{}},
		{"Zero", []int{0}},
		{"TooBig", []int{65536}},
		{"Fraction", jsonText("[1.0]")},
		{"String", []string{"1"}},
		{"Count17", slices.Repeat([]int{1}, 17)},
		{"Object", map[string]int{}},
	}, good: []namedValue{
		{"Count16", append(slices.Repeat([]int{1}, 15), 65535)},
	}},
	"[Id 0..16]": {bad: []namedValue{
		{"Uppercase", []string{"Presence"}},
		{"Count17", slices.Repeat([]string{"x"}, 17)},
		{"Number", []int{1}},
		{"NotList", "presence"},
	}, good: []namedValue{
		{"Empty", []string{}},
		{"Unknown", []string{"x-later.1", ExtPresence}},
	}},
	"Name": {bad: []namedValue{
		{"DoubleDot", "a..b"},
		{"Empty", ""},
		{"Uppercase", "Example"},
		{"LeadingDot", ".a"},
		{"TrailingDot", "a."},
		{"Wildcard", "a.*"},
		{"Space", "a b"},
	}},
	"int 1..65535": {bad: []namedValue{
		{"Zero", 0},
		{"65536", 65536},
		{"Negative", -1},
		{"Fraction", 1.5},
		{"Exponent", jsonText("1e1")},
		{"String", "16"},
	}, good: []namedValue{
		{"1", 1},
		{"65535", 65535},
	}},
	"SvcId": {bad: []namedValue{
		{"WrongFamily", "top-1"},
		{"LeadingZero", "svc-01"},
		{"Null", nil},
	}},
	"SvcId|null": {bad: []namedValue{
		{"OtherFamily", "sub-1"},
		{"Number", 1},
	}, good: []namedValue{
		{"Null", nil},
	}},
	"CallId": {bad: []namedValue{
		{"DeliveryFamily", "dlv-1"},
		{"PrefixOnly", "call-"},
		{"Number", 2},
		{"OwnerFamily", "own-1"},
		{"MessageFamily", "msg-1"},
		{"SubscriptionFamily", "sub-1"},
	}},
	"Method":      printableValues(128, "m"),
	"ContentType": printableValues(127, "c"),
	"object": {bad: []namedValue{
		{"EmptyArray", []int{}},
		{"String", "x"},
		{"Null", nil},
		{"Array", []int{1}},
	}, good: []namedValue{
		{"Empty", map[string]int{}},
	}},
	"DeliveryId": {bad: []namedValue{
		{"CallFamily", "call-1"},
		{"OwnerFamily", "own-1"},
	}},
	"none|latest": {bad: []namedValue{
		{"Unknown", "all"},
		{"Capital", "None"},
		{"Bool", true},
	}, good: []namedValue{
		{"None", "none"},
	}},
	"latest|bounded": {bad: []namedValue{
		{"Unknown", "none"},
	}, good: []namedValue{
		{"Latest", "latest"},
	}},
	"bool": {bad: []namedValue{
		{"String", "true"},
		{"Number", 1},
	}},
	"SubId": {bad: []namedValue{
		{"WrongFamily", "svc-1"},
	}},
	"[DeliveryId 1..64]": {bad: []namedValue{
		{"Batch0", []string{}},
		{"Batch65", serials("dlv-", 65)},
		{"WrongFamily", []string{"own-1"}},
		{"NotAnArray", "dlv-1"},
	}, good: []namedValue{
		{"Batch1", []string{"dlv-0"}},
		{"Batch64", serials("dlv-", 64)},
	}},
	"U64": {bad: []namedValue{
		{"Number", 1},
		{"Negative", "-1"},
		{"LeadingZero", "01"},
		{"Overflow", "18446744073709551616"},
		{"Text", "x"},
	}, good: []namedValue{
		{"Max", "18446744073709551615"},
	}},
	"ArtifactId": {bad: []namedValue{
		{"WrongFamily", "own-1"},
	}},
	"OwnerId": {bad: []namedValue{
		{"Artifact", "a-1"},
		{"Message", "msg-1"},
		{"Call", "call-1"},
		{"Null", nil},
	}},
	"Digest|null": {bad: []namedValue{
		{"Uppercase", strings.Repeat("A", 64)},
		{"Short", strings.Repeat("a", 63)},
		{"Number", 1},
	}, good: []namedValue{
		{"Null", nil},
	}},
	"ArtifactRef": {bad: []namedValue{
		{"Null", nil},
		{"UnknownPath", jsonText(refMembers().with("path", `"/etc/passwd"`).String())},
		{"MissingField", jsonText(refMembers().without("generation").String())},
		{"RouterTag", jsonText(refMembers().with("storeId", `"router-00ff00ff12345678"`).String())},
		{"UnknownField", jsonText(refMembers().with("x", "1").String())},
	}},
	"[OwnerId 1..64]": {bad: []namedValue{
		{"Batch0", []string{}},
		{"Batch65", serials("own-", 65)},
		{"WrongFamily", []string{"a-1"}},
	}, good: []namedValue{
		{"Batch64", serials("own-", 64)},
		{"Mixed", []string{"own-1", "dlv-1"}},
	}},
}

// printableValues are the values of a label of 1..max printable ASCII
// characters (Method, ContentType); fill spells the longest.
func printableValues(max int, fill string) labelCases {
	return labelCases{bad: []namedValue{
		{"Empty", ""},
		{"TooLong", strings.Repeat(fill, max+1)},
		{"Control", "a\x01"},
		{"Newline", "a\n"},
		{"DEL", jsonText(`"a\u007f"`)},
		{"NonASCII", "é"},
		{"NonASCIIWord", "Zähler"},
		{"Number", 1},
	}, good: []namedValue{
		{"Longest", strings.Repeat(fill, max)},
		{"Escaped", jsonText(`"Say \"hi\" \\ \u0041"`)},
	}}
}

// serials are the first n ids of a family, spelled with prefix.
func serials(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + FormatU64(uint64(i))
	}
	return out
}

// jsonOf is v as JSON text: a jsonText as it is, anything else as
// encoding/json writes it.
func jsonOf(v any) string {
	if s, ok := v.(jsonText); ok {
		return string(s)
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // the table holds only values that marshal
	}
	return string(b)
}

// memberValue is one value of labelValues in one member of a shape's body.
type memberValue struct {
	s     Shape
	key   string
	name  string
	value string // JSON text
	ok    bool   // a good value, which the body must accept
}

// memberValues lists the values of labelValues for every member of every
// shape's body, in contract order.
func memberValues() []memberValue {
	var out []memberValue
	for _, s := range Shapes() {
		for _, m := range shapeMembers(reflect.TypeOf(s.Body), nil) {
			vs := labelValues[m.label]
			bad := slices.Clone(vs.bad)
			if base, ok := strings.CutSuffix(m.label, "|null"); ok {
				for _, v := range labelValues[base].bad {
					if v.value != nil {
						bad = append(bad, namedValue{base + "/" + v.name, v.value})
					}
				}
			}
			for _, v := range bad {
				out = append(out, memberValue{s, m.key, v.name, jsonOf(v.value), false})
			}
			for _, v := range vs.good {
				out = append(out, memberValue{s, m.key, v.name, jsonOf(v.value), true})
			}
		}
	}
	return out
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
		optional := map[string]bool{}
		for _, m := range shapeMembers(reflect.TypeOf(s.Body), nil) {
			optional[m.key] = m.optional
		}
		for _, m := range good {
			if optional[m.k] {
				// An optional member may be left out: the rest still decodes.
				t.Run(prefix+"Absent/"+m.k, func(t *testing.T) {
					if err := decodeBodyFrame(t, &d, s, bodyFrame(s, good.without(m.k).String())); err != nil {
						t.Fatal(err)
					}
				})
				variants["Null/"+m.k] = good.with(m.k, "null").String()
				continue
			}
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

// Every member of every body refuses the bad values of its label and
// accepts the good ones.
func TestBodyRefusesValue(t *testing.T) {
	var d Decoder
	for _, c := range memberValues() {
		t.Run(c.s.Op.String()+"/"+c.key+"/"+c.name, func(t *testing.T) {
			good := membersOf(sampleFor(t, c.s.Body).AppendJSON(nil))
			frame := bodyFrame(c.s, good.with(c.key, c.value).String())
			err := decodeBodyFrame(t, &d, c.s, frame)
			if c.ok {
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
	// A label no member carries is a misspelling whose values test nothing.
	used := map[string]bool{}
	for _, s := range Shapes() {
		for _, m := range shapeMembers(reflect.TypeOf(s.Body), nil) {
			used[m.label] = true
		}
	}
	for label := range labelValues {
		if !used[label] {
			t.Errorf("no member is labelled %q", label)
		}
	}
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
