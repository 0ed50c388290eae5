package wire

import "strconv"

// Decoder turns frames into Envelopes and bodies. It owns a Scanner and an
// intern table and keeps both between frames, so a warm Decoder decodes a
// typical envelope without allocating. A Decoder is not safe for concurrent
// use; a connection owns one.
//
// What a decode returns is valid until the next Decode: RawJSON payloads and
// the backing arrays of slices alias the frame or the decoder. Interned
// strings are ordinary immutable Go strings and may be kept.
type Decoder struct {
	sc      Scanner
	scratch []byte
	names   map[string]string
	nameLen int
	paths   map[pathKey]string // see path
	// last is path's most recent answer: a frame's attachments ask for
	// the same one in turn, and a compare is cheaper than the map.
	last     pathKey
	lastPath string
}

// pathKey is a nested body's context: its parent's and its own name.
type pathKey struct{ ctx, suffix string }

// path names a nested body for its errors. The names are few and fixed,
// so they are built once per decoder instead of concatenated on every
// decode; past the bound (a context built from input) it concatenates.
func (d *Decoder) path(ctx, suffix string) string {
	k := pathKey{ctx, suffix}
	if k == d.last && d.lastPath != "" {
		return d.lastPath
	}
	if p, ok := d.paths[k]; ok {
		d.last, d.lastPath = k, p
		return p
	}
	p := ctx + suffix
	if d.paths == nil {
		d.paths = map[pathKey]string{}
	}
	if len(d.paths) < 256 {
		d.paths[k] = p
	}
	return p
}

// Interning is bounded so that a peer sending endless fresh names costs
// allocations, not memory.
const (
	internMaxEntries = 4096
	internMaxBytes   = 256 << 10
	internMaxLen     = 256
)

