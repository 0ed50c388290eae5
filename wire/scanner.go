package wire

import (
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// The scanner validates one JSON text under RFC 8259 plus flybus's stricter
// rules and records it as a flat tape of tokens, so that the envelope
// decoder can walk the document afterwards without building a tree. All of
// its memory (the tape, the key stack, the unescape arena, the duplicate-key
// hash table) is kept between calls: once warm, Scan does not allocate.
//
// Stricter than RFC 8259 (and than encoding/json):
//   - duplicate object keys, compared after unescaping, at every depth;
//   - invalid UTF-8 anywhere, and lone surrogates in \u escapes;
//   - numbers whose magnitude overflows a float64 (they would read as ±Inf);
//   - nesting deeper than MaxDepth containers.

// MaxDepth is the deepest container nesting accepted: a document of 128
// nested arrays is accepted, one of 129 is not.
const MaxDepth = 128

// Kind is the kind of a JSON value on the tape.
type Kind uint8

const (
	KindObject Kind = iota + 1
	KindArray
	KindString
	KindNumber
	KindTrue
	KindFalse
	KindNull
)

// token is one value (or one object key) on the tape. For strings, start and
// end bound the text between the quotes; for containers, the brackets
// themselves are included. next is the index of the token after this value's
// whole subtree, so siblings are reached in O(1).
type token struct {
	kind  Kind
	esc   bool // string holds at least one backslash escape
	start uint32
	end   uint32
	next  uint32
	count uint32 // members of an object, elements of an array
}

type keySpan struct {
	inArena bool
	off, n  uint32
}

// SyntaxError reports where and why a document was refused.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return "json: " + e.Msg + " at offset " + strconv.Itoa(e.Offset)
}

// Scanner is a reusable strict JSON validator and tokenizer. The zero value
// is ready to use. It is not safe for concurrent use.
type Scanner struct {
	data  []byte
	pos   int
	toks  []token
	keys  []keySpan
	arena []byte   // unescaped keys of the objects currently open
	table []uint32 // duplicate-key hash table for large objects
}

// dupLinearMax is the member count up to which duplicate keys are found by
// comparing every pair; envelopes and bodies have fewer than ten members, and
// pairwise comparison of short keys beats hashing them.
const dupLinearMax = 16

// A scanner keeps its tape and key tables between documents, up to these
// capacities: an envelope has a few dozen tokens, and one 64 KiB document
// of tiny values (32,000 tokens, half a megabyte of tape) must not stay
// pinned by a pooled or per-connection scanner for good.
const (
	keepToks  = 1024
	keepKeys  = 256
	keepArena = 4 << 10
	keepTable = 1024
)

// Trim lets go of a tape or key table grown past what a scanner keeps
// between documents. Scan trims first; a holder that may sit idle after a
// large document (a connection's decoder) trims after it too.
func (s *Scanner) Trim() {
	if cap(s.toks) > keepToks {
		s.toks = nil
	}
	if cap(s.keys) > keepKeys {
		s.keys = nil
	}
	if cap(s.arena) > keepArena {
		s.arena = nil
	}
	if cap(s.table) > keepTable {
		s.table = nil
	}
	s.data = nil
}

// Scan validates data as one strict JSON text and records its tape. On error
// the tape is meaningless.
func (s *Scanner) Scan(data []byte) error {
	s.Trim()
	s.data = data
	s.pos = 0
	s.toks = s.toks[:0]
	s.keys = s.keys[:0]
	s.arena = s.arena[:0]
	s.skipWS()
	if s.pos >= len(data) {
		return s.fail("empty document")
	}
	if err := s.value(0); err != nil {
		return err
	}
	s.skipWS()
	if s.pos != len(data) {
		return s.fail("trailing bytes after the document")
	}
	return nil
}

// Valid reports whether data is one strict JSON text, with the reason when
// it is not. It allocates a Scanner; hot paths keep their own.
func Valid(data []byte) error {
	var s Scanner
	return s.Scan(data)
}

func (s *Scanner) fail(msg string) error { return &SyntaxError{Offset: s.pos, Msg: msg} }

func (s *Scanner) skipWS() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

func (s *Scanner) value(depth int) error {
	if s.pos >= len(s.data) {
		return s.fail("unexpected end of document")
	}
	switch c := s.data[s.pos]; {
	case c == '{':
		return s.container(KindObject, depth+1)
	case c == '[':
		return s.container(KindArray, depth+1)
	case c == '"':
		return s.str()
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true", KindTrue)
	case c == 'f':
		return s.literal("false", KindFalse)
	case c == 'n':
		return s.literal("null", KindNull)
	default:
		return s.fail("invalid character at the start of a value")
	}
}

func (s *Scanner) push(k Kind, start int) int {
	s.toks = append(s.toks, token{kind: k, start: uint32(start)})
	return len(s.toks) - 1
}

