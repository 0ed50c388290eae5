// Package wiretest reads a stream of frames the way the tests of client and
// router look at what the other side wrote: frame by frame, each decoded
// into an envelope.
package wiretest

import (
	"io"
	"iter"

	"github.com/flybus/flybus/wire"
)

// Reader decodes the frames of one stream.
type Reader struct {
	fr  *wire.FrameReader
	dec wire.Decoder
	env wire.Envelope
	// Frame is the frame Envelopes yielded last, valid until the next one.
	Frame []byte
	// Err is what ended the stream once Envelopes returns: io.EOF after a
	// clean end, a framing or read error otherwise.
	Err error
}

// NewReader reads frames from r.
func NewReader(r io.Reader) *Reader {
	return &Reader{fr: wire.NewFrameReader(r)}
}

// Envelopes yields each frame's envelope with the error decoding it
// returned, until the stream ends. The envelope is reused from one frame
// to the next.
func (r *Reader) Envelopes() iter.Seq2[*wire.Envelope, error] {
	return func(yield func(*wire.Envelope, error) bool) {
		for {
			f, err := r.fr.ReadFrame()
			if err != nil {
				r.Frame, r.Err = nil, err
				return
			}
			r.Frame = f
			if !yield(&r.env, r.dec.Decode(f, &r.env)) {
				return
			}
		}
	}
}
