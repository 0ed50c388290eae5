package wiregen

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// generate runs Generate on a package wire of one file holding src.
func generate(t *testing.T, src string) ([]byte, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "body.go"), []byte("package wire\n\n"+src), 0o644); err != nil {
		t.Fatal(err)
	}
	return Generate(dir)
}

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
		_, err := generate(t, "type Body struct {\n\t"+c.field+"\n}\n")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.field, err, c.want)
		}
	}
}

// Structs without json tags are not bodies and get no codec.
func TestGenerateSkipsUntaggedStructs(t *testing.T) {
	out, err := generate(t, "type Plain struct{ N int }\n\ntype Body struct {\n\tOn bool `json:\"on\"`\n}\n")
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	if !strings.HasPrefix(s, Header+"\n") || !strings.Contains(s, "func (x *Body) decodeJSON") || strings.Contains(s, "Plain") {
		t.Fatalf("unexpected output:\n%s", s)
	}
}

// An embedded struct's members are the body's own, in its place, as
// encoding/json flattens them; a struct only ever embedded gets no codec,
// and one embedded under a json name is a nested member.
func TestGenerateFlattensEmbeddedStructs(t *testing.T) {
	out, err := generate(t, "type Pair struct {\n\tA bool `json:\"a\"`\n\tB bool `json:\"b\"`\n}\n\n"+
		"type Inner struct {\n\tC bool `json:\"c\"`\n}\n\n"+
		"type Body struct {\n\tFirst bool `json:\"first\"`\n\tPair\n\tLast bool `json:\"last\"`\n}\n\n"+
		"type Only struct {\n\tPair\n}\n\n"+
		"type Named struct {\n\tInner `json:\"inner\"`\n}\n")
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{
		`return f.require("first", "a", "b", "last")`,
		"b = append(b, `{\"first\":`...)",
		"b = append(b, `,\"a\":`...)",
		"b = append(b, `,\"last\":`...)",
		`return f.require("a", "b")`, // Only
		"func (x *Inner) decodeJSON", // nested under a name: a body of its own
		"err = x.Inner.decodeJSON(d, f.val, d.path(ctx, \".inner\"))",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %s", want)
		}
	}
	if strings.Contains(s, "func (x *Pair)") {
		t.Error("a struct that is only embedded got a codec")
	}
}

// Embedding that encoding/json would resolve by its precedence rules, or
// that the generator cannot flatten, is refused by name.
func TestGenerateRefusesUnflattenableEmbedding(t *testing.T) {
	pair := "type Pair struct {\n\tA bool `json:\"a\"`\n}\n\n"
	for _, c := range []struct{ src, want string }{
		{pair + "type Body struct {\n\tPair\n\tA2 bool `json:\"a\"`\n}\n", `Body: two members named "a"`},
		{"type Body struct {\n\tOn bool `json:\"on\"`\n\tstrings.Builder\n}\n", "an embedded field must be a struct type of package wire"},
		{pair + "type Body struct {\n\tOn bool `json:\"on\"`\n\t*Pair\n}\n", "an embedded field must be a struct type of package wire"},
		{"type N uint64\n\ntype Body struct {\n\tOn bool `json:\"on\"`\n\tN\n}\n", "an embedded field must be a struct type of package wire"},
	} {
		_, err := generate(t, c.src)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.src, err, c.want)
		}
	}
}

// An optional member (",omitempty") may be absent: it is counted apart
// from the required ones, reset before each decode, and written only when
// set. Only an Opt or a list may be optional, and never first.
func TestGenerateOptionalMembers(t *testing.T) {
	out, err := generate(t, "type Opt[T any] struct {\n\tValid bool\n\tV T\n}\n\n"+
		"type Body struct {\n\tOn bool `json:\"on\"`\n\tMaybe Opt[bool] `json:\"maybe,omitempty\"`\n"+
		"\tNames []string `json:\"names,omitempty\" wire:\"[Id 0..4]\" codec:\"len=0..4\"`\n}\n")
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{
		"x.Maybe = Opt[bool]{}\n",
		"x.Names = x.Names[:0]\n",
		`return f.requireOpt(opt, "on")`,
		"if x.Maybe.Valid {",
		"if len(x.Names) > 0 {",
		"b = append(b, `,\"maybe\":`...)",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %s\n%s", want, s)
		}
	}
	for _, c := range []struct{ src, want string }{
		{"type Body struct {\n\tOn bool `json:\"on\"`\n\tN bool `json:\"n,omitempty\"`\n}\n", "only an Opt or a list may be optional"},
		{"type Body struct {\n\tN []string `json:\"n,omitempty\" wire:\"[Id 0..4]\" codec:\"len=0..4\"`\n\tOn bool `json:\"on\"`\n}\n", "the first member may not be optional"},
		{"type Body struct {\n\tOn bool `json:\"on,string\"`\n}\n", "want a plain json member name"},
	} {
		_, err := generate(t, c.src)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.src, err, c.want)
		}
	}
}