func (s *Scanner) literal(lit string, k Kind) error {
	if len(s.data)-s.pos < len(lit) || string(s.data[s.pos:s.pos+len(lit)]) != lit {
		return s.fail("invalid literal")
	}
	i := s.push(k, s.pos)
	s.pos += len(lit)
	s.toks[i].end = uint32(s.pos)
	s.toks[i].next = uint32(i + 1)
	return nil
}

// container scans an object or an array from its opening bracket: members
// (a key, a colon, a value) or elements, their commas and the close. An
// object's keys are checked for duplicates once it is complete.
func (s *Scanner) container(k Kind, depth int) error {
	if depth > MaxDepth {
		return s.fail("nesting too deep")
	}
	close, unterminated, unexpected := byte(']'), "unterminated array", "expected ',' or ']' in an array"
	if k == KindObject {
		close, unterminated, unexpected = '}', "unterminated object", "expected ',' or '}' in an object"
	}
	idx := s.push(k, s.pos)
	s.pos++
	keyBase, arenaBase := len(s.keys), len(s.arena)
	var n uint32
	s.skipWS()
	if s.pos < len(s.data) && s.data[s.pos] == close {
		s.pos++
	} else {
		for more := true; more; n++ {
			s.skipWS()
			if k == KindObject {
				if err := s.key(); err != nil {
					return err
				}
			}
			if err := s.value(depth); err != nil {
				return err
			}
			s.skipWS()
			var err error
			if more, err = s.more(close, unterminated, unexpected); err != nil {
				return err
			}
		}
		if k == KindObject {
			if err := s.checkDuplicates(keyBase); err != nil {
				return err
			}
		}
	}
	s.keys = s.keys[:keyBase]
	s.arena = s.arena[:arenaBase]
	t := &s.toks[idx]
	t.end, t.next, t.count = uint32(s.pos), uint32(len(s.toks)), n
	return nil
}

// key consumes an object member's key and colon, up to its value.
func (s *Scanner) key() error {
	if s.pos >= len(s.data) || s.data[s.pos] != '"' {
		return s.fail("expected a string key")
	}
	if err := s.str(); err != nil {
		return err
	}
	s.recordKey(len(s.toks) - 1)
	s.skipWS()
	if s.pos >= len(s.data) || s.data[s.pos] != ':' {
		return s.fail("expected ':' after an object key")
	}
	s.pos++
	s.skipWS()
	return nil
}

// more consumes what follows a member or an element (after white space):
// a comma, when more follow, or the container's close.
func (s *Scanner) more(close byte, unterminated, unexpected string) (bool, error) {
	if s.pos >= len(s.data) {
		return false, s.fail(unterminated)
	}
	switch s.data[s.pos] {
	case ',':
		s.pos++
		return true, nil
	case close:
		s.pos++
		return false, nil
	}
	return false, s.fail(unexpected)
}

// str consumes a string starting at its opening quote.
func (s *Scanner) str() error {
	s.pos++ // opening quote
	start := s.pos
	esc := false
	data := s.data
	for {
		// Fast path: plain printable ASCII.
		for s.pos < len(data) {
			c := data[s.pos]
			if c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
				break
			}
			s.pos++
		}
		if s.pos >= len(data) {
			return s.fail("unterminated string")
		}
		c := data[s.pos]
		switch {
		case c == '"':
			i := s.push(KindString, start)
			t := &s.toks[i]
			t.end, t.next, t.esc = uint32(s.pos), uint32(i+1), esc
			s.pos++
			return nil
		case c == '\\':
			esc = true
			if err := s.escape(); err != nil {
				return err
			}
		case c < 0x20:
			return s.fail("control character in a string")
		default:
			r, size := utf8.DecodeRune(data[s.pos:])
			if r == utf8.RuneError && size <= 1 {
				return s.fail("invalid UTF-8 in a string")
			}
			s.pos += size
		}
	}
}

// escape consumes one backslash escape, refusing lone surrogates.
func (s *Scanner) escape() error {
	data := s.data
	if s.pos+1 >= len(data) {
		return s.fail("unterminated escape")
	}
	switch data[s.pos+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.pos += 2
		return nil
	case 'u':
	default:
		return s.fail("invalid escape")
	}
	r, ok := hex4(data, s.pos+2)
	if !ok {
		return s.fail("invalid \\u escape")
	}
	s.pos += 6
	switch {
	case r >= 0xDC00 && r <= 0xDFFF:
		return s.fail("lone low surrogate in \\u escape")
	case r >= 0xD800 && r <= 0xDBFF:
		if s.pos+1 >= len(data) || data[s.pos] != '\\' || data[s.pos+1] != 'u' {
			return s.fail("lone high surrogate in \\u escape")
		}
		lo, ok := hex4(data, s.pos+2)
		if !ok || lo < 0xDC00 || lo > 0xDFFF {
			return s.fail("lone high surrogate in \\u escape")
		}
		s.pos += 6
	}
	return nil
}

