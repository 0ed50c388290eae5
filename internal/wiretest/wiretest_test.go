package wiretest

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/flybus/flybus/wire"
)

func frame(t *testing.T, b []byte, id uint64, op wire.Op, body wire.Body) []byte {
	t.Helper()
	b, err := wire.AppendFrame(b, wire.Header{ID: id, Kind: wire.KindCommand, Op: op}, body, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Every frame comes with its envelope and decode error, in order; the
// reader says how the stream ended.
func TestEnvelopes(t *testing.T) {
	stream := frame(t, nil, 1, wire.OpTopicDeclare, &wire.Declare{Name: "a", Retained: wire.RetainNone})
	first := len(stream)
	stream = frame(t, stream, 2, wire.OpTopicDeclare, &wire.Declare{Name: "b", Retained: wire.RetainNone})
	// A frame whose envelope the strict decoder refuses: not JSON.
	stream = append(stream, 1, 0, 0, 0, '{')

	for _, tc := range []struct {
		name   string
		stream []byte
		ids    []uint64
		bad    int // frames that failed to decode
		end    error
	}{
		{"Whole", stream, []uint64{1, 2, 0}, 1, io.EOF},
		{"Truncated", stream[:first+3], []uint64{1}, 0, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(bytes.NewReader(tc.stream))
			var ids []uint64
			bad := 0
			for env, err := range r.Envelopes() {
				if err != nil {
					bad++
					ids = append(ids, 0)
					continue
				}
				if len(r.Frame) == 0 {
					t.Fatal("no frame with the envelope")
				}
				ids = append(ids, env.ID)
			}
			if !slices.Equal(ids, tc.ids) || bad != tc.bad {
				t.Fatalf("ids %v (%d bad), want %v (%d bad)", ids, bad, tc.ids, tc.bad)
			}
			if !errors.Is(r.Err, tc.end) {
				t.Fatalf("ended with %v, want %v", r.Err, tc.end)
			}
		})
	}
}