func (d *Decoder) intern(b []byte) string {
	if s, ok := d.names[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(b) <= internMaxLen && len(d.names) < internMaxEntries && d.nameLen+len(b) <= internMaxBytes {
		if d.names == nil {
			d.names = make(map[string]string, 64)
		}
		d.names[s] = s
		d.nameLen += len(b)
	}
	return s
}

// strBytes returns the decoded bytes of the string token ti, unescaped into
// scratch when it has escapes. Valid until the next strBytes call.
func (d *Decoder) strBytes(ti uint32) []byte {
	t := &d.sc.toks[ti]
	raw := d.sc.data[t.start:t.end]
	if !t.esc {
		return raw
	}
	d.scratch = appendUnescaped(d.scratch[:0], raw)
	return d.scratch
}

func (d *Decoder) kind(ti uint32) Kind { return d.sc.toks[ti].kind }

// raw returns the bytes of value ti as they appear in the frame.
func (d *Decoder) raw(ti uint32) []byte {
	t := &d.sc.toks[ti]
	if t.kind == KindString {
		return d.sc.data[t.start-1 : t.end+1]
	}
	return d.sc.data[t.start:t.end]
}

// fields iterates the members of one object token for the decoders in
// codecs_gen.go and the hand-written ones (the envelope, the reply wrapper,
// Limits). The scanner has already refused duplicate keys, so each case in
// a decoder's switch runs at most once.
type fields struct {
	d      *Decoder
	ctx    string // operation or type name, for error messages
	first  uint32 // the first member's key token
	i, end uint32
	count  uint32 // members in the object
	key    []byte
	keyTok uint32
	val    uint32
}

func (d *Decoder) object(ti uint32, ctx string) (fields, *BusError) {
	t := &d.sc.toks[ti]
	if t.kind != KindObject {
		return fields{}, bodyErr(ctx, "", "want an object")
	}
	return fields{d: d, ctx: ctx, first: ti + 1, i: ti + 1, end: t.next, count: t.count}, nil
}

func (f *fields) next() bool {
	if f.i >= f.end {
		return false
	}
	f.keyTok = f.i
	f.val = f.i + 1
	f.key = f.d.strBytes(f.keyTok)
	f.i = f.d.sc.toks[f.val].next
	return true
}

func bodyErr(ctx, field, why string) *BusError {
	msg := ctx
	if field != "" {
		msg += ": " + field
	}
	return &BusError{Code: ErrInvalidEnvelope, Dispatch: NotDispatched, Message: msg + ": " + why}
}

func (f *fields) fail(why string) *BusError { return bodyErr(f.ctx, f.keyName(), why) }

// unknown refuses the current member.
func (f *fields) unknown() *BusError { return bodyErr(f.ctx, f.keyName(), "unknown field") }

// keyName re-reads the current member's key for an error message: f.key
// may share the decoder's scratch with a value read since (when both are
// escaped), and an error path can afford the copy.
func (f *fields) keyName() string {
	if f.key == nil {
		return ""
	}
	return f.d.keyString(f.keyTok)
}

func (d *Decoder) keyString(ti uint32) string {
	t := &d.sc.toks[ti]
	return string(appendUnescaped(nil, d.sc.data[t.start:t.end]))
}

// require fails unless the object had every one of names, which are all
// its members in order, after a loop that refused every other member.
// Members are distinct (the scanner refuses duplicates), so a count of
// len(names) means none is missing; otherwise the first absent one is
// named.
func (f *fields) require(names ...string) *BusError {
	if int(f.count) == len(names) {
		return nil
	}
	for _, n := range names {
		if !f.has(n) {
			return bodyErr(f.ctx, n, "missing")
		}
	}
	return bodyErr(f.ctx, "", "missing field")
}

// requireOpt is require for a body with optional members, of which the
// object had opt.
func (f *fields) requireOpt(opt int, names ...string) *BusError {
	if int(f.count) == len(names)+opt {
		return nil
	}
	for _, n := range names {
		if !f.has(n) {
			return bodyErr(f.ctx, n, "missing")
		}
	}
	return bodyErr(f.ctx, "", "missing field")
}

// has reports whether the object has member name; for error paths only.
func (f *fields) has(name string) bool {
	for i := f.first; i < f.end; i = f.d.sc.toks[i+1].next {
		if f.d.keyString(i) == name {
			return true
		}
	}
	return false
}

func (f *fields) strTok() ([]byte, *BusError) {
	if f.d.kind(f.val) != KindString {
		return nil, f.fail("want a string")
	}
	return f.d.strBytes(f.val), nil
}

// The string readers below share one pattern: read the string token, parse
// or check it, and refuse with the member's name and why. check is the
// refusal half: a wrong token kind wins over a failed parse (which, given
// the nil bytes of a non-string, also fails).
func (f *fields) check(err *BusError, ok bool, why string) *BusError {
	if err == nil && !ok {
		err = f.fail(why)
	}
	return err
}

// interned reads a string that valid accepts (why says what it is not) and
// interns it: ids, names, methods, content types and paths repeat.
func (f *fields) interned(valid func([]byte) bool, why string) (string, *BusError) {
	b, err := f.strTok()
	if err = f.check(err, err == nil && valid(b), why); err != nil {
		return "", err
	}
	return f.d.intern(b), nil
}

// text reads free text bounded by max bytes; it is not interned.
func (f *fields) text(max int) (string, *BusError) {
	b, err := f.strTok()
	if err = f.check(err, len(b) <= max, "too long"); err != nil {
		return "", err
	}
	return string(b), nil
}

// serial and tag build their refusal from an argument, so only once
// refusing: check would build it on every read.
func (f *fields) serial(fam Family) (uint64, *BusError) {
	b, err := f.strTok()
	n, ok := ParseSerialBytes(fam, b)
	if err == nil && !ok {
		err = f.fail("want " + fam.Prefix() + "<U64>")
	}
	return n, err
}

func (f *fields) owner() (OwnerID, *BusError) {
	b, err := f.strTok()
	o, ok := ParseOwnerIDBytes(b)
	return o, f.check(err, ok, "want dlv-<U64> or own-<U64>")
}

func (f *fields) u64() (uint64, *BusError) {
	b, err := f.strTok()
	n, ok := ParseU64Bytes(b)
	return n, f.check(err, ok, "want a canonical U64 string")
}

func (f *fields) tag(prefix string) (uint64, *BusError) {
	b, err := f.strTok()
	v, ok := parseTag(prefix, b)
	if err == nil && !ok {
		err = f.fail("want " + prefix + "<16 hex>")
	}
	return v, err
}

func (f *fields) digest() (Digest, *BusError) {
	b, err := f.strTok()
	dg, ok := ParseDigestBytes(b)
	return dg, f.check(err, ok, "want 64 lowercase hex characters")
}

// enum reads a string member that must be one of names (index 0 unused);
// why is the refusal of any other.
func (f *fields) enum(names []string, why string) (uint8, *BusError) {
	b, err := f.strTok()
	for i := 1; err == nil && i < len(names); i++ {
		if names[i] == string(b) {
			return uint8(i), nil
		}
	}
	return 0, f.check(err, false, why)
}

func (f *fields) boolean() (bool, *BusError) {
	switch f.d.kind(f.val) {
	case KindTrue:
		return true, nil
	case KindFalse:
		return false, nil
	}
	return false, f.fail("want a boolean")
}

// integer reads a JSON integer (no fraction or exponent) in [lo, hi].
func (f *fields) integer(lo, hi uint64) (uint64, *BusError) {
	if f.d.kind(f.val) != KindNumber {
		return 0, f.fail("want an integer")
	}
	n, ok := ParseU64Bytes(f.d.raw(f.val))
	if !ok || n < lo || n > hi {
		return 0, f.fail("want an integer in " + strconv.FormatUint(lo, 10) + ".." + strconv.FormatUint(hi, 10))
	}
	return n, nil
}

// u32 is integer for the uint32 members (versions, credits); hi fits.
func (f *fields) u32(lo, hi uint64) (uint32, *BusError) {
	n, err := f.integer(lo, hi)
	return uint32(n), err
}

// rawObject returns an opaque object member as validated bytes.
func (f *fields) rawObject() (RawJSON, *BusError) {
	if f.d.kind(f.val) != KindObject {
		return nil, f.fail("want an object")
	}
	return RawJSON(f.d.raw(f.val)), nil
}

// array iterates the elements of an array member, at most max of them.
func (f *fields) array(min, max int) (first, end uint32, err *BusError) {
	t := &f.d.sc.toks[f.val]
	if t.kind != KindArray {
		return 0, 0, f.fail("want an array")
	}
	if int(t.count) < min || int(t.count) > max {
		return 0, 0, f.fail("want " + strconv.Itoa(min) + ".." + strconv.Itoa(max) + " elements")
	}
	return f.val + 1, t.next, nil
}

// elem returns a fields cursor positioned on array element ti, so the scalar
// readers above can be reused for elements.
func (f *fields) elem(ti uint32) fields {
	return fields{d: f.d, ctx: f.ctx, key: f.key, keyTok: f.keyTok, val: ti}
}

// nextElem advances past element ti.
func (d *Decoder) nextElem(ti uint32) uint32 { return d.sc.toks[ti].next }