func hex4(data []byte, at int) (rune, bool) {
	if at+4 > len(data) {
		return 0, false
	}
	var r rune
	for _, c := range data[at : at+4] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (s *Scanner) number() error {
	data := s.data
	start := s.pos
	if data[s.pos] == '-' {
		s.pos++
	}
	switch {
	case s.pos < len(data) && data[s.pos] == '0':
		s.pos++
		if s.pos < len(data) && isDigit(data[s.pos]) {
			return s.fail("leading zero in a number")
		}
	case s.pos < len(data) && isDigit(data[s.pos]):
		for s.pos < len(data) && isDigit(data[s.pos]) {
			s.pos++
		}
	default:
		return s.fail("invalid number")
	}
	big := s.pos-start > 300 // could overflow float64 without an exponent
	if s.pos < len(data) && data[s.pos] == '.' {
		s.pos++
		if s.pos >= len(data) || !isDigit(data[s.pos]) {
			return s.fail("invalid number fraction")
		}
		for s.pos < len(data) && isDigit(data[s.pos]) {
			s.pos++
		}
	}
	if s.pos < len(data) && (data[s.pos] == 'e' || data[s.pos] == 'E') {
		big = true
		s.pos++
		if s.pos < len(data) && (data[s.pos] == '+' || data[s.pos] == '-') {
			s.pos++
		}
		if s.pos >= len(data) || !isDigit(data[s.pos]) {
			return s.fail("invalid number exponent")
		}
		for s.pos < len(data) && isDigit(data[s.pos]) {
			s.pos++
		}
	}
	if big {
		// Only numbers that could reach ±Inf pay for a parse. The string
		// aliases the frame and does not escape on success.
		text := data[start:s.pos]
		if _, err := strconv.ParseFloat(unsafe.String(&text[0], len(text)), 64); err != nil {
			s.pos = start
			return s.fail("number is not finite as a float64")
		}
	}
	i := s.push(KindNumber, start)
	s.toks[i].end, s.toks[i].next = uint32(s.pos), uint32(i+1)
	return nil
}

// recordKey remembers the key token just scanned for the duplicate check,
// unescaping it into the arena when needed.
func (s *Scanner) recordKey(ti int) {
	t := s.toks[ti]
	if !t.esc {
		s.keys = append(s.keys, keySpan{off: t.start, n: t.end - t.start})
		return
	}
	off := len(s.arena)
	s.arena = appendUnescaped(s.arena, s.data[t.start:t.end])
	s.keys = append(s.keys, keySpan{inArena: true, off: uint32(off), n: uint32(len(s.arena) - off)})
}

func (s *Scanner) keyBytes(k keySpan) []byte {
	if k.inArena {
		return s.arena[k.off : k.off+k.n]
	}
	return s.data[k.off : k.off+k.n]
}

func (s *Scanner) checkDuplicates(base int) error {
	keys := s.keys[base:]
	if len(keys) <= dupLinearMax {
		for i := 1; i < len(keys); i++ {
			ki := s.keyBytes(keys[i])
			for j := 0; j < i; j++ {
				if string(ki) == string(s.keyBytes(keys[j])) {
					return s.fail("duplicate object key")
				}
			}
		}
		return nil
	}
	size := 64
	for size < 2*len(keys) {
		size <<= 1
	}
	if cap(s.table) < size {
		s.table = make([]uint32, size)
	}
	table := s.table[:size]
	clear(table)
	mask := uint32(size - 1)
	for i, k := range keys {
		kb := s.keyBytes(k)
		h := fnv32(kb) & mask
		for table[h] != 0 {
			if string(s.keyBytes(keys[table[h]-1])) == string(kb) {
				return s.fail("duplicate object key")
			}
			h = (h + 1) & mask
		}
		table[h] = uint32(i + 1)
	}
	return nil
}

func fnv32(b []byte) uint32 {
	h := uint32(2166136261)
	for _, c := range b {
		h ^= uint32(c)
		h *= 16777619
	}
	return h
}

// appendUnescaped appends the decoded form of a string body that the
// scanner has already validated.
func appendUnescaped(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			dst = append(dst, c)
			i++
			continue
		}
		switch raw[i+1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, _ := hex4(raw, i+2)
			i += 6
			if r >= 0xD800 && r <= 0xDBFF {
				lo, _ := hex4(raw, i+2)
				r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
				i += 6
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default: // '"', '\\', '/'
			dst = append(dst, raw[i+1])
		}
		i += 2
	}
	return dst
}
