package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// The scanner's refusal and acceptance tables. FuzzScanner seeds itself
// from both, so every case here is also a starting point for the fuzzer.

type scanCase struct {
	name string
	in   string
}

// scanGroup is a category of cases, each named group/case. For refusals,
// why is the message fragment each refusal must carry, so that a case
// cannot pass by tripping an unrelated rule first; it is "" where the
// rules that refuse the group's cases are too many to name one.
type scanGroup struct {
	name     string
	why      string
	inString []scanCase // string contents, each tried as a value and as a key
	cases    []scanCase // whole inputs
}

// inputs lists what g scans: each string content as a value ("…") and as a
// key ({"…":1}, case/InKey), then the whole inputs.
func (g scanGroup) inputs() []scanCase {
	var out []scanCase
	for _, c := range g.inString {
		out = append(out, scanCase{c.name, `"` + c.in + `"`}, scanCase{c.name + "/InKey", `{"` + c.in + `":1}`})
	}
	return append(out, g.cases...)
}

// flat lists the inputs of the groups, each named group/case.
func flat(groups ...[]scanGroup) []scanCase {
	var out []scanCase
	for _, g := range slices.Concat(groups...) {
		for _, c := range g.inputs() {
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

func nestedArrays(depth int) string {
	return strings.Repeat("[", depth) + strings.Repeat("]", depth)
}

func nestedObjects(depth int) string {
	return strings.Repeat(`{"a":`, depth-1) + "{}" + strings.Repeat("}", depth-1)
}

// nestedMixed alternates objects and arrays, innermost value 1.
func nestedMixed(depth int) string {
	var open, closing strings.Builder
	for i := range depth {
		if i%2 == 0 {
			open.WriteString(`{"k":`)
			closing.WriteString("}")
		} else {
			open.WriteString("[")
			closing.WriteString("]")
		}
	}
	c := closing.String()
	rev := []byte(c)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return open.String() + "1" + string(rev)
}

var scanRefusals = []scanGroup{
	{name: "Duplicate", why: "duplicate object key", cases: []scanCase{
		{"Depth1", `{"a":1,"a":2}`},
		{"Depth1NotAdjacent", `{"a":1,"b":2,"a":3}`},
		{"Depth2", `{"x":{"a":1,"a":2}}`},
		{"InArray", `[{"a":1,"a":2}]`},
		{"InNestedArray", `[1,[{"b":0,"a":1,"a":2}]]`},
		{"EmptyKey", `{"":1,"":2}`},
		{"EscapedSecond", `{"a":1,"\u0061":2}`},
		{"EscapedFirst", `{"\u0061":1,"a":2}`},
		{"EscapedBoth", `{"\u0061":1,"\u0061":2}`},
		{"EscapedUppercaseHex", `{"\u00e9":1,"\u00E9":2}`},
		{"EscapedVersusUTF8", `{"é":1,"\u00e9":2}`},
		{"EscapedSlash", `{"a/b":1,"a\/b":2}`},
		{"SurrogatePair", `{"😀":1,"\ud83d\ude00":2}`},
		{"Members16", objectWithMembers(16, 0, false)},
		{"Members16Escaped", objectWithMembers(16, 3, true)},
		{"Members17", objectWithMembers(17, 0, false)},
		{"Members17Escaped", objectWithMembers(17, 16-1, true)},
		{"Members100", objectWithMembers(100, 50, false)},
		{"Members100Escaped", objectWithMembers(100, 98, true)},
		{"HashPathNested", `{"x":` + objectWithMembers(40, 7, true) + `}`},
		{"HashPathInArray", `[` + objectWithMembers(20, 0, false) + `]`},
	}},
	{name: "UTF8", why: "invalid UTF-8", inString: []scanCase{
		{"BareContinuation", "\x80"},
		{"Overlong2", "\xc0\xaf"},
		{"Overlong3", "\xe0\x80\xaf"},
		{"Overlong4", "\xf0\x80\x80\xaf"},
		{"Truncated", "\xe2\x82"},
		{"Surrogate", "\xed\xa0\x80"},
		{"LowSurrogate", "\xed\xbf\xbf"},
		{"AboveMax", "\xf4\x90\x80\x80"},
		{"ByteF5", "\xf5\x80\x80\x80"},
		{"ByteFF", "\xff"},
	}, cases: []scanCase{
		{"TruncatedAtEnd", "\"\xe2\x82"},
	}},
	{name: "Surrogate", why: "surrogate", inString: []scanCase{
		{"LoneHigh", `\ud800`},
		{"LoneLow", `\udc00`},
		{"LoneLowMax", `\udfff`},
		{"HighThenChar", `\ud800x`},
		{"HighThenHigh", `\ud800\ud800`},
		{"HighThenBMP", `\ud800\u0041`},
		{"HighThenOtherEscape", `\ud800\n`},
		{"LowThenHigh", `\udc00\ud800`},
		{"HighThenShortEscape", `\ud83d\ude0`},
	}, cases: []scanCase{
		{"HighAtEnd", `"\ud83d`},
	}},
	{name: "Number", cases: []scanCase{
		{"NaN", `NaN`},
		{"NaNInArray", `[NaN]`},
		{"Infinity", `Infinity`},
		{"NegativeInfinity", `-Infinity`},
		{"LeadingZero", `01`},
		{"NegativeLeadingZero", `-01`},
		{"LeadingZeroFraction", `00.5`},
		{"DoubleZero", `00`},
		{"TrailingDot", `1.`},
		{"LeadingDot", `.5`},
		{"NegativeLeadingDot", `-.5`},
		{"DotExponent", `1.e5`},
		{"BareExponent", `1e`},
		{"SignedBareExponent", `1e+`},
		{"UppercaseBareExponent", `1E`},
		{"Plus", `+1`},
		{"MinusOnly", `-`},
		{"DoubleMinus", `--1`},
		{"Hex", `0x10`},
		{"Underscore", `1_000`},
		{"InArrayTrailingDot", `[1.]`},
	}},
	{name: "Number", why: "not finite", cases: []scanCase{
		{"Overflow", `1e400`},
		{"NegativeOverflow", `-1e400`},
		{"OverflowInObject", `{"a":1e309}`},
		{"JustAboveMaxFloat", `1.7976931348623159e308`},
		{"OverflowNoExponent", "1" + strings.Repeat("0", 309)},
		{"OverflowFraction", "-1" + strings.Repeat("0", 309) + ".5"},
	}},
	{name: "Trailing", why: "trailing bytes", cases: []scanCase{
		{"Word", `{} x`},
		{"SecondObject", `{}{}`},
		{"SecondNumber", `1 2`},
		{"Bracket", `[] ]`},
		{"NUL", "{}\x00"},
		{"Comma", `{},`},
	}},
	{name: "Depth", why: "nesting too deep", cases: []scanCase{
		{"Arrays129", nestedArrays(129)},
		{"Objects129", nestedObjects(129)},
		{"Mixed129", nestedMixed(129)},
		{"Arrays1000", nestedArrays(1000)},
	}},
	{name: "Control", why: "control character", inString: []scanCase{
		{"NUL", "a\x00b"},
		{"Unit", "\x1f"},
		{"Tab", "\t"},
		{"Newline", "\n"},
		{"CarriageReturn", "a\rb"},
	}},
	{name: "Escape", inString: []scanCase{
		{"X", `\x41`},
		{"BigU", `\U0041`},
		{"NotHex", `\u00G0`},
		{"Short", `\u12`},
		{"SingleQuote", `\'`},
		{"Bell", `\a`},
		{"Zero", `\0`},
		{"Space", `\ `},
	}, cases: []scanCase{
		{"ShortAtEnd", `"\u12`},
		{"Unterminated", `"\`},
	}},
	{name: "Unterminated", cases: []scanCase{
		{"String", `"abc`},
		{"Object", `{`},
		{"ObjectKey", `{"a"`},
		{"ObjectColon", `{"a":`},
		{"ObjectValue", `{"a":1`},
		{"ObjectComma", `{"a":1,`},
		{"Array", `[`},
		{"ArrayValue", `[1`},
		{"ArrayComma", `[1,`},
		{"Literal", `tru`},
		{"Nested", `{"a":[{"b":"c"`},
	}},
	{name: "Empty", cases: []scanCase{
		{"Nothing", ``},
		{"Whitespace", " \t\r\n"},
		{"FormFeed", "\f{}"},
		{"VerticalTab", "\v{}"},
		{"NBSP", "\u00a0{}"},
	}},
	{name: "BOM", cases: []scanCase{
		{"Object", "\xef\xbb\xbf{}"},
	}},
	{name: "Quotes", cases: []scanCase{
		{"SingleKey", `{'a':1}`},
		{"SingleString", `'a'`},
	}},
	{name: "Comment", cases: []scanCase{
		{"Line", "{} // c"},
		{"Block", `/* c */ {}`},
		{"Inside", `{"a":1 /*x*/}`},
	}},
	{name: "Comma", cases: []scanCase{
		{"TrailingArray", `[1,]`},
		{"TrailingObject", `{"a":1,}`},
		{"LeadingArray", `[,1]`},
		{"OnlyInObject", `{,}`},
		{"Double", `[1,,2]`},
	}},
	{name: "Syntax", cases: []scanCase{
		{"MissingColon", `{"a" 1}`},
		{"BareKey", `{a:1}`},
		{"NumberKey", `{1:1}`},
		{"MissingComma", `[1 2]`},
		{"MissingMemberComma", `{"a":1 "b":2}`},
		{"ColonInArray", `[1:2]`},
		{"MismatchedClose", `[}`},
		{"NonASCIIOutsideString", "[\x80]"},
	}},
	{name: "Literal", cases: []scanCase{
		{"Capital", `True`},
		{"Null", `NULL`},
		{"Short", `nul`},
		{"Undefined", `undefined`},
	}},
}

var scanAccepts = []scanGroup{
	{name: "Value", cases: []scanCase{
		{"EmptyObject", `{}`},
		{"EmptyArray", `[]`},
		{"EmptyString", `""`},
		{"Zero", `0`},
		{"NegativeZero", `-0`},
		{"Integer", `12345`},
		{"Fraction", `-12.25`},
		{"Exponent", `1E+2`},
		{"FractionExponent", `-12.25e-10`},
		{"ZeroExponent", `0e5`},
		{"True", `true`},
		{"False", `false`},
		{"Null", `null`},
		{"Everything", `{"o":{},"a":[1,"x",true,false,null,{"k":[]}],"n":-0.5e+10,"s":"t"}`},
	}},
	{name: "Whitespace", cases: []scanCase{
		{"Around", " \t\n\r{ \"a\" : [ 1 , 2 ] } \n"},
		{"EmptyContainers", "[ ] "},
	}},
	{name: "Escape", cases: []scanCase{
		{"All", `"\" \\ \/ \b \f \n \r \t \u0000 \u00e9 \u00E9 \uFFFF \u001f"`},
		{"InKey", `{"\n":1,"\u0000":2,"\\":3}`},
	}},
	{name: "UTF8", cases: []scanCase{
		{"TwoByte", `"é"`},
		{"ThreeByte", `"世界"`},
		{"FourByte", `"😀"`},
		{"ReplacementChar", "\"\xef\xbf\xbd\""},
		{"MaxCodePoint", "\"\xf4\x8f\xbf\xbf\""},
		{"LineSeparator", "\"\u2028\""},
		{"DEL", "\"\x7f\""},
		{"InKey", `{"ключ":"значение"}`},
	}},
	{name: "Surrogate", cases: []scanCase{
		{"Pair", `"\ud83d\ude00"`},
		{"PairUppercase", `"\uD83D\uDE00"`},
		{"PairMax", `"\udbff\udfff"`},
		{"PairMin", `"\ud800\udc00"`},
	}},
	{name: "Number", cases: []scanCase{
		{"Underflow", `1e-400`},
		{"NegativeUnderflow", `-1e-400`},
		{"ZeroHugeExponent", `0e999999`},
		{"MaxFloat", `1.7976931348623157e308`},
		{"NegativeMaxFloat", `-1.7976931348623157e308`},
		{"BigInteger", `123456789012345678901234567890`},
		{"LongInteger", "1" + strings.Repeat("0", 300)},
		{"LongFraction", "0." + strings.Repeat("1", 400)},
	}},
	{name: "Depth", cases: []scanCase{
		{"Arrays128", nestedArrays(128)},
		{"Objects128", nestedObjects(128)},
		{"Mixed128", nestedMixed(128)},
	}},
	{name: "Keys", cases: []scanCase{
		{"SameInSiblings", `[{"a":1},{"a":2}]`},
		{"SameAtDepths", `{"a":{"a":{"a":1}}}`},
		{"CaseDiffers", `{"a":1,"A":2}`},
		{"EscapeDiffers", `{"a":1,"\u0062":2}`},
		{"PrefixDiffers", `{"a":1,"ab":2,"abc":3}`},
		{"Members16", objectWithMembers(16, -1, false)},
		{"Members17", objectWithMembers(17, -1, true)},
		{"Members1000", objectWithMembers(1000, -1, false)},
		{"ReopenedAfterLarge", `{"a":` + objectWithMembers(20, -1, false) + `,"k0":1}`},
	}},
}

func TestScannerRefuses(t *testing.T) {
	var s Scanner // reused, as a decoder does
	for _, g := range scanRefusals {
		for _, c := range g.inputs() {
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
	for _, c := range flat(scanAccepts) {
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
	for _, c := range flat(scanRefusals) {
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
