package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"testing"
	"unicode/utf8"
)

// FuzzScanner checks the scanner against encoding/json. Whatever we accept,
// encoding/json accepts with the same value; whatever encoding/json accepts
// and we refuse breaks one of our stricter rules, as judged by reference
// checks written here without the scanner's code.
//
// FuzzEnvelope checks that Decode never panics and that every envelope and
// body that decodes re-encodes to something that decodes to the same value.

func FuzzScanner(f *testing.F) {
	for _, c := range flat(scanRefusals(f), scanAccepts(f)) {
		f.Add([]byte(c.in))
	}
	var warm Scanner // reused across inputs, as a connection's decoder is
	f.Fuzz(func(t *testing.T, data []byte) {
		var s Scanner
		err := s.Scan(data)
		if werr := warm.Scan(data); (werr == nil) != (err == nil) {
			t.Fatalf("a reused scanner disagrees: fresh %v, reused %v", err, werr)
		}
		std, stdErr := stdDecode(data)
		if err == nil {
			if stdErr != nil {
				t.Fatalf("we accept, encoding/json refuses: %v", stdErr)
			}
			got, next := tapeValue(t, &s, 0)
			if int(next) != len(s.toks) {
				t.Fatalf("tape has %d tokens, the root value spans %d", len(s.toks), next)
			}
			if !reflect.DeepEqual(got, std) {
				t.Fatalf("values differ\n ours %#v\n std  %#v", got, std)
			}
			return
		}
		var se *SyntaxError
		if !errors.As(err, &se) || se.Offset < 0 || se.Offset > len(data) {
			t.Fatalf("refusal %v is not a *SyntaxError within the input", err)
		}
		if stdErr == nil && stricterRule(data) == "" {
			t.Fatalf("we refuse (%v), encoding/json accepts, and none of our stricter rules applies", err)
		}
	})
}

var errTrailing = errors.New("trailing data")

// stdDecode is encoding/json's reading: one value, numbers as json.Number,
// nothing but whitespace after it.
func stdDecode(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errTrailing
	}
	return v, nil
}

// tapeValue rebuilds the value at token i as encoding/json would build it,
// checking the tape's invariants on the way. It returns the index of the
// token after the value.
func tapeValue(t *testing.T, s *Scanner, i uint32) (any, uint32) {
	tk := s.toks[i]
	if tk.next <= i || int(tk.next) > len(s.toks) || tk.end > uint32(len(s.data)) || tk.start > tk.end {
		t.Fatalf("token %d has bad bounds %+v", i, tk)
	}
	text := s.data[tk.start:tk.end]
	switch tk.kind {
	case KindObject, KindArray:
		open, closing := byte('['), byte(']')
		if tk.kind == KindObject {
			open, closing = '{', '}'
		}
		if text[0] != open || text[len(text)-1] != closing {
			t.Fatalf("container token %d spans %q", i, text)
		}
		var n uint32
		m, arr := map[string]any{}, []any{}
		for j := i + 1; j < tk.next; n++ {
			if tk.kind == KindObject {
				kt := s.toks[j]
				if kt.kind != KindString {
					t.Fatalf("object key token %d is %v", j, kt.kind)
				}
				var v any
				v, j = tapeValue(t, s, j+1)
				m[string(appendUnescaped(nil, s.data[kt.start:kt.end]))] = v
				continue
			}
			var v any
			v, j = tapeValue(t, s, j)
			arr = append(arr, v)
		}
		if n != tk.count {
			t.Fatalf("container token %d counts %d, holds %d", i, tk.count, n)
		}
		if tk.kind == KindObject {
			return m, tk.next
		}
		return arr, tk.next
	case KindString:
		if tk.esc != (bytes.IndexByte(text, '\\') >= 0) {
			t.Fatalf("string token %d: esc %v for %q", i, tk.esc, text)
		}
		return string(appendUnescaped(nil, text)), tk.next
	case KindNumber:
		return json.Number(text), tk.next
	case KindTrue:
		return true, tk.next
	case KindFalse:
		return false, tk.next
	case KindNull:
		return nil, tk.next
	}
	t.Fatalf("token %d has kind %d", i, tk.kind)
	return nil, 0
}

// stricterRule names the rule of ours that valid RFC 8259 input breaks, or
// returns "" when it breaks none. Each check is independent of the scanner.
func stricterRule(data []byte) string {
	if !utf8.Valid(data) {
		return "invalid UTF-8"
	}
	if hasLoneSurrogate(data) {
		return "lone surrogate escape"
	}
	if nestingDepth(data) > MaxDepth {
		return "nesting deeper than MaxDepth"
	}
	return tokenRule(data)
}

// walkStrings calls fn with the raw body of each string in data, which
// encoding/json has already accepted.
func walkStrings(data []byte, fn func(body []byte) bool) bool {
	for i := 0; i < len(data); i++ {
		if data[i] != '"' {
			continue
		}
		j := i + 1
		for j < len(data) && data[j] != '"' {
			if data[j] == '\\' {
				j++
			}
			j++
		}
		if j > len(data) {
			j = len(data)
		}
		if fn(data[i+1 : j]) {
			return true
		}
		i = j
	}
	return false
}

