package wire

// AppendJSON lets a pre-encoded object stand as a Body: a router encodes a
// reply or notice body once, under its lock, and frames it later.
func (r RawJSON) AppendJSON(b []byte) []byte { return appendRaw(b, r) }

func (r RawJSON) decodeJSON(d *Decoder, ti uint32, ctx string) error {
	return bodyErr(ctx, "", "RawJSON is an encoding-only body")
}
