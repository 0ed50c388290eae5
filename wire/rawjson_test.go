package wire_test

import (
	"encoding/json"
	"testing"

	gojson "github.com/goccy/go-json"

	"github.com/flybus/flybus/wire"
)

// A RawJSON inside a value must encode as the JSON it holds with both
// encoders the SDK meets, and decode back to the same bytes.
func TestRawJSONNestedInAValue(t *testing.T) {
	encoders := map[string]struct {
		marshal   func(any) ([]byte, error)
		unmarshal func([]byte, any) error
	}{
		"encoding/json": {json.Marshal, json.Unmarshal},
		"goccy":         {gojson.Marshal, gojson.Unmarshal},
	}
	for name, enc := range encoders {
		t.Run(name, func(t *testing.T) {
			got, err := enc.marshal(map[string]any{"got": wire.RawJSON(`{"x":[1,2]}`)})
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != `{"got":{"x":[1,2]}}` {
				t.Fatalf("encoded %s", got)
			}
			type outcome struct {
				Got  wire.RawJSON `json:"got"`
				None wire.RawJSON `json:"none"`
			}
			b, err := enc.marshal(outcome{Got: wire.RawJSON(`{"a":"b"}`)})
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != `{"got":{"a":"b"},"none":null}` {
				t.Fatalf("encoded %s", b)
			}
			var back outcome
			if err := enc.unmarshal([]byte(`{"got":{"a" : "b"},"none":null}`), &back); err != nil {
				t.Fatal(err)
			}
			if string(back.Got) != `{"a" : "b"}` {
				t.Fatalf("decoded %q", back.Got)
			}
		})
	}
}
