package wire

// AppendJSON lets a pre-encoded object stand as a Body: a router encodes a
// reply or notice body once, under its lock, and frames it later. Pass a
// *RawJSON to avoid boxing the slice.
func (r RawJSON) AppendJSON(b []byte) []byte { return appendRaw(b, r) }

// decodeJSON captures the body object's bytes (valid until the next
// Decode), so a *RawJSON can receive any body unparsed.
func (r *RawJSON) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	if d.kind(ti) != KindObject {
		return bodyErr(ctx, "", "want an object")
	}
	*r = RawJSON(d.raw(ti))
	return nil
}
