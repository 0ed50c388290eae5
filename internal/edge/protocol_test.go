package edge

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// requestSeeds are the fuzz corpus's inline seeds: one of every op, and
// near misses of each rule.
var requestSeeds = []string{
	`{"op":"hello","version":1}`,
	`{"op":"hello","version":1,"token":"s3cret"}`,
	`{"op":"subscribe","topics":{}}`,
	`{"op":"subscribe","topics":{"cam.frames":["*"]},"router":true}`,
	`{"op":"subscribe","topics":{"cam.frames":["frame","meta"],"cam.audio":[]}}`,
	`{"op":"subscribe","topics":{"cam.frames":null}}`,
	`{"op":"time","t":1733280000000.5}`,
	` {"op":"time","t":-0} `,
	`{"op":"hello","version":2}`,
	`{"op":"hello"}`,
	`{"op":"hello","version":1,"topics":{}}`,
	`{"op":"subscribe"}`,
	`{"op":"subscribe","topics":{"Cam":["frame"]}}`,
	`{"op":"subscribe","topics":{"cam":["*","frame"]}}`,
	`{"op":"subscribe","topics":{"cam":["frame","frame"]}}`,
	`{"op":"subscribe","topics":{"cam":["Frame"]}}`,
	`{"op":"subscribe","topics":{"cam":"frame"}}`,
	`{"op":"time"}`,
	`{"op":"time","t":"now"}`,
	`{"op":"time","t":1e400}`,
	`{"op":"nope"}`,
	`{}`,
	`[]`,
	`null`,
	`{"op":"hello","op":"time","version":1}`,
	`{"op":"hello","version":1}{}`,
	"{\"op\":\"hello\",\"version\":1,\"token\":\"\xff\"}",
}

func TestDecodeRequest(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Request
		err  string
	}{
		{in: `{"op":"hello","version":1,"token":"t"}`, want: Request{Op: "hello", Version: 1, Token: "t"}},
		{in: `{"op":"subscribe","topics":{}}`, want: Request{Op: "subscribe", Topics: map[string][]string{}}},
		{in: `{"op":"subscribe","topics":{"a.b":["*"]},"router":false}`,
			want: Request{Op: "subscribe", Topics: map[string][]string{"a.b": {"*"}}, Router: new(bool)}},
		{in: `{"op":"time","t":5}`, want: Request{Op: "time", T: ptr(5.0)}},
		{in: `{"op":"hello","version":2}`, err: "version 1"},
		{in: `{"op":"hello","version":1,"t":1}`, err: "hello takes no t"},
		{in: `{"op":"subscribe"}`, err: `needs "topics"`},
		{in: `{"op":"subscribe","topics":{"cam":["*","x"]}}`, err: `"*" stands alone`},
		{in: `{"op":"subscribe","topics":{"cam":["x","x"]}}`, err: "named twice"},
		{in: `{"op":"subscribe","topics":{"Bad":[]}}`, err: "not a topic name"},
		{in: `{"op":"time"}`, err: `needs "t"`},
		{in: `{"op":"x"}`, err: "unknown op"},
		{in: `{"version":1}`, err: `needs "op"`},
		{in: `{"op":"hello","op":"hello","version":1}`, err: "duplicate"},
		{in: `{"op":"hello","version":1,"extra":true}`, err: "unknown field"},
		{in: `[1]`, err: "JSON object"},
		{in: `{"op":"hello","version":1} {}`, err: "not strict JSON"},
		{in: strings.Repeat(" ", MaxRequestBytes+1), err: "at most"},
	} {
		got, err := DecodeRequest([]byte(tc.in))
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.in, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want %q", tc.in, err, tc.err)
		case tc.err == "" && !reflect.DeepEqual(got, tc.want):
			t.Errorf("%s: %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// FuzzDecodeRequest feeds the decoder arbitrary browser messages: it must
// never panic, and what it accepts must be within the protocol's bounds
// and read back the same once encoded again.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		if err != nil {
			if _, ok := err.(*RequestError); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		if len(b) > MaxRequestBytes || len(r.Topics) > MaxTopicsPerRequest || len(r.Token) > MaxTokenBytes {
			t.Fatalf("accepted past a bound: %q", b)
		}
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := DecodeRequest(again)
		if err != nil {
			t.Fatalf("%q decoded, its encoding %s did not: %v", b, again, err)
		}
		// A null list and an empty one mean the same: no attachments.
		for k, v := range r.Topics {
			if v == nil {
				r.Topics[k] = []string{}
			}
		}
		for k, v := range r2.Topics {
			if v == nil {
				r2.Topics[k] = []string{}
			}
		}
		if !reflect.DeepEqual(r, r2) {
			t.Fatalf("%q: %+v, again %+v", b, r, r2)
		}
	})
}

// Headers lay out their attachments aligned, after the padded JSON, and
// ParsePublication reads back what encodeHeader wrote.
func TestHeaderLayout(t *testing.T) {
	for _, sizes := range [][]uint64{{}, {0}, {1}, {13, 1228800}, {7, 0, 9, 1 << 20}, {1 << 30, 3}} {
		h := PublicationHeader{Type: "publication", Topic: "cam.frames", Sequence: 12345678901, Incarnation: "top-3",
			Payload: json.RawMessage(`{"a":[1,2,3]}`)}
		included := make([]bool, len(sizes))
		var total uint64
		for i, sz := range sizes {
			h.Attachments = append(h.Attachments, Attachment{Name: "a" + string(rune('0'+i)), ContentType: "x/y", Size: sz})
			included[i] = i%2 == 0
			if included[i] {
				total += sz + Align
			}
		}
		head, err := encodeHeader(&h, included)
		if err != nil {
			t.Fatal(err)
		}
		if len(head)%Align != 0 {
			t.Fatalf("%v: head of %d bytes", sizes, len(head))
		}
		// The message as a browser gets it, zeros for the bytes.
		var end uint64 = uint64(len(head))
		for i, a := range h.Attachments {
			if included[i] {
				if a.Offset < end || a.Offset%Align != 0 {
					t.Fatalf("%v: attachment %d at %d after %d", sizes, i, a.Offset, end)
				}
				end = a.Offset + a.Size
			} else if a.Offset != 0 {
				t.Fatalf("%v: attachment %d not included has offset %d", sizes, i, a.Offset)
			}
		}
		if total > 64<<20 {
			continue // too big to build here; the layout is checked above
		}
		msg := append(bytes.Clone(head), make([]byte, end-uint64(len(head)))...)
		got, err := ParsePublication(msg)
		if err != nil {
			t.Fatalf("%v: %v", sizes, err)
		}
		if !reflect.DeepEqual(got, h) {
			t.Fatalf("%v: read %+v, wrote %+v", sizes, got, h)
		}
		if _, err := ParsePublication(msg[:len(msg)-1]); len(sizes) > 0 && sizes[len(sizes)-1] > 0 && included[len(sizes)-1] && err == nil {
			t.Fatalf("%v: a truncated message parsed", sizes)
		}
	}
}
