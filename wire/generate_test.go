package wire

import (
	"bytes"
	"os"
	"testing"

	"github.com/flybus/flybus/internal/wiregen"
)

// The body codecs are generated from the struct tags: a body type changed
// without regenerating fails here, not on the wire.
func TestCodecsAreGenerated(t *testing.T) {
	want, err := wiregen.Generate(".")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(wiregen.Output)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not what wiregen writes from the body types: run go generate ./wire/", wiregen.Output)
	}
}
