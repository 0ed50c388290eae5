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
}

// pathKey is a nested body's context: its parent's and its own name.
type pathKey struct{ ctx, suffix string }

// path names a nested body for its errors. The names are few and fixed,
// so they are built once per decoder instead of concatenated on every
// decode; past the bound (a context built from input) it concatenates.
func (d *Decoder) path(ctx, suffix string) string {
	k := pathKey{ctx, suffix}
	if p, ok := d.paths[k]; ok {
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

// fields iterates the members of one object token. The scanner has already
// refused duplicate keys, so each case in a decoder's switch runs at most
// once; seen collects bits for the required-member check.
type fields struct {
	d      *Decoder
	ctx    string // operation or type name, for error messages
	i, end uint32
	key    []byte
	keyTok uint32
	val    uint32
	seen   uint64
}

func (d *Decoder) object(ti uint32, ctx string) (fields, error) {
	if d.kind(ti) != KindObject {
		return fields{}, bodyErr(ctx, "", "want an object")
	}
	return fields{d: d, ctx: ctx, i: ti + 1, end: d.sc.toks[ti].next}, nil
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

func (f *fields) fail(why string) error { return bodyErr(f.ctx, f.keyName(), why) }

// unknown refuses the current member.
func (f *fields) unknown() error { return bodyErr(f.ctx, f.keyName(), "unknown field") }

// keyName re-reads the current member's key for an error message: f.key
// may share the decoder's scratch with a value read since (when both are
// escaped), and an error path can afford the copy.
func (f *fields) keyName() string {
	if f.key == nil {
		return ""
	}
	t := &f.d.sc.toks[f.keyTok]
	return string(appendUnescaped(nil, f.d.sc.data[t.start:t.end]))
}

// require fails unless every bit in want was seen; names lists the fields in
// bit order for the message.
func (f *fields) require(want uint64, names ...string) error {
	if f.seen&want == want {
		return nil
	}
	for i, n := range names {
		if want&(1<<uint(i)) != 0 && f.seen&(1<<uint(i)) == 0 {
			return bodyErr(f.ctx, n, "missing")
		}
	}
	return bodyErr(f.ctx, "", "missing field")
}

func (f *fields) mark(bit uint) { f.seen |= 1 << bit }

func (f *fields) strTok() ([]byte, error) {
	if f.d.kind(f.val) != KindString {
		return nil, f.fail("want a string")
	}
	return f.d.strBytes(f.val), nil
}

// id reads an Id and interns it.
func (f *fields) id() (string, error) {
	b, err := f.strTok()
	if err != nil {
		return "", err
	}
	if !ValidIDBytes(b) {
		return "", f.fail("not a valid Id")
	}
	return f.d.intern(b), nil
}

// name reads a service or topic name and interns it.
func (f *fields) name() (string, error) {
	b, err := f.strTok()
	if err != nil {
		return "", err
	}
	if !ValidNameBytes(b) {
		return "", f.fail("not a valid name")
	}
	return f.d.intern(b), nil
}

func (f *fields) method() (string, error) {
	b, err := f.strTok()
	if err != nil {
		return "", err
	}
	if !ValidMethodBytes(b) {
		return "", f.fail("not 1..128 printable ASCII characters")
	}
	return f.d.intern(b), nil
}

func (f *fields) contentType() (string, error) {
	b, err := f.strTok()
	if err != nil {
		return "", err
	}
	if !ValidContentTypeBytes(b) {
		return "", f.fail("not 1..127 printable ASCII characters")
	}
	return f.d.intern(b), nil
}

// text reads free text bounded by max bytes; it is not interned.
func (f *fields) text(max int) (string, error) {
	b, err := f.strTok()
	if err != nil {
		return "", err
	}
	if len(b) > max {
		return "", f.fail("too long")
	}
	return string(b), nil
}

func (f *fields) serial(fam Family) (uint64, error) {
	b, err := f.strTok()
	if err != nil {
		return 0, err
	}
	n, ok := ParseSerialBytes(fam, b)
	if !ok {
		return 0, f.fail("want " + fam.Prefix() + "<U64>")
	}
	return n, nil
}

func (f *fields) optSerial(fam Family) (Opt[uint64], error) {
	if f.d.kind(f.val) == KindNull {
		return Opt[uint64]{}, nil
	}
	n, err := f.serial(fam)
	return Opt[uint64]{Valid: err == nil, V: n}, err
}

func (f *fields) owner() (OwnerID, error) {
	b, err := f.strTok()
	if err != nil {
		return OwnerID{}, err
	}
	o, ok := ParseOwnerIDBytes(b)
	if !ok {
		return OwnerID{}, f.fail("want dlv-<U64> or own-<U64>")
	}
	return o, nil
}

func (f *fields) u64() (uint64, error) {
	b, err := f.strTok()
	if err != nil {
		return 0, err
	}
	n, ok := ParseU64Bytes(b)
	if !ok {
		return 0, f.fail("want a canonical U64 string")
	}
	return n, nil
}

func (f *fields) tag(prefix string) (uint64, error) {
	b, err := f.strTok()
	if err != nil {
		return 0, err
	}
	v, ok := parseTag(prefix, b)
	if !ok {
		return 0, f.fail("want " + prefix + "<16 hex>")
	}
	return v, nil
}

func (f *fields) digest() (Digest, error) {
	b, err := f.strTok()
	if err != nil {
		return Digest{}, err
	}
	dg, ok := ParseDigestBytes(b)
	if !ok {
		return Digest{}, f.fail("want 64 lowercase hex characters")
	}
	return dg, nil
}

func (f *fields) optDigest() (Opt[Digest], error) {
	if f.d.kind(f.val) == KindNull {
		return Opt[Digest]{}, nil
	}
	dg, err := f.digest()
	return Opt[Digest]{Valid: err == nil, V: dg}, err
}

func (f *fields) boolean() (bool, error) {
	switch f.d.kind(f.val) {
	case KindTrue:
		return true, nil
	case KindFalse:
		return false, nil
	}
	return false, f.fail("want a boolean")
}

// integer reads a JSON integer (no fraction or exponent) in [lo, hi].
func (f *fields) integer(lo, hi uint64) (uint64, error) {
	if f.d.kind(f.val) != KindNumber {
		return 0, f.fail("want an integer")
	}
	n, ok := ParseU64Bytes(f.d.raw(f.val))
	if !ok || n < lo || n > hi {
		return 0, f.fail("want an integer in " + strconv.FormatUint(lo, 10) + ".." + strconv.FormatUint(hi, 10))
	}
	return n, nil
}

// credit reads a queue or credit request, 1..65535.
func (f *fields) credit() (uint32, error) {
	n, err := f.integer(1, MaxCredit)
	return uint32(n), err
}

// rawObject returns an opaque object member as validated bytes.
func (f *fields) rawObject() (RawJSON, error) {
	if f.d.kind(f.val) != KindObject {
		return nil, f.fail("want an object")
	}
	return RawJSON(f.d.raw(f.val)), nil
}

// array iterates the elements of an array member, at most max of them.
func (f *fields) array(min, max int) (first, end uint32, err error) {
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
