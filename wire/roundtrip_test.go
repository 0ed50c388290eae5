package wire

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// Round trips: every body of the contract and every reply value goes
// through AppendEnvelope, Decoder.Decode and DecodeBody (or DecodeReply)
// and comes back equal. RawJSON members alias the frame; reflect.DeepEqual
// compares their bytes, which is what equality means for them.

func decodeFrame(t *testing.T, d *Decoder, frame []byte) *Envelope {
	t.Helper()
	env := new(Envelope)
	if err := d.Decode(frame, env); err != nil {
		t.Fatalf("decode: %v\n%.400s", err, frame)
	}
	if err := Valid(frame); err != nil {
		t.Fatalf("frame is not strict JSON: %v", err)
	}
	return env
}

func TestRoundTripBodies(t *testing.T) {
	var d Decoder
	for _, s := range Shapes() {
		t.Run(s.Kind.String()+"/"+s.Op.String(), func(t *testing.T) {
			want := sampleFor(t, s.Body)
			var atts []Attachment
			if s.Op.CarriesAttachments() {
				atts = sampleAttachments()
			}
			h := headerFor(s.Kind, s.Op, 7)
			env := decodeFrame(t, &d, AppendEnvelope(nil, h, want, atts))
			if env.Header() != h || env.Major != Major || env.Minor != Minor {
				t.Errorf("header %+v %d.%d, want %+v %d.%d", env.Header(), env.Major, env.Minor, h, Major, Minor)
			}
			if !reflect.DeepEqual(env.Attachments, atts) && len(atts)+len(env.Attachments) > 0 {
				t.Errorf("attachments\n got %+v\nwant %+v", env.Attachments, atts)
			}
			got := fresh(s.Body)
			if err := env.DecodeBody(got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("body\n got %+v\nwant %+v", got, want)
			}
		})
		if s.Reply == nil {
			continue
		}
		t.Run("reply/"+s.Op.String(), func(t *testing.T) {
			want := sampleFor(t, s.Reply)
			h := headerFor(KindReply, s.Op, 7)
			env := decodeFrame(t, &d, AppendEnvelope(nil, h, &ReplyBody{Value: want}, nil))
			if env.Header() != h {
				t.Errorf("header %+v, want %+v", env.Header(), h)
			}
			got := fresh(s.Reply)
			be, err := env.DecodeReply(got)
			if be != nil || err != nil {
				t.Fatalf("DecodeReply: %v, %v", be, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("value\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestRoundTripErrorReplies(t *testing.T) {
	var d Decoder
	for _, code := range AllErrorCodes() {
		for _, disp := range []Dispatch{NotDispatched, Dispatched, DispatchUnknown} {
			t.Run(code.String()+"/"+disp.String(), func(t *testing.T) {
				want := &BusError{Code: code, Message: "refused: " + code.String(), Dispatch: disp}
				frame := AppendEnvelope(nil, headerFor(KindReply, OpRPCCall, 3), &ReplyBody{Err: want}, nil)
				env := decodeFrame(t, &d, frame)
				got, err := env.DecodeReply(&CallOK{})
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("got %+v, want %+v", got, want)
				}
			})
		}
	}
	// A nil value encodes as an empty object, which a reply without fields
	// would accept; CallOK has required fields and must refuse it.
	env := decodeFrame(t, &d, AppendEnvelope(nil, headerFor(KindReply, OpRPCCall, 3), &ReplyBody{}, nil))
	if be, err := env.DecodeReply(&CallOK{}); be != nil || err == nil {
		t.Errorf("empty value decoded as CallOK: %v, %v", be, err)
	}
}

// A decoder reused for a shorter frame leaves nothing of the longer one in
// the reused slices.
func TestRoundTripReuse(t *testing.T) {
	var d Decoder
	var env Envelope
	long := AppendEnvelope(nil, headerFor(KindCommand, OpDeliveryConsumed, 1), &Consumed{DeliveryIDs: []DeliveryID{1, 2, 3}}, nil)
	short := AppendEnvelope(nil, headerFor(KindCommand, OpDeliveryConsumed, 2), &Consumed{DeliveryIDs: []DeliveryID{9}}, nil)
	var c Consumed
	for _, f := range [][]byte{long, short} {
		if err := d.Decode(f, &env); err != nil {
			t.Fatal(err)
		}
		if err := env.DecodeBody(&c); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(c.DeliveryIDs, []DeliveryID{9}) {
		t.Errorf("reused body: %v", c.DeliveryIDs)
	}
	if err := d.Decode(typicalPublish(), &env); err != nil || len(env.Attachments) != 2 {
		t.Fatalf("publish: %v, %d attachments", err, len(env.Attachments))
	}
	if err := d.Decode(typicalCall(), &env); err != nil || len(env.Attachments) != 0 {
		t.Fatalf("call after publish: %v, %d attachments", err, len(env.Attachments))
	}
}

// RawJSON from a decoder aliases the frame (documented), and Clone does not.
func TestRawJSONAliasesFrame(t *testing.T) {
	var d Decoder
	frame := typicalCall()
	env := decodeFrame(t, &d, frame)
	var c Call
	if err := env.DecodeBody(&c); err != nil {
		t.Fatal(err)
	}
	kept := c.Payload.Clone()
	i := strings.Index(string(frame), `"amount":1`) + len(`"amount":`)
	frame[i] = '2'
	if string(c.Payload) != `{"amount":2,"note":"tick"}` {
		t.Errorf("payload %s does not alias the frame", c.Payload)
	}
	if string(kept) != `{"amount":1,"note":"tick"}` {
		t.Errorf("clone %s changed with the frame", kept)
	}
	if string(env.RawBody()) != string(frame[strings.Index(string(frame), `{"callId"`):strings.Index(string(frame), `,"attachments"`)]) {
		t.Errorf("RawBody %s", env.RawBody())
	}
}

// replaceInvalid is the expected decoded form of s once encoded: each byte
// that does not start a valid UTF-8 sequence becomes U+FFFD.
func replaceInvalid(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size <= 1 {
			b.WriteString("\uFFFD")
			i++
			continue
		}
		b.WriteString(s[i : i+size])
		i += size
	}
	return b.String()
}

var allControls = func() string {
	b := make([]byte, 0x20)
	for i := range b {
		b[i] = byte(i)
	}
	return string(b)
}()

var textCases = []struct{ name, in string }{
	{"Plain", "plain text"},
	{"Quotes", `say "hi"`},
	{"Backslash", `C:\path\to \u0041`},
	{"Controls", allControls},
	{"DEL", "a\x7fb"},
	{"NonASCII", "héllo — 世界 😀"},
	{"LineSeparators", "\u2028\u2029"},
	{"Replacement", "\uFFFD"},
	{"InvalidByte", "bad\xffbyte"},
	{"InvalidBytes", "\xfe\xff"},
	{"Continuation", "\x80x"},
	{"Overlong", "\xc0\xaf"},
	{"TruncatedAtEnd", "euro \xe2\x82"},
	{"TruncatedInside", "\xf0\x9f\x98x"},
	{"EncodedSurrogate", "\xed\xa0\x80"},
	{"AboveMax", "\xf4\x90\x80\x80"},
	{"Empty", ""},
}

// Strings that need escaping or replacement come out as strict JSON that
// encoding/json reads as the same text, and decode back to it.
func TestRoundTripEscapes(t *testing.T) {
	var d Decoder
	for _, c := range textCases {
		want := replaceInvalid(c.in)
		t.Run("CallFailed/"+c.name, func(t *testing.T) {
			frame := AppendEnvelope(nil, headerFor(KindNotice, OpCallFailed, 1),
				&CallFailed{CallID: 1, Code: ErrCallGone, Message: c.in, Dispatch: Dispatched}, nil)
			env := decodeFrame(t, &d, frame)
			var got CallFailed
			if err := env.DecodeBody(&got); err != nil {
				t.Fatal(err)
			}
			if got.Message != want {
				t.Errorf("message %q, want %q", got.Message, want)
			}
			var std struct{ Body struct{ Message string } }
			if err := json.Unmarshal(frame, &std); err != nil || std.Body.Message != want {
				t.Errorf("encoding/json reads %q (%v), want %q", std.Body.Message, err, want)
			}
		})
		t.Run("ErrorReply/"+c.name, func(t *testing.T) {
			frame := AppendEnvelope(nil, headerFor(KindReply, OpPublish, 1),
				&ReplyBody{Err: &BusError{Code: ErrBackpressure, Message: c.in, Dispatch: NotDispatched}}, nil)
			be, err := decodeFrame(t, &d, frame).DecodeReply(&PublishOK{})
			if err != nil || be == nil || be.Message != want {
				t.Errorf("got %+v, %v; want message %q", be, err, want)
			}
		})
		t.Run("Reason/"+c.name, func(t *testing.T) {
			frame := AppendEnvelope(nil, headerFor(KindNotice, OpRouteRemoved, 1),
				&RouteRemoved{Name: "s", ServiceIncarnation: 1, Reason: c.in}, nil)
			var got RouteRemoved
			if err := decodeFrame(t, &d, frame).DecodeBody(&got); err != nil || got.Reason != want {
				t.Errorf("reason %q (%v), want %q", got.Reason, err, want)
			}
		})
	}
	// Escape-bearing text in the bounded-alphabet fields.
	body := &Call{CallID: 1, Target: "t", Method: `Say "hi" \ now`, Payload: RawJSON(`{"s":"\"\\\u0000"}`)}
	var got Call
	if err := decodeFrame(t, &d, AppendEnvelope(nil, headerFor(KindCommand, OpRPCCall, 1), body, nil)).DecodeBody(&got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, body) {
		t.Errorf("got %+v, want %+v", got, body)
	}
	alloc := &Allocate{ByteLength: 1, ContentType: `text/plain; charset="utf-8"; x=\`}
	var gotAlloc Allocate
	if err := decodeFrame(t, &d, AppendEnvelope(nil, headerFor(KindCommand, OpArtifactAllocate, 1), alloc, nil)).DecodeBody(&gotAlloc); err != nil || gotAlloc != *alloc {
		t.Errorf("got %+v (%v), want %+v", gotAlloc, err, alloc)
	}
}

// Free text is bounded on the wire by its decoded length. The bound must
// hold after invalid bytes grow into three-byte U+FFFD, or a peer sending a
// long message with bad bytes produces a frame its own decoder refuses.
func TestRoundTripLongText(t *testing.T) {
	inputs := map[string]string{
		"InvalidBytes":   strings.Repeat("\xff", 2*MaxErrorMessageLen),
		"MixedInvalid":   strings.Repeat("ab\xfe", MaxErrorMessageLen),
		"TwoByteRunes":   strings.Repeat("é", MaxErrorMessageLen),
		"FourByteRunes":  strings.Repeat("😀", MaxErrorMessageLen),
		"Controls":       strings.Repeat("\x01", MaxErrorMessageLen+1),
		"ExactlyAtLimit": strings.Repeat("m", MaxErrorMessageLen),
	}
	var d Decoder
	for name, in := range inputs {
		want := replaceInvalid(in)
		check := func(t *testing.T, got string, max int) {
			t.Helper()
			if len(got) > max || !utf8.ValidString(got) || !strings.HasPrefix(want, got) {
				t.Fatalf("got %d bytes, want a valid prefix of the replaced text of at most %d", len(got), max)
			}
			if len(want) > max && len(got) < max-3 {
				t.Errorf("cut to %d bytes, want at least %d", len(got), max-3)
			}
			if len(want) <= max && got != want {
				t.Errorf("text within the bound was cut to %d bytes", len(got))
			}
		}
		t.Run("ConnectionClosing/"+name, func(t *testing.T) {
			frame := AppendEnvelope(nil, headerFor(KindNotice, OpConnectionClosing, 1),
				&ConnectionClosing{Code: ErrInvalidEnvelope, Message: in}, nil)
			var got ConnectionClosing
			if err := decodeFrame(t, &d, frame).DecodeBody(&got); err != nil {
				t.Fatal(err)
			}
			check(t, got.Message, MaxErrorMessageLen)
		})
		t.Run("ErrorReply/"+name, func(t *testing.T) {
			frame := AppendEnvelope(nil, headerFor(KindReply, OpPublish, 1),
				&ReplyBody{Err: &BusError{Code: ErrBackpressure, Message: in, Dispatch: NotDispatched}}, nil)
			be, err := decodeFrame(t, &d, frame).DecodeReply(&PublishOK{})
			if err != nil {
				t.Fatal(err)
			}
			check(t, be.Message, MaxErrorMessageLen)
		})
		t.Run("SubscriptionClosed/"+name, func(t *testing.T) {
			frame := AppendEnvelope(nil, headerFor(KindNotice, OpSubscriptionClosed, 1),
				&SubscriptionClosed{SubscriptionID: 1, Topic: "t", TopicIncarnation: Some(TopicInc(1)), Reason: in}, nil)
			var got SubscriptionClosed
			if err := decodeFrame(t, &d, frame).DecodeBody(&got); err != nil {
				t.Fatal(err)
			}
			check(t, got.Reason, MaxReasonLen)
		})
	}
}

// appendString's replacement agrees with utf8.DecodeRune's notion of an
// invalid byte over every one- and two-byte input and every three-byte
// input with a multi-byte lead, so no sequence slips through unreplaced.
func TestAppendStringExhaustive(t *testing.T) {
	var s Scanner
	var buf []byte
	check := func(in []byte) {
		buf = appendString(buf[:0], in)
		if err := s.Scan(buf); err != nil {
			t.Fatalf("%q encodes as %q: %v", in, buf, err)
		}
		got := string(appendUnescaped(nil, buf[1:len(buf)-1]))
		if want := replaceInvalid(string(in)); got != want {
			t.Fatalf("%q round-trips as %q, want %q", in, got, want)
		}
	}
	in := make([]byte, 3)
	for a := range 256 {
		in[0] = byte(a)
		check(in[:1])
		for b := range 256 {
			in[1] = byte(b)
			check(in[:2])
			if a < 0xC0 {
				continue
			}
			for _, c := range []byte{0x00, 0x41, 0x7f, 0x80, 0x9f, 0xa0, 0xbf, 0xc0, 0xff} {
				in[2] = c
				check(in[:3])
			}
		}
	}
}
