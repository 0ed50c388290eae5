package wiregen

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A body the generator cannot encode exactly is an error naming the field,
// not a guess: the tags must say what the contract label leaves out.
func TestGenerateRefusesUnderspecifiedFields(t *testing.T) {
	for _, c := range []struct{ field, want string }{
		{"IDs []uint64 `json:\"ids\" wire:\"[U64]\"`", `a list needs codec:"len=LO..HI"`},
		{"Why string `json:\"why\" wire:\"Text\"`", `a Text needs codec:"max=N"`},
		{"Who string `json:\"who\" wire:\"Person\"`", `string label "Person" has no check`},
		{"N uint64 `json:\"n\"`", "a uint64 is a U64 string"},
		{"N uint32 `json:\"n\" wire:\"int\"`", "a uint32 is an int with a range"},
		{"F float64 `json:\"f\"`", "no codec for float64"},
		{"M map[string]int `json:\"m\"`", "unsupported type"},
		{"A, B bool `json:\"a\"`", "one name and a json tag"},
	} {
		dir := t.TempDir()
		src := "package wire\n\ntype Body struct {\n\t" + c.field + "\n}\n"
		if err := os.WriteFile(filepath.Join(dir, "body.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Generate(dir)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.field, err, c.want)
		}
	}
}

// Structs without json tags are not bodies and get no codec.
func TestGenerateSkipsUntaggedStructs(t *testing.T) {
	dir := t.TempDir()
	src := "package wire\n\ntype Plain struct{ N int }\n\ntype Body struct {\n\tOn bool `json:\"on\"`\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "body.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := Generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	if !strings.HasPrefix(s, Header+"\n") || !strings.Contains(s, "func (x *Body) decodeJSON") || strings.Contains(s, "Plain") {
		t.Fatalf("unexpected output:\n%s", s)
	}
}
