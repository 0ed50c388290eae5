package wire

import "strconv"

// Scalar checks work on []byte so the decoder can run them on slices of the
// frame without converting; the string forms are thin wrappers.

const (
	MaxIDLen          = 64
	MaxNameLen        = 192
	MaxMethodLen      = 128
	MaxContentTypeLen = 127
)

func isIDByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// ValidIDBytes reports whether b matches ^[a-z0-9][a-z0-9._-]{0,63}$.
func ValidIDBytes(b []byte) bool {
	if len(b) == 0 || len(b) > MaxIDLen {
		return false
	}
	if c := b[0]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
		return false
	}
	for _, c := range b[1:] {
		if !isIDByte(c) {
			return false
		}
	}
	return true
}

// ValidID reports whether s is an Id.
func ValidID(s string) bool { return ValidIDBytes([]byte(s)) }

// ValidNameBytes reports whether b is a service or topic name: 1..192 bytes of
// [a-z0-9._-] with no empty dot-separated segment.
func ValidNameBytes(b []byte) bool {
	if len(b) == 0 || len(b) > MaxNameLen {
		return false
	}
	prevDot := true // a leading dot is an empty first segment
	for _, c := range b {
		if !isIDByte(c) {
			return false
		}
		if c == '.' {
			if prevDot {
				return false
			}
			prevDot = true
		} else {
			prevDot = false
		}
	}
	return !prevDot
}

// ValidName reports whether s is a service or topic name.
func ValidName(s string) bool { return ValidNameBytes([]byte(s)) }

// ValidMethodBytes reports whether b is 1..128 printable ASCII characters.
func ValidMethodBytes(b []byte) bool { return printableASCII(b, MaxMethodLen) }

// ValidMethod reports whether s is a method string.
func ValidMethod(s string) bool { return ValidMethodBytes([]byte(s)) }

// ValidContentTypeBytes reports whether b is nonempty ASCII of at most 127
// bytes. Control characters are refused too: a content type is a label, and
// nothing good comes of a newline in one.
func ValidContentTypeBytes(b []byte) bool { return printableASCII(b, MaxContentTypeLen) }

// ValidContentType reports whether s is a content type.
func ValidContentType(s string) bool { return ValidContentTypeBytes([]byte(s)) }

// printableASCII reports whether b is 1..max bytes of 0x20..0x7e.
func printableASCII(b []byte, max int) bool {
	if len(b) == 0 || len(b) > max {
		return false
	}
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// ParseU64Bytes parses a canonical U64: "0", or decimal digits without a
// leading zero, at most 2^64-1.
func ParseU64Bytes(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 || (b[0] == '0' && len(b) > 1) {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// ParseU64 parses a canonical U64 string.
func ParseU64(s string) (uint64, bool) { return ParseU64Bytes([]byte(s)) }

// FormatU64 is the canonical U64 encoding of n.
func FormatU64(n uint64) string { return strconv.FormatUint(n, 10) }

// Digest is a SHA-256 digest; on the wire it is 64 lowercase hex characters.
type Digest [32]byte

const hexDigits = "0123456789abcdef"

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// ParseDigestBytes parses exactly 64 lowercase hex characters.
func ParseDigestBytes(b []byte) (Digest, bool) {
	var d Digest
	if len(b) != 64 {
		return d, false
	}
	for i := range d {
		hi, ok1 := unhex(b[2*i])
		lo, ok2 := unhex(b[2*i+1])
		if !ok1 || !ok2 {
			return Digest{}, false
		}
		d[i] = hi<<4 | lo
	}
	return d, true
}

// ParseDigest parses a digest string.
func ParseDigest(s string) (Digest, bool) { return ParseDigestBytes([]byte(s)) }

// AppendHex appends the 64-character lowercase hex form.
func (d Digest) AppendHex(b []byte) []byte {
	for _, x := range d {
		b = append(b, hexDigits[x>>4], hexDigits[x&15])
	}
	return b
}

func (d Digest) String() string { return string(d.AppendHex(make([]byte, 0, 64))) }
