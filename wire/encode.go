package wire

import (
	"strconv"
	"unicode/utf8"
)

// Append helpers write JSON pieces straight into a caller's buffer; the
// encoder never builds intermediate values, so encoding into a reused buffer
// does not allocate.

// RawJSON is a validated JSON object kept as bytes: payload and outcome are
// opaque to the bus. A RawJSON produced by a Decoder aliases its frame and is
// valid only until that Decoder's next Decode; Clone it to keep it.
type RawJSON []byte

// Clone returns a copy that does not alias the frame.
func (r RawJSON) Clone() RawJSON { return append(RawJSON(nil), r...) }

// emptyObject is what a nil RawJSON encodes as.
var emptyObject = RawJSON("{}")

func appendRaw(b []byte, r RawJSON) []byte {
	if len(r) == 0 {
		return append(b, emptyObject...)
	}
	return append(b, r...)
}

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD so
// that what we send always passes the peer's strict scanner.
func appendString[S string | []byte](b []byte, s S) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < 0x80 {
			i++
			continue
		}
		b = append(b, s[start:i]...)
		if c >= 0x80 {
			size := validRuneLen(s, i)
			if size == 0 {
				b = append(b, "\uFFFD"...)
				size = 1
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size
			start = i
			continue
		}
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&15])
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// validRuneLen returns the length of the well-formed UTF-8 sequence starting
// at s[i], or 0 when there is none (RFC 3629: no overlongs, no surrogates).
func validRuneLen[S string | []byte](s S, i int) int {
	c := s[i]
	var n int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		n = 2
	case c == 0xE0:
		n, lo = 3, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		n = 3
	case c == 0xED:
		n, hi = 3, 0x9F
	case c == 0xF0:
		n, lo = 4, 0x90
	case c >= 0xF1 && c <= 0xF3:
		n = 4
	case c == 0xF4:
		n, hi = 4, 0x8F
	default:
		return 0
	}
	if i+n > len(s) || s[i+1] < lo || s[i+1] > hi {
		return 0
	}
	for k := 2; k < n; k++ {
		if s[i+k] < 0x80 || s[i+k] > 0xBF {
			return 0
		}
	}
	return n
}

// appendKey appends `"k":` (with a leading comma unless first).
func appendKey(b []byte, k string, first bool) []byte {
	if !first {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, k...)
	return append(b, '"', ':')
}

func appendU64Str(b []byte, n uint64) []byte {
	b = append(b, '"')
	b = strconv.AppendUint(b, n, 10)
	return append(b, '"')
}

func appendSerialStr(b []byte, f Family, n uint64) []byte {
	b = append(b, '"')
	b = AppendSerial(b, f, n)
	return append(b, '"')
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, "true"...)
	}
	return append(b, "false"...)
}

func appendOwner(b []byte, o OwnerID) []byte { return appendSerialStr(b, o.family(), o.N) }

func appendDigest(b []byte, d Digest) []byte {
	b = append(b, '"')
	b = d.AppendHex(b)
	return append(b, '"')
}

// truncateText bounds a free-text message at a rune boundary. The bound is
// on the text as the peer decodes it: appendString turns each invalid byte
// into a three-byte U+FFFD, so those count three.
func truncateText(s string, n int) string {
	if len(s) <= n && utf8.ValidString(s) {
		return s
	}
	w := 0 // decoded length so far
	for i := 0; i < len(s); {
		size, out := 1, 1
		if s[i] >= utf8.RuneSelf {
			if size = validRuneLen(s, i); size == 0 {
				size, out = 1, len("\uFFFD")
			} else {
				out = size
			}
		}
		if w+out > n {
			return s[:i]
		}
		w += out
		i += size
	}
	return s
}
