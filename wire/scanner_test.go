package wire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The scanner's refusal and acceptance tables live in testdata/scanner as
// JSON, so that the Node client's tests (js/test) check its own scanner
// against the very same inputs. FuzzScanner seeds itself from both, so every
// case there is also a starting point for the fuzzer.

type scanCase struct {
	name string
	in   string
}

// scanGroup is a category of cases, each named group/case. For refusals,
// why is the message fragment each refusal must carry, so that a case
// cannot pass by tripping an unrelated rule first; it is "" where the
// rules that refuse the group's cases are too many to name one.
type scanGroup struct {
	name  string
	why   string
	cases []scanCase
}

// scanCaseFile is the form of testdata/scanner/*.json: each case's input
// is its text ("in"), or its bytes in hex where they are not valid UTF-8.
type scanCaseFile struct {
	Comment string `json:"comment"`
	Groups  []struct {
		Name  string `json:"name"`
		Why   string `json:"why"`
		Cases []struct {
			Name string  `json:"name"`
			In   *string `json:"in"`
			Hex  *string `json:"hex"`
		} `json:"cases"`
	} `json:"groups"`
}

// loadScanGroups reads testdata/scanner/<name>.json.
func loadScanGroups(tb testing.TB, name string) []scanGroup {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "scanner", name+".json"))
	if err != nil {
		tb.Fatal(err)
	}
	var f scanCaseFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		tb.Fatalf("%s.json: %v", name, err)
	}
	var out []scanGroup
	for _, g := range f.Groups {
		sg := scanGroup{name: g.Name, why: g.Why}
		for _, c := range g.Cases {
			var in string
			switch {
			case c.In != nil && c.Hex == nil:
				in = *c.In
			case c.Hex != nil && c.In == nil:
				b, err := hex.DecodeString(*c.Hex)
				if err != nil {
					tb.Fatalf("%s.json: %s/%s: %v", name, g.Name, c.Name, err)
				}
				in = string(b)
			default:
				tb.Fatalf("%s.json: %s/%s needs exactly one of in and hex", name, g.Name, c.Name)
			}
			sg.cases = append(sg.cases, scanCase{c.Name, in})
		}
		if len(sg.cases) == 0 {
			tb.Fatalf("%s.json: group %s has no cases", name, g.Name)
		}
		out = append(out, sg)
	}
	if len(out) == 0 {
		tb.Fatalf("%s.json: no groups", name)
	}
	return out
}

func scanRefusals(tb testing.TB) []scanGroup { return loadScanGroups(tb, "refusals") }
func scanAccepts(tb testing.TB) []scanGroup  { return loadScanGroups(tb, "accepts") }

// flat lists the cases of the groups, each named group/case.
func flat(groups ...[]scanGroup) []scanCase {
	var out []scanCase
	for _, g := range slices.Concat(groups...) {
		for _, c := range g.cases {
			out = append(out, scanCase{g.name + "/" + c.name, c.in})
		}
	}
	return out
}

// objectWithMembers renders {"k0":0,...} with n members; dupOf >= 0 makes
// the last key repeat key dupOf, spelled with escapes when escaped is set.
func objectWithMembers(n, dupOf int, escaped bool) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		key := fmt.Sprintf("k%d", i)
		if i == n-1 && dupOf >= 0 {
			key = fmt.Sprintf("k%d", dupOf)
		}
		if i == n-1 && escaped {
			key = `\u006b` + key[1:] // \u006b is "k"
		}
		fmt.Fprintf(&b, "%q:%d", key, i)
	}
	b.WriteByte('}')
	// %q escapes the backslash of \u006b; undo that so it stays an escape.
	return strings.ReplaceAll(b.String(), `\\u006b`, `\u006b`)
}

func TestScannerRefuses(t *testing.T) {
	var s Scanner // reused, as a decoder does
	for _, g := range scanRefusals(t) {
		for _, c := range g.cases {
			t.Run(g.name+"/"+c.name, func(t *testing.T) {
				err := s.Scan([]byte(c.in))
				var se *SyntaxError
				if !errors.As(err, &se) {
					t.Fatalf("%.80q: got %v, want a *SyntaxError", c.in, err)
				}
				if !strings.Contains(se.Msg, g.why) {
					t.Errorf("refused for %q, want %q", se.Msg, g.why)
				}
				if se.Offset < 0 || se.Offset > len(c.in) {
					t.Errorf("offset %d outside the %d-byte input", se.Offset, len(c.in))
				}
				if Valid([]byte(c.in)) == nil {
					t.Error("Valid disagrees with Scan")
				}
			})
		}
	}
}

func TestScannerAccepts(t *testing.T) {
	var s Scanner
	for _, c := range flat(scanAccepts(t)) {
		t.Run(c.name, func(t *testing.T) {
			if err := s.Scan([]byte(c.in)); err != nil {
				t.Fatalf("%.80q: %v", c.in, err)
			}
			// Acceptance must be a subset of encoding/json's.
			if !json.Valid([]byte(c.in)) {
				t.Errorf("encoding/json refuses %.80q", c.in)
			}
		})
	}
}

// A refusal must not leave state behind that changes the next scan.
func TestScannerReuseAfterRefusal(t *testing.T) {
	var s Scanner
	for _, c := range flat(scanRefusals(t)) {
		_ = s.Scan([]byte(c.in))
		if err := s.Scan([]byte(`{"k0":{"a":1},"k1":[1,2]}`)); err != nil {
			t.Fatalf("after %s: %v", c.name, err)
		}
		if len(s.keys) != 0 || len(s.arena) != 0 {
			t.Fatalf("after %s: %d keys and %d arena bytes left open", c.name, len(s.keys), len(s.arena))
		}
	}
}

func TestScannerTape(t *testing.T) {
	var s Scanner
	doc := `{"a":[1,"x\n"],"b":null}`
	if err := s.Scan([]byte(doc)); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		kind  Kind
		text  string // raw bytes of the token (strings without quotes)
		next  uint32
		count uint32
		esc   bool
	}{
		{KindObject, doc, 7, 2, false},
		{KindString, "a", 2, 0, false},
		{KindArray, `[1,"x\n"]`, 5, 2, false},
		{KindNumber, "1", 4, 0, false},
		{KindString, `x\n`, 5, 0, true},
		{KindString, "b", 6, 0, false},
		{KindNull, "null", 7, 0, false},
	}
	if len(s.toks) != len(want) {
		t.Fatalf("%d tokens, want %d", len(s.toks), len(want))
	}
	for i, w := range want {
		tk := s.toks[i]
		if tk.kind != w.kind || doc[tk.start:tk.end] != w.text || tk.next != w.next || tk.count != w.count || tk.esc != w.esc {
			t.Errorf("token %d: %+v %q, want %+v", i, tk, doc[tk.start:tk.end], w)
		}
	}
}

// Once warm, scanning allocates nothing, including the escaped-key arena
// and the hash table of a large object.
func TestScannerWarmDoesNotAllocate(t *testing.T) {
	var s Scanner
	doc := []byte(`{"x":` + objectWithMembers(40, -1, true) + `,"n":[1e5,-0.5,"\u00e9"]}`)
	if err := s.Scan(doc); err != nil {
		t.Fatal(err)
	}
	if a := testing.AllocsPerRun(50, func() { _ = s.Scan(doc) }); a != 0 {
		t.Errorf("%v allocations per warm scan", a)
	}
}
