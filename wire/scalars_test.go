package wire

import (
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Scalar encodings of docs/protocol.md's Scalars and identifiers: every check
// gets accept and refuse cases at each boundary (length, alphabet,
// canonical form).

// namedInput is an input and the name of its case.
type namedInput struct{ name, in string }

// stringCheck is the check of a string label with the inputs it must
// accept and refuse. Each check bounds its length: it accepts longest, and
// refuses the empty input and longest with one more byte. The string form,
// where there is one, must agree with the []byte form throughout.
type stringCheck struct {
	bytes   func([]byte) bool
	str     func(string) bool // nil where there is none
	longest string
	accept  []namedInput
	refuse  []namedInput
}

// stringChecks are the string labels' checks, by the name of each.
var stringChecks = map[string]stringCheck{
	"ValidID": {
		bytes: ValidIDBytes, str: ValidID, longest: "a" + strings.Repeat("z", 63),
		accept: []namedInput{
			{"OneLetter", "a"},
			{"OneDigit", "0"},
			{"AllPunctuation", "a-b_c.d"},
			{"DoubleDotInside", "a..b"},
			{"TrailingPunctuation", "a."},
			{"Serial", "msg-7"},
		},
		refuse: []namedInput{
			{"LeadingDash", "-a"},
			{"LeadingDot", ".a"},
			{"LeadingUnderscore", "_a"},
			{"Uppercase", "aB"},
			{"UppercaseSerial", "MSG-7"},
			{"Space", "a b"},
			{"Slash", "a/b"},
			{"Colon", "a:b"},
			{"NonASCII", "é"},
			{"NUL", "a\x00"},
		},
	},
	"ValidName": {
		bytes: ValidNameBytes, str: ValidName, longest: strings.Repeat("a", 192),
		accept: []namedInput{
			{"OneLetter", "a"},
			{"TwoSegments", "a.b"},
			{"Dotted", "world.demo.frame"},
			{"Punctuation", "a-b_c"},
			{"PunctuationSegment", "a._.b"},
			{"LeadingDash", "-a"},
			{"Digits", "0.1"},
			{"MaxLengthDotted", strings.Repeat("ab.", 63) + "abc"},
		},
		refuse: []namedInput{
			{"LeadingDot", ".a"},
			{"TrailingDot", "a."},
			{"DoubleDot", "a..b"},
			{"OnlyDot", "."},
			{"OnlyDots", ".."},
			{"Uppercase", "World"},
			{"Slash", "a/b"},
			{"Space", "a b"},
			{"Wildcard", "a.*"},
			{"NonASCII", "é"},
		},
	},
	"ValidMethod": {
		bytes: ValidMethodBytes, str: ValidMethod, longest: strings.Repeat("M", 128),
		accept: []namedInput{
			{"OneChar", "a"},
			{"OneCapital", "M"},
			{"Typical", "Counter.Increment"},
			{"Space", " "},
			{"Tilde", "~"},
			{"QuoteAndBackslash", `Say "hi" \ now`},
		},
		refuse: []namedInput{
			{"Tab", "a\tb"},
			{"Newline", "a\n"},
			{"NUL", "\x00"},
			{"DEL", "a\x7f"},
			{"NonASCII", "Zähler"},
		},
	},
	"ValidContentType": {
		bytes: ValidContentTypeBytes, str: ValidContentType, longest: strings.Repeat("c", 127),
		accept: []namedInput{
			{"Typical", "image/x-rgba"},
			{"Short", "a/b"},
			{"Parameters", `text/plain; charset="utf-8"`},
			{"OneChar", "x"},
		},
		refuse: []namedInput{
			{"Newline", "text/plain\n"},
			{"DEL", "text\x7f"},
			{"NonASCII", "text/plain; charset=é"},
		},
	},
	"ValidRelPath": {
		bytes: ValidRelPathBytes, longest: strings.Repeat("p", 255),
		accept: []namedInput{
			{"OneComponent", "a"},
			{"Nested", "staging/a-41.3"},
			{"MixedCase", "A/B_c-d.e"},
			{"DotPrefixedName", "a/.b"},
			{"ThreeDots", "a/..."},
			{"DotDotPrefix", "..a/b"},
		},
		refuse: []namedInput{
			{"Absolute", "/a"},
			{"TrailingSlash", "a/"},
			{"EmptyComponent", "a//b"},
			{"Dot", "."},
			{"DotDot", ".."},
			{"DotComponent", "a/./b"},
			{"ParentInside", "a/../b"},
			{"ParentFirst", "../a"},
			{"ParentLast", "a/.."},
			{"Backslash", `a\b`},
			{"Space", "a b"},
			{"Colon", "c:a"},
			{"NonASCII", "ä"},
			{"NUL", "a\x00"},
		},
	},
}

func TestValidID(t *testing.T)          { stringChecks["ValidID"].run(t) }
func TestValidName(t *testing.T)        { stringChecks["ValidName"].run(t) }
func TestValidMethod(t *testing.T)      { stringChecks["ValidMethod"].run(t) }
func TestValidContentType(t *testing.T) { stringChecks["ValidContentType"].run(t) }
func TestValidRelPath(t *testing.T)     { stringChecks["ValidRelPath"].run(t) }

func (c stringCheck) run(t *testing.T) {
	tooLong := c.longest + c.longest[len(c.longest)-1:]
	for _, set := range []struct {
		verdict string
		want    bool
		inputs  []namedInput
	}{
		{"Accept", true, append(slices.Clone(c.accept), namedInput{"MaxLength", c.longest})},
		{"Refuse", false, append([]namedInput{{"Empty", ""}, {"TooLong", tooLong}}, c.refuse...)},
	} {
		for _, in := range set.inputs {
			t.Run(set.verdict+"/"+in.name, func(t *testing.T) {
				if got := c.bytes([]byte(in.in)); got != set.want {
					t.Errorf("%q: got %v, want %v", in.in, got, set.want)
				}
				if c.str != nil && c.str(in.in) != set.want {
					t.Errorf("%q: the string form disagrees with the []byte form", in.in)
				}
			})
		}
	}
}

// accepted is an input a parser accepts and the value it must yield.
type accepted[T any] struct {
	name string
	in   string
	want T
}

// runParse checks parse on every input: each accepted one yields its value
// and formats back to itself through every format, its canonical spelling;
// each refused one yields the zero value.
func runParse[T comparable](t *testing.T, prefix string, parse func(string) (T, bool), accept []accepted[T], refuse []namedInput, formats ...func(T) string) {
	t.Helper()
	for _, c := range accept {
		t.Run(prefix+"Accept/"+c.name, func(t *testing.T) {
			got, ok := parse(c.in)
			if !ok || got != c.want {
				t.Fatalf("%q: got (%v, %v), want (%v, true)", c.in, got, ok, c.want)
			}
			for _, format := range formats {
				if s := format(got); s != c.in {
					t.Errorf("%v formats as %q, want %q", got, s, c.in)
				}
			}
		})
	}
	for _, c := range refuse {
		t.Run(prefix+"Refuse/"+c.name, func(t *testing.T) {
			var zero T
			if got, ok := parse(c.in); ok || got != zero {
				t.Fatalf("%q: got (%v, %v), want a refusal and the zero value", c.in, got, ok)
			}
		})
	}
}

func TestParseU64(t *testing.T) {
	runParse(t, "", func(s string) (uint64, bool) { return ParseU64Bytes([]byte(s)) }, []accepted[uint64]{
		{"Zero", "0", 0},
		{"One", "1", 1},
		{"Typical", "1228800", 1228800},
		{"Max", "18446744073709551615", 1<<64 - 1},
		{"MaxMinusOne", "18446744073709551614", 1<<64 - 2},
	}, []namedInput{
		{"MaxPlusOne", "18446744073709551616"},
		{"TwentyNines", "99999999999999999999"},
		{"TwentyOneDigits", "100000000000000000000"},
		{"Empty", ""},
		{"Plus", "+1"},
		{"Minus", "-1"},
		{"LeadingZero", "01"},
		{"DoubleZero", "00"},
		{"LeadingSpace", " 1"},
		{"TrailingSpace", "1 "},
		{"Fraction", "1.0"},
		{"Exponent", "1e3"},
		{"Hex", "0x1"},
		{"Underscore", "1_000"},
		{"FullwidthDigit", "１"},
	}, FormatU64)
	// Every power of ten and its neighbours agrees with strconv, which is
	// not canonical-only but agrees on canonical input.
	for p := uint64(1); p != 0 && p <= 1e19; p *= 10 {
		for _, n := range []uint64{p - 1, p, p + 1} {
			s := strconv.FormatUint(n, 10)
			if got, ok := ParseU64(s); !ok || got != n {
				t.Errorf("ParseU64(%q) = (%d, %v)", s, got, ok)
			}
		}
	}
}

func TestParseDigest(t *testing.T) {
	var mixed, allF Digest
	for i := range mixed {
		mixed[i] = byte(i*37 + 5)
		allF[i] = 0xff
	}
	good := hex.EncodeToString(mixed[:])
	runParse(t, "", func(s string) (Digest, bool) { return ParseDigestBytes([]byte(s)) }, []accepted[Digest]{
		{"Mixed", good, mixed},
		{"Zero", strings.Repeat("0", 64), Digest{}},
		{"AllF", strings.Repeat("f", 64), allF},
	}, []namedInput{
		{"Empty", ""},
		{"Short", good[:63]},
		{"Long", good + "0"},
		{"Uppercase", strings.ToUpper(good)},
		{"OneUppercase", "A" + good[1:]},
		{"NotHex", "g" + good[1:]},
		{"Space", " " + good[1:]},
		{"Prefix", "0x" + good[2:]},
	}, Digest.String, func(d Digest) string {
		b := d.AppendHex([]byte("x")) // appends after what b holds
		if b[0] != 'x' {
			return "overwrote " + string(b)
		}
		return string(b[1:])
	})
	if d, ok := ParseDigest(good); !ok || d.String() != good {
		t.Error("ParseDigest disagrees with ParseDigestBytes")
	}
}

var families = []struct {
	fam    Family
	prefix string
	str    func(uint64) string // the family's typed String method
}{
	{FamMsg, "msg-", func(n uint64) string { return MsgID(n).String() }},
	{FamBus, "bus-", func(n uint64) string { return BusID(n).String() }},
	{FamConn, "conn-", func(n uint64) string { return ConnID(n).String() }},
	{FamSvc, "svc-", func(n uint64) string { return ServiceInc(n).String() }},
	{FamTop, "top-", func(n uint64) string { return TopicInc(n).String() }},
	{FamSub, "sub-", func(n uint64) string { return SubID(n).String() }},
	{FamCall, "call-", func(n uint64) string { return CallID(n).String() }},
	{FamArtifact, "a-", func(n uint64) string { return ArtifactID(n).String() }},
	{FamDelivery, "dlv-", func(n uint64) string { return DeliveryID(n).String() }},
	{FamOwn, "own-", func(n uint64) string { return HoldID(n).String() }},
}

func TestSerials(t *testing.T) {
	for _, f := range families {
		p := f.prefix
		if f.fam.Prefix() != p {
			t.Fatalf("%d: prefix %q, want %q", f.fam, f.fam.Prefix(), p)
		}
		name := strings.TrimSuffix(p, "-")
		runParse(t, name+"/", func(s string) (uint64, bool) { return ParseSerialBytes(f.fam, []byte(s)) }, []accepted[uint64]{
			{"Zero", p + "0", 0},
			{"Seven", p + "7", 7},
			{"Max", p + "18446744073709551615", 1<<64 - 1},
		}, []namedInput{
			{"PrefixOnly", p},
			{"NoDash", name + "7"},
			{"LeadingZero", p + "07"},
			{"Negative", p + "-1"},
			{"Plus", p + "+1"},
			{"Letter", p + "x"},
			{"TrailingSpace", p + "7 "},
			{"Uppercase", strings.ToUpper(p) + "7"},
			{"Overflow", p + "18446744073709551616"},
			{"Bare", "7"},
			{"Empty", ""},
		}, func(n uint64) string { return FormatSerial(f.fam, n) }, f.str)
		// No family accepts another family's spelling.
		for _, g := range families {
			if g.fam == f.fam {
				continue
			}
			if _, ok := ParseSerialBytes(f.fam, []byte(g.prefix+"1")); ok {
				t.Errorf("%s accepts %q", name, g.prefix+"1")
			}
		}
	}
}

func TestSerialInvalidFamily(t *testing.T) {
	for _, f := range []Family{0, FamOwn + 1, 255} {
		if f.Prefix() != "?-" {
			t.Errorf("Family(%d).Prefix() = %q", f, f.Prefix())
		}
		// The placeholder prefix is for messages; it must not parse.
		if n, ok := ParseSerialBytes(f, []byte("?-1")); ok {
			t.Errorf("Family(%d) parsed %q as %d", f, "?-1", n)
		}
	}
}

func TestOwnerID(t *testing.T) {
	runParse(t, "", func(s string) (OwnerID, bool) { return ParseOwnerIDBytes([]byte(s)) }, []accepted[OwnerID]{
		{"Delivery", "dlv-3", DeliveryOwner(3)},
		{"Hold", "own-9", HoldOwner(9)},
		{"HoldZero", "own-0", OwnerID{}},
		{"DeliveryMax", "dlv-18446744073709551615", OwnerID{Delivery: true, N: 1<<64 - 1}},
	}, []namedInput{
		{"Message", "msg-1"},
		{"Artifact", "a-1"},
		{"Call", "call-1"},
		{"DeliveryPrefixOnly", "dlv-"},
		{"HoldLeadingZero", "own-01"},
		{"Empty", ""},
	}, OwnerID.String)
}

func TestRouterAndStoreIDs(t *testing.T) {
	router := func(s string) (uint64, bool) { v, ok := ParseRouterID(s); return uint64(v), ok }
	store := func(s string) (uint64, bool) { v, ok := ParseStoreID(s); return uint64(v), ok }
	for _, p := range []struct {
		name   string
		prefix string
		other  string
		parse  func(string) (uint64, bool)
		format func(uint64) string
	}{
		{"Router", "router-", "store-", router, func(v uint64) string { return RouterID(v).String() }},
		{"Store", "store-", "router-", store, func(v uint64) string { return StoreID(v).String() }},
	} {
		runParse(t, p.name+"/", p.parse, []accepted[uint64]{
			{"Mixed", p.prefix + "0123456789abcdef", 0x0123456789abcdef},
			{"Zero", p.prefix + "0000000000000000", 0},
			{"Max", p.prefix + "ffffffffffffffff", 1<<64 - 1},
		}, []namedInput{
			{"Short", p.prefix + "0123456789abcde"},
			{"Long", p.prefix + "0123456789abcdef0"},
			{"Uppercase", p.prefix + "0123456789ABCDEF"},
			{"NotHex", p.prefix + "0123456789abcdeg"},
			{"OtherTag", p.other + "0123456789abcdef"},
			{"CapitalPrefix", strings.ToUpper(p.prefix[:1]) + p.prefix[1:] + "0123456789abcdef"},
			{"NoPrefix", "0123456789abcdef"},
			{"Empty", ""},
		}, p.format)
	}
}

func TestOptString(t *testing.T) {
	if s := Some(MsgID(7)).String(); s != "msg-7" {
		t.Errorf("Some(msg-7) = %q", s)
	}
	if s := (Opt[MsgID]{}).String(); s != "null" {
		t.Errorf("empty Opt = %q", s)
	}
}

func TestParseRetention(t *testing.T) {
	for _, s := range []string{"none", "latest"} {
		if r, ok := ParseRetention(s); !ok || r.String() != s {
			t.Errorf("ParseRetention(%q) = %v, %v", s, r, ok)
		}
	}
	for _, s := range []string{"", "Latest", "bounded", "Retention(0)"} {
		if r, ok := ParseRetention(s); ok {
			t.Errorf("ParseRetention(%q) = %v, want refused", s, r)
		}
	}
}
