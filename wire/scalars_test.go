package wire

import (
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
)

// Scalar encodings of docs/protocol.md's Scalars and identifiers: every check
// gets accept and refuse cases at each boundary (length, alphabet,
// canonical form).

type predCase struct {
	name string
	in   string
	ok   bool
}

func runPred(t *testing.T, fn func([]byte) bool, cases []predCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := fn([]byte(c.in)); got != c.ok {
				t.Errorf("%q: got %v, want %v", c.in, got, c.ok)
			}
		})
	}
}

func TestValidID(t *testing.T) {
	runPred(t, ValidIDBytes, []predCase{
		{"Accept/OneLetter", "a", true},
		{"Accept/OneDigit", "0", true},
		{"Accept/AllPunctuation", "a-b_c.d", true},
		{"Accept/DoubleDotInside", "a..b", true},
		{"Accept/TrailingPunctuation", "a.", true},
		{"Accept/MaxLength", "a" + strings.Repeat("z", 63), true},
		{"Refuse/Empty", "", false},
		{"Refuse/TooLong", "a" + strings.Repeat("z", 64), false},
		{"Refuse/LeadingDash", "-a", false},
		{"Refuse/LeadingDot", ".a", false},
		{"Refuse/LeadingUnderscore", "_a", false},
		{"Refuse/Uppercase", "aB", false},
		{"Refuse/Space", "a b", false},
		{"Refuse/Slash", "a/b", false},
		{"Refuse/Colon", "a:b", false},
		{"Refuse/NonASCII", "é", false},
		{"Refuse/NUL", "a\x00", false},
	})
	if !ValidID("msg-7") || ValidID("MSG-7") {
		t.Error("ValidID disagrees with ValidIDBytes")
	}
}

func TestParseU64(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want uint64
		ok   bool
	}{
		{"Accept/Zero", "0", 0, true},
		{"Accept/One", "1", 1, true},
		{"Accept/Typical", "1228800", 1228800, true},
		{"Accept/Max", "18446744073709551615", 1<<64 - 1, true},
		{"Accept/MaxMinusOne", "18446744073709551614", 1<<64 - 2, true},
		{"Refuse/MaxPlusOne", "18446744073709551616", 0, false},
		{"Refuse/TwentyNines", "99999999999999999999", 0, false},
		{"Refuse/TwentyOneDigits", "100000000000000000000", 0, false},
		{"Refuse/Empty", "", 0, false},
		{"Refuse/Plus", "+1", 0, false},
		{"Refuse/Minus", "-1", 0, false},
		{"Refuse/LeadingZero", "01", 0, false},
		{"Refuse/DoubleZero", "00", 0, false},
		{"Refuse/LeadingSpace", " 1", 0, false},
		{"Refuse/TrailingSpace", "1 ", 0, false},
		{"Refuse/Fraction", "1.0", 0, false},
		{"Refuse/Exponent", "1e3", 0, false},
		{"Refuse/Hex", "0x1", 0, false},
		{"Refuse/Underscore", "1_000", 0, false},
		{"Refuse/FullwidthDigit", "１", 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := ParseU64Bytes([]byte(c.in))
			if ok != c.ok || got != c.want {
				t.Errorf("%q: got (%d, %v), want (%d, %v)", c.in, got, ok, c.want, c.ok)
			}
			if ok {
				if s := FormatU64(got); s != c.in {
					t.Errorf("FormatU64(%d) = %q, want %q", got, s, c.in)
				}
			}
		})
	}
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
	raw := make([]byte, 32)
	for i := range raw {
		raw[i] = byte(i*37 + 5)
	}
	good := hex.EncodeToString(raw)
	cases := []struct {
		name string
		in   string
		ok   bool
	}{
		{"Accept/Mixed", good, true},
		{"Accept/Zero", strings.Repeat("0", 64), true},
		{"Accept/AllF", strings.Repeat("f", 64), true},
		{"Refuse/Empty", "", false},
		{"Refuse/Short", good[:63], false},
		{"Refuse/Long", good + "0", false},
		{"Refuse/Uppercase", strings.ToUpper(good), false},
		{"Refuse/OneUppercase", "A" + good[1:], false},
		{"Refuse/NotHex", "g" + good[1:], false},
		{"Refuse/Space", " " + good[1:], false},
		{"Refuse/Prefix", "0x" + good[2:], false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, ok := ParseDigestBytes([]byte(c.in))
			if ok != c.ok {
				t.Fatalf("%q: ok = %v, want %v", c.in, ok, c.ok)
			}
			if !ok {
				if d != (Digest{}) {
					t.Errorf("refused digest left %x", d)
				}
				return
			}
			want, _ := hex.DecodeString(c.in)
			if string(d[:]) != string(want) {
				t.Errorf("%q parsed as %x", c.in, d)
			}
			if d.String() != c.in || string(d.AppendHex([]byte("x"))) != "x"+c.in {
				t.Errorf("%q formats as %q", c.in, d.String())
			}
		})
	}
	if d, ok := ParseDigest(good); !ok || d.String() != good {
		t.Error("ParseDigest disagrees with ParseDigestBytes")
	}
}

