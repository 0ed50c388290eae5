package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// The scanner's refusal and acceptance tables. FuzzScanner seeds itself
// from both, so every case here is also a starting point for the fuzzer.

type scanCase struct {
	name string
	in   string
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

var scanRefusals = []scanCase{
	{"Duplicate/Depth1", `{"a":1,"a":2}`},
	{"Duplicate/Depth1NotAdjacent", `{"a":1,"b":2,"a":3}`},
	{"Duplicate/Depth2", `{"x":{"a":1,"a":2}}`},
	{"Duplicate/InArray", `[{"a":1,"a":2}]`},
	{"Duplicate/InNestedArray", `[1,[{"b":0,"a":1,"a":2}]]`},
	{"Duplicate/EmptyKey", `{"":1,"":2}`},
	{"Duplicate/EscapedSecond", `{"a":1,"\u0061":2}`},
	{"Duplicate/EscapedFirst", `{"\u0061":1,"a":2}`},
	{"Duplicate/EscapedBoth", `{"\u0061":1,"\u0061":2}`},
	{"Duplicate/EscapedUppercaseHex", `{"\u00e9":1,"\u00E9":2}`},
	{"Duplicate/EscapedVersusUTF8", `{"é":1,"\u00e9":2}`},
	{"Duplicate/EscapedSlash", `{"a/b":1,"a\/b":2}`},
	{"Duplicate/SurrogatePair", `{"😀":1,"\ud83d\ude00":2}`},
	{"Duplicate/Members16", objectWithMembers(16, 0, false)},
	{"Duplicate/Members16Escaped", objectWithMembers(16, 3, true)},
	{"Duplicate/Members17", objectWithMembers(17, 0, false)},
	{"Duplicate/Members17Escaped", objectWithMembers(17, 16-1, true)},
	{"Duplicate/Members100", objectWithMembers(100, 50, false)},
	{"Duplicate/Members100Escaped", objectWithMembers(100, 98, true)},
	{"Duplicate/HashPathNested", `{"x":` + objectWithMembers(40, 7, true) + `}`},
	{"Duplicate/HashPathInArray", `[` + objectWithMembers(20, 0, false) + `]`},

	{"UTF8/BareContinuation", "\"\x80\""},
	{"UTF8/Overlong2", "\"\xc0\xaf\""},
	{"UTF8/Overlong3", "\"\xe0\x80\xaf\""},
	{"UTF8/Overlong4", "\"\xf0\x80\x80\xaf\""},
	{"UTF8/Truncated", "\"\xe2\x82\""},
	{"UTF8/TruncatedAtEnd", "\"\xe2\x82"},
	{"UTF8/Surrogate", "\"\xed\xa0\x80\""},
	{"UTF8/LowSurrogate", "\"\xed\xbf\xbf\""},
	{"UTF8/AboveMax", "\"\xf4\x90\x80\x80\""},
	{"UTF8/ByteF5", "\"\xf5\x80\x80\x80\""},
	{"UTF8/ByteFF", "\"\xff\""},
	{"UTF8/InKey", "{\"\x80\":1}"},

	{"Surrogate/LoneHigh", `"\ud800"`},
	{"Surrogate/LoneLow", `"\udc00"`},
	{"Surrogate/LoneLowMax", `"\udfff"`},
	{"Surrogate/HighThenChar", `"\ud800x"`},
	{"Surrogate/HighThenHigh", `"\ud800\ud800"`},
	{"Surrogate/HighThenBMP", `"\ud800\u0041"`},
	{"Surrogate/HighThenOtherEscape", `"\ud800\n"`},
	{"Surrogate/LowThenHigh", `"\udc00\ud800"`},
	{"Surrogate/HighAtEnd", `"\ud83d`},
	{"Surrogate/HighThenShortEscape", `"\ud83d\ude0"`},
	{"Surrogate/InKey", `{"\udfff":1}`},

	{"Number/NaN", `NaN`},
	{"Number/NaNInArray", `[NaN]`},
	{"Number/Infinity", `Infinity`},
	{"Number/NegativeInfinity", `-Infinity`},
	{"Number/Overflow", `1e400`},
	{"Number/NegativeOverflow", `-1e400`},
	{"Number/OverflowInObject", `{"a":1e309}`},
	{"Number/JustAboveMaxFloat", `1.7976931348623159e308`},
	{"Number/OverflowNoExponent", "1" + strings.Repeat("0", 309)},
	{"Number/OverflowFraction", "-1" + strings.Repeat("0", 309) + ".5"},
	{"Number/LeadingZero", `01`},
	{"Number/NegativeLeadingZero", `-01`},
	{"Number/LeadingZeroFraction", `00.5`},
	{"Number/DoubleZero", `00`},
	{"Number/TrailingDot", `1.`},
	{"Number/LeadingDot", `.5`},
	{"Number/NegativeLeadingDot", `-.5`},
	{"Number/DotExponent", `1.e5`},
	{"Number/BareExponent", `1e`},
	{"Number/SignedBareExponent", `1e+`},
	{"Number/UppercaseBareExponent", `1E`},
	{"Number/Plus", `+1`},
	{"Number/MinusOnly", `-`},
	{"Number/DoubleMinus", `--1`},
	{"Number/Hex", `0x10`},
	{"Number/Underscore", `1_000`},
	{"Number/InArrayTrailingDot", `[1.]`},

	{"Trailing/Word", `{} x`},
	{"Trailing/SecondObject", `{}{}`},
	{"Trailing/SecondNumber", `1 2`},
	{"Trailing/Bracket", `[] ]`},
	{"Trailing/NUL", "{}\x00"},
	{"Trailing/Comma", `{},`},

	{"Depth/Arrays129", nestedArrays(129)},
	{"Depth/Objects129", nestedObjects(129)},
	{"Depth/Mixed129", nestedMixed(129)},
	{"Depth/Arrays1000", nestedArrays(1000)},

	{"Control/NUL", "\"a\x00b\""},
	{"Control/Unit", "\"\x1f\""},
	{"Control/Tab", "\"\t\""},
	{"Control/Newline", "\"\n\""},
	{"Control/InKey", "{\"a\rb\":1}"},

	{"Escape/X", `"\x41"`},
	{"Escape/BigU", `"\U0041"`},
	{"Escape/NotHex", `"\u00G0"`},
	{"Escape/Short", `"\u12"`},
	{"Escape/ShortAtEnd", `"\u12`},
	{"Escape/SingleQuote", `"\'"`},
	{"Escape/Bell", `"\a"`},
	{"Escape/Zero", `"\0"`},
	{"Escape/Unterminated", `"\`},
	{"Escape/Space", `"\ "`},

	{"Unterminated/String", `"abc`},
	{"Unterminated/Object", `{`},
	{"Unterminated/ObjectKey", `{"a"`},
	{"Unterminated/ObjectColon", `{"a":`},
	{"Unterminated/ObjectValue", `{"a":1`},
	{"Unterminated/ObjectComma", `{"a":1,`},
	{"Unterminated/Array", `[`},
	{"Unterminated/ArrayValue", `[1`},
	{"Unterminated/ArrayComma", `[1,`},
	{"Unterminated/Literal", `tru`},
	{"Unterminated/Nested", `{"a":[{"b":"c"`},

	{"Empty/Nothing", ``},
	{"Empty/Whitespace", " \t\r\n"},
	{"Empty/FormFeed", "\f{}"},
	{"Empty/VerticalTab", "\v{}"},
	{"Empty/NBSP", "\u00a0{}"},
	{"BOM/Object", "\xef\xbb\xbf{}"},
	{"Quotes/SingleKey", `{'a':1}`},
	{"Quotes/SingleString", `'a'`},
	{"Comment/Line", "{} // c"},
	{"Comment/Block", `/* c */ {}`},
	{"Comment/Inside", `{"a":1 /*x*/}`},
	{"Comma/TrailingArray", `[1,]`},
	{"Comma/TrailingObject", `{"a":1,}`},
	{"Comma/LeadingArray", `[,1]`},
	{"Comma/OnlyInObject", `{,}`},
	{"Comma/Double", `[1,,2]`},
	{"Syntax/MissingColon", `{"a" 1}`},
	{"Syntax/BareKey", `{a:1}`},
	{"Syntax/NumberKey", `{1:1}`},
	{"Syntax/MissingComma", `[1 2]`},
	{"Syntax/MissingMemberComma", `{"a":1 "b":2}`},
	{"Syntax/ColonInArray", `[1:2]`},
	{"Syntax/MismatchedClose", `[}`},
	{"Syntax/NonASCIIOutsideString", "[\x80]"},
	{"Literal/Capital", `True`},
	{"Literal/Null", `NULL`},
	{"Literal/Short", `nul`},
	{"Literal/Undefined", `undefined`},
}

var scanAccepts = []scanCase{
	{"Value/EmptyObject", `{}`},
	{"Value/EmptyArray", `[]`},
	{"Value/EmptyString", `""`},
	{"Value/Zero", `0`},
	{"Value/NegativeZero", `-0`},
	{"Value/Integer", `12345`},
	{"Value/Fraction", `-12.25`},
	{"Value/Exponent", `1E+2`},
	{"Value/FractionExponent", `-12.25e-10`},
	{"Value/ZeroExponent", `0e5`},
	{"Value/True", `true`},
	{"Value/False", `false`},
	{"Value/Null", `null`},
	{"Value/Everything", `{"o":{},"a":[1,"x",true,false,null,{"k":[]}],"n":-0.5e+10,"s":"t"}`},
	{"Whitespace/Around", " \t\n\r{ \"a\" : [ 1 , 2 ] } \n"},
	{"Whitespace/EmptyContainers", "[ ] "},
	{"Escape/All", `"\" \\ \/ \b \f \n \r \t \u0000 \u00e9 \u00E9 \uFFFF \u001f"`},
	{"Escape/InKey", `{"\n":1,"\u0000":2,"\\":3}`},
	{"UTF8/TwoByte", `"é"`},
	{"UTF8/ThreeByte", `"世界"`},
	{"UTF8/FourByte", `"😀"`},
	{"UTF8/ReplacementChar", "\"\xef\xbf\xbd\""},
	{"UTF8/MaxCodePoint", "\"\xf4\x8f\xbf\xbf\""},
	{"UTF8/LineSeparator", "\"\u2028\""},
	{"UTF8/DEL", "\"\x7f\""},
	{"UTF8/InKey", `{"ключ":"значение"}`},
	{"Surrogate/Pair", `"\ud83d\ude00"`},
	{"Surrogate/PairUppercase", `"\uD83D\uDE00"`},
	{"Surrogate/PairMax", `"\udbff\udfff"`},
	{"Surrogate/PairMin", `"\ud800\udc00"`},
	{"Number/Underflow", `1e-400`},
	{"Number/NegativeUnderflow", `-1e-400`},
	{"Number/ZeroHugeExponent", `0e999999`},
	{"Number/MaxFloat", `1.7976931348623157e308`},
	{"Number/NegativeMaxFloat", `-1.7976931348623157e308`},
	{"Number/BigInteger", `123456789012345678901234567890`},
	{"Number/LongInteger", "1" + strings.Repeat("0", 300)},
	{"Number/LongFraction", "0." + strings.Repeat("1", 400)},
	{"Depth/Arrays128", nestedArrays(128)},
	{"Depth/Objects128", nestedObjects(128)},
	{"Depth/Mixed128", nestedMixed(128)},
	{"Keys/SameInSiblings", `[{"a":1},{"a":2}]`},
	{"Keys/SameAtDepths", `{"a":{"a":{"a":1}}}`},
	{"Keys/CaseDiffers", `{"a":1,"A":2}`},
	{"Keys/EscapeDiffers", `{"a":1,"\u0062":2}`},
	{"Keys/PrefixDiffers", `{"a":1,"ab":2,"abc":3}`},
	{"Keys/Members16", objectWithMembers(16, -1, false)},
	{"Keys/Members17", objectWithMembers(17, -1, true)},
	{"Keys/Members1000", objectWithMembers(1000, -1, false)},
	{"Keys/ReopenedAfterLarge", `{"a":` + objectWithMembers(20, -1, false) + `,"k0":1}`},
}

// refusalReason is the message fragment each category of refusal must
// carry, so a case cannot pass by tripping an unrelated rule first.
func refusalReason(name string) string {
	switch {
	case strings.HasPrefix(name, "Duplicate/"):
		return "duplicate object key"
	case strings.HasPrefix(name, "UTF8/"):
		return "invalid UTF-8"
	case strings.HasPrefix(name, "Surrogate/"):
		return "surrogate"
	case strings.HasPrefix(name, "Depth/"):
		return "nesting too deep"
	case strings.HasPrefix(name, "Control/"):
		return "control character"
	case strings.HasPrefix(name, "Trailing/"):
		return "trailing bytes"
	case strings.HasPrefix(name, "Number/") && strings.Contains(name, "Overflow"), name == "Number/JustAboveMaxFloat":
		return "not finite"
	}
	return ""
}

func TestScannerRefuses(t *testing.T) {
	var s Scanner // reused, as a decoder does
	for _, c := range scanRefusals {
		t.Run(c.name, func(t *testing.T) {
			err := s.Scan([]byte(c.in))
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("%.80q: got %v, want a *SyntaxError", c.in, err)
			}
			if why := refusalReason(c.name); !strings.Contains(se.Msg, why) {
				t.Errorf("refused for %q, want %q", se.Msg, why)
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

func TestScannerAccepts(t *testing.T) {
	var s Scanner
	for _, c := range scanAccepts {
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
	for _, c := range scanRefusals {
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