func hasLoneSurrogate(data []byte) bool {
	u4 := func(b []byte) (int, bool) {
		if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(b[2:6]), 16, 16)
		return int(v), err == nil
	}
	return walkStrings(data, func(s []byte) bool {
		for i := 0; i < len(s); i++ {
			if s[i] != '\\' {
				continue
			}
			r, ok := u4(s[i:])
			if !ok {
				i++ // a two-byte escape such as \\ or \"
				continue
			}
			switch {
			case r >= 0xDC00 && r <= 0xDFFF:
				return true
			case r >= 0xD800 && r <= 0xDBFF:
				lo, ok := u4(s[i+6:])
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return true
				}
				i += 6
			}
			i += 5
		}
		return false
	})
}

func nestingDepth(data []byte) int {
	depth, most := 0, 0
	inString := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			most = max(most, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return most
}

// tokenRule walks encoding/json's token stream for duplicate keys (compared
// after unescaping) and numbers that overflow a float64.
func tokenRule(data []byte) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	type level struct {
		object  bool
		wantKey bool
		keys    map[string]bool
	}
	var stack []*level
	valueDone := func() {
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].wantKey = true
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].wantKey {
			if k, ok := tok.(string); ok {
				if stack[n-1].keys[k] {
					return "duplicate key " + strconv.Quote(k)
				}
				stack[n-1].keys[k] = true
				stack[n-1].wantKey = false
				continue
			}
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				stack = append(stack, &level{object: true, wantKey: true, keys: map[string]bool{}})
			case '[':
				stack = append(stack, &level{})
			default:
				stack = stack[:len(stack)-1]
				valueDone()
			}
		case json.Number:
			if _, err := strconv.ParseFloat(string(v), 64); err != nil {
				return "number overflows float64"
			}
			valueDone()
		default:
			valueDone()
		}
	}
}

func FuzzEnvelope(f *testing.F) {
	for _, nf := range sampleFrames(f) {
		f.Add(nf.frame)
	}
	for _, c := range envelopeSeeds() {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		var d Decoder
		var env Envelope
		err := d.Decode(frame, &env)
		if err != nil {
			var pe *ProtocolError
			var be *BusError
			switch {
			case errors.As(err, &pe):
			case errors.As(err, &be):
				if be.Code != ErrInvalidEnvelope || be.Dispatch != NotDispatched {
					t.Fatalf("body-level refusal %v is not INVALID_ENVELOPE not-dispatched", be)
				}
			default:
				t.Fatalf("refusal %v (%T) is neither a *ProtocolError nor a *BusError", err, err)
			}
			return
		}
		s, ok := shapeOf(env.Op)
		if !ok {
			t.Fatalf("decoded op %v has no shape", env.Op)
		}
		body, ok := decodeAnyBody(&env, s)
		if !ok {
			return
		}
		again := AppendEnvelope(nil, env.Header(), body, env.Attachments)
		var d2 Decoder
		var env2 Envelope
		if err := d2.Decode(again, &env2); err != nil {
			t.Fatalf("re-encoded envelope does not decode: %v\n in: %q\nout: %q", err, frame, again)
		}
		if env2.Header() != env.Header() || env2.Major != Major || env2.Minor != Minor {
			t.Fatalf("header %+v %d.%d, want %+v 1.0", env2.Header(), env2.Major, env2.Minor, env.Header())
		}
		if len(env.Attachments)+len(env2.Attachments) > 0 && !reflect.DeepEqual(env2.Attachments, env.Attachments) {
			t.Fatalf("attachments\n got %+v\nwant %+v", env2.Attachments, env.Attachments)
		}
		body2, ok := decodeAnyBody(&env2, s)
		if !ok {
			t.Fatalf("re-encoded body does not decode\n in: %q\nout: %q", frame, again)
		}
		if !reflect.DeepEqual(body2, body) {
			t.Fatalf("body\n got %+v\nwant %+v", body2, body)
		}
	})
}

// decodeAnyBody decodes env's body as its shape says: replies through
// DecodeReply into a ReplyBody, everything else through DecodeBody.
func decodeAnyBody(env *Envelope, s Shape) (Body, bool) {
	if env.Kind == KindReply && s.Reply != nil {
		v := fresh(s.Reply)
		be, err := env.DecodeReply(v)
		if err != nil {
			return nil, false
		}
		if be != nil {
			return &ReplyBody{Err: be}, true
		}
		return &ReplyBody{Value: v}, true
	}
	b := fresh(s.Body)
	if err := env.DecodeBody(b); err != nil {
		return nil, false
	}
	return b, true
}

// envelopeSeeds are near misses around the envelope's rules, for the
// fuzzer to start from.
func envelopeSeeds() [][]byte {
	seeds := [][]byte{
		baseCmd.bytes(),
		baseCmd.with("extra", "1").bytes(),
		baseCmd.with("id", `"msg-01"`).bytes(),
		baseCmd.with("replyTo", `"msg-1"`).bytes(),
		baseCmd.with("kind", `"reply"`).with("id", `"bus-1"`).with("replyTo", `"msg-1"`).bytes(),
		baseCmd.with("op", `"nope"`).bytes(),
		baseCmd.with("body", `{"n\u0061me":"a\u002e.b"}`).bytes(),
		publishEnvelope(attachmentList(3, true)),
		publishEnvelope(attachmentList(2, false)),
		cmdEnvelope("topic.declare", `{"name":"t","retained":"none"}`).with("attachments", attachmentList(1, false)).bytes(),
	}
	for _, c := range memberValues() {
		good := membersOf(sampleBodies()[reflect.TypeOf(c.s.Body)].AppendJSON(nil))
		seeds = append(seeds, bodyFrame(c.s, good.with(c.key, c.value).String()))
	}
	return seeds
}