func TestValidName(t *testing.T) {
	runPred(t, ValidNameBytes, []predCase{
		{"Accept/OneLetter", "a", true},
		{"Accept/Dotted", "world.demo.frame", true},
		{"Accept/Punctuation", "a-b_c", true},
		{"Accept/PunctuationSegment", "a._.b", true},
		{"Accept/LeadingDash", "-a", true},
		{"Accept/Digits", "0.1", true},
		{"Accept/MaxLength", strings.Repeat("a", 192), true},
		{"Accept/MaxLengthDotted", strings.Repeat("ab.", 63) + "abc", true},
		{"Refuse/Empty", "", false},
		{"Refuse/TooLong", strings.Repeat("a", 193), false},
		{"Refuse/LeadingDot", ".a", false},
		{"Refuse/TrailingDot", "a.", false},
		{"Refuse/DoubleDot", "a..b", false},
		{"Refuse/OnlyDot", ".", false},
		{"Refuse/OnlyDots", "..", false},
		{"Refuse/Uppercase", "World", false},
		{"Refuse/Slash", "a/b", false},
		{"Refuse/Space", "a b", false},
		{"Refuse/Wildcard", "a.*", false},
		{"Refuse/NonASCII", "é", false},
	})
	if !ValidName("a.b") || ValidName("a..b") {
		t.Error("ValidName disagrees with ValidNameBytes")
	}
}

func TestValidMethod(t *testing.T) {
	runPred(t, ValidMethodBytes, []predCase{
		{"Accept/OneChar", "a", true},
		{"Accept/Typical", "Counter.Increment", true},
		{"Accept/Space", " ", true},
		{"Accept/Tilde", "~", true},
		{"Accept/QuoteAndBackslash", `Say "hi" \ now`, true},
		{"Accept/MaxLength", strings.Repeat("M", 128), true},
		{"Refuse/Empty", "", false},
		{"Refuse/TooLong", strings.Repeat("M", 129), false},
		{"Refuse/Tab", "a\tb", false},
		{"Refuse/Newline", "a\n", false},
		{"Refuse/NUL", "\x00", false},
		{"Refuse/DEL", "a\x7f", false},
		{"Refuse/NonASCII", "Zähler", false},
	})
	if !ValidMethod("M") || ValidMethod("") {
		t.Error("ValidMethod disagrees with ValidMethodBytes")
	}
}

func TestValidContentType(t *testing.T) {
	runPred(t, ValidContentTypeBytes, []predCase{
		{"Accept/Typical", "image/x-rgba", true},
		{"Accept/Parameters", `text/plain; charset="utf-8"`, true},
		{"Accept/OneChar", "x", true},
		{"Accept/MaxLength", strings.Repeat("c", 127), true},
		{"Refuse/Empty", "", false},
		{"Refuse/TooLong", strings.Repeat("c", 128), false},
		{"Refuse/Newline", "text/plain\n", false},
		{"Refuse/DEL", "text\x7f", false},
		{"Refuse/NonASCII", "text/plain; charset=é", false},
	})
	if !ValidContentType("a/b") || ValidContentType("") {
		t.Error("ValidContentType disagrees with ValidContentTypeBytes")
	}
}

