package wire

// AppendJSON lets a pre-encoded object stand as a Body: a router encodes a
// reply or notice body once, under its lock, and frames it later. Pass a
// *RawJSON to avoid boxing the slice.
func (r RawJSON) AppendJSON(b []byte) []byte { return appendRaw(b, r) }

// decodeJSON captures the body object's bytes (valid until the next
// Decode), so a *RawJSON can receive any body unparsed.
func (r *RawJSON) decodeJSON(d *Decoder, ti uint32, ctx string) *BusError {
	if d.kind(ti) != KindObject {
		return bodyErr(ctx, "", "want an object")
	}
	*r = RawJSON(d.raw(ti))
	return nil
}

// MarshalJSON writes the object as it is, so a RawJSON nested in a value
// (an outcome that echoes a payload) stays JSON instead of becoming the
// base64 string encoders give a []byte. Like json.RawMessage, nil is null.
func (r RawJSON) MarshalJSON() ([]byte, error) {
	if r == nil {
		return []byte("null"), nil
	}
	return r, nil
}

// UnmarshalJSON keeps a copy of the value's bytes, as json.RawMessage does.
func (r *RawJSON) UnmarshalJSON(b []byte) error {
	*r = append((*r)[:0], b...)
	return nil
}