func TestValidRelPath(t *testing.T) {
	runPred(t, ValidRelPathBytes, []predCase{
		{"Accept/OneComponent", "a", true},
		{"Accept/Nested", "staging/a-41.3", true},
		{"Accept/MixedCase", "A/B_c-d.e", true},
		{"Accept/DotPrefixedName", "a/.b", true},
		{"Accept/ThreeDots", "a/...", true},
		{"Accept/DotDotPrefix", "..a/b", true},
		{"Accept/MaxLength", strings.Repeat("p", 255), true},
		{"Refuse/Empty", "", false},
		{"Refuse/TooLong", strings.Repeat("p", 256), false},
		{"Refuse/Absolute", "/a", false},
		{"Refuse/TrailingSlash", "a/", false},
		{"Refuse/EmptyComponent", "a//b", false},
		{"Refuse/Dot", ".", false},
		{"Refuse/DotDot", "..", false},
		{"Refuse/DotComponent", "a/./b", false},
		{"Refuse/ParentInside", "a/../b", false},
		{"Refuse/ParentFirst", "../a", false},
		{"Refuse/ParentLast", "a/..", false},
		{"Refuse/Backslash", `a\b`, false},
		{"Refuse/Space", "a b", false},
		{"Refuse/Colon", "c:a", false},
		{"Refuse/NonASCII", "ä", false},
		{"Refuse/NUL", "a\x00", false},
	})
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
		cases := []struct {
			name string
			in   string
			want uint64
			ok   bool
		}{
			{"Accept/Zero", p + "0", 0, true},
			{"Accept/Seven", p + "7", 7, true},
			{"Accept/Max", p + "18446744073709551615", 1<<64 - 1, true},
			{"Refuse/PrefixOnly", p, 0, false},
			{"Refuse/NoDash", name + "7", 0, false},
			{"Refuse/LeadingZero", p + "07", 0, false},
			{"Refuse/Negative", p + "-1", 0, false},
			{"Refuse/Plus", p + "+1", 0, false},
			{"Refuse/Letter", p + "x", 0, false},
			{"Refuse/TrailingSpace", p + "7 ", 0, false},
			{"Refuse/Uppercase", strings.ToUpper(p) + "7", 0, false},
			{"Refuse/Overflow", p + "18446744073709551616", 0, false},
			{"Refuse/Bare", "7", 0, false},
			{"Refuse/Empty", "", 0, false},
		}
		for _, c := range cases {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				got, ok := ParseSerialBytes(f.fam, []byte(c.in))
				if ok != c.ok || got != c.want {
					t.Fatalf("%q: got (%d, %v), want (%d, %v)", c.in, got, ok, c.want, c.ok)
				}
				if ok && (FormatSerial(f.fam, got) != c.in || f.str(got) != c.in) {
					t.Errorf("%d formats as %q / %q, want %q", got, FormatSerial(f.fam, got), f.str(got), c.in)
				}
			})
		}
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
	cases := []struct {
		name string
		in   string
		want OwnerID
		ok   bool
	}{
		{"Accept/Delivery", "dlv-3", DeliveryOwner(3), true},
		{"Accept/Hold", "own-9", HoldOwner(9), true},
		{"Accept/HoldZero", "own-0", OwnerID{}, true},
		{"Accept/DeliveryMax", "dlv-18446744073709551615", OwnerID{Delivery: true, N: 1<<64 - 1}, true},
		{"Refuse/Message", "msg-1", OwnerID{}, false},
		{"Refuse/Artifact", "a-1", OwnerID{}, false},
		{"Refuse/Call", "call-1", OwnerID{}, false},
		{"Refuse/DeliveryPrefixOnly", "dlv-", OwnerID{}, false},
		{"Refuse/HoldLeadingZero", "own-01", OwnerID{}, false},
		{"Refuse/Empty", "", OwnerID{}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := ParseOwnerIDBytes([]byte(c.in))
			if ok != c.ok || (ok && got != c.want) {
				t.Fatalf("%q: got (%+v, %v), want (%+v, %v)", c.in, got, ok, c.want, c.ok)
			}
			if ok && got.String() != c.in {
				t.Errorf("%+v formats as %q", got, got.String())
			}
		})
	}
}

func TestRouterAndStoreIDs(t *testing.T) {
	type parser func(string) (uint64, bool)
	router := func(s string) (uint64, bool) { v, ok := ParseRouterID(s); return uint64(v), ok }
	store := func(s string) (uint64, bool) { v, ok := ParseStoreID(s); return uint64(v), ok }
	for _, p := range []struct {
		name   string
		prefix string
		other  string
		parse  parser
		format func(uint64) string
	}{
		{"Router", "router-", "store-", router, func(v uint64) string { return RouterID(v).String() }},
		{"Store", "store-", "router-", store, func(v uint64) string { return StoreID(v).String() }},
	} {
		cases := []struct {
			name string
			in   string
			want uint64
			ok   bool
		}{
			{"Accept/Mixed", p.prefix + "0123456789abcdef", 0x0123456789abcdef, true},
			{"Accept/Zero", p.prefix + "0000000000000000", 0, true},
			{"Accept/Max", p.prefix + "ffffffffffffffff", 1<<64 - 1, true},
			{"Refuse/Short", p.prefix + "0123456789abcde", 0, false},
			{"Refuse/Long", p.prefix + "0123456789abcdef0", 0, false},
			{"Refuse/Uppercase", p.prefix + "0123456789ABCDEF", 0, false},
			{"Refuse/NotHex", p.prefix + "0123456789abcdeg", 0, false},
			{"Refuse/OtherTag", p.other + "0123456789abcdef", 0, false},
			{"Refuse/CapitalPrefix", strings.ToUpper(p.prefix[:1]) + p.prefix[1:] + "0123456789abcdef", 0, false},
			{"Refuse/NoPrefix", "0123456789abcdef", 0, false},
			{"Refuse/Empty", "", 0, false},
		}
		for _, c := range cases {
			t.Run(p.name+"/"+c.name, func(t *testing.T) {
				got, ok := p.parse(c.in)
				if ok != c.ok || got != c.want {
					t.Fatalf("%q: got (%x, %v), want (%x, %v)", c.in, got, ok, c.want, c.ok)
				}
				if ok && p.format(got) != c.in {
					t.Errorf("%x formats as %q", got, p.format(got))
				}
			})
		}
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
