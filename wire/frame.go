package wire

import (
	"encoding/binary"
	"errors"
	"io"
)

// Framing: a u32 little-endian length, then that many bytes of JSON,
// 1..MaxEnvelopeBytes. The length is checked before any buffer grows.

// FrameHeaderLen is the size of the length prefix.
const FrameHeaderLen = 4

// ErrFrameLength reports a length prefix of zero or above MaxEnvelopeBytes.
var ErrFrameLength = &ProtocolError{Msg: "frame length out of range 1..65536"}

// FrameReader reads frames from a stream through one reusable buffer. It
// reads ahead as much as the stream offers, so a burst of small frames costs
// one read call, and it accepts a frame arriving one byte at a time.
type FrameReader struct {
	r     io.Reader
	buf   []byte
	start int // first unconsumed byte
	end   int // end of buffered bytes
}

// minReadBuf is the initial buffer: most frames are far smaller than the
// maximum, so the buffer grows to 64 KiB only for a connection that needs it.
const minReadBuf = 8 << 10

// NewFrameReader returns a reader over r.
func NewFrameReader(r io.Reader) *FrameReader {
	return &FrameReader{r: r, buf: make([]byte, minReadBuf)}
}

// ReadFrame returns the next frame's JSON. The slice is valid until the next
// call. A clean end of stream between frames is io.EOF; one inside a frame is
// io.ErrUnexpectedEOF; a bad length is ErrFrameLength.
func (fr *FrameReader) ReadFrame() ([]byte, error) {
	if err := fr.fill(FrameHeaderLen); err != nil {
		if err == io.ErrUnexpectedEOF && fr.end == fr.start {
			return nil, io.EOF
		}
		return nil, err
	}
	n := int(binary.LittleEndian.Uint32(fr.buf[fr.start:]))
	if n == 0 || n > MaxEnvelopeBytes {
		return nil, ErrFrameLength
	}
	if err := fr.fill(FrameHeaderLen + n); err != nil {
		return nil, err
	}
	frame := fr.buf[fr.start+FrameHeaderLen : fr.start+FrameHeaderLen+n]
	fr.start += FrameHeaderLen + n
	return frame, nil
}

// fill ensures at least need unconsumed bytes are buffered.
func (fr *FrameReader) fill(need int) error {
	if fr.end-fr.start >= need {
		return nil
	}
	// Compact, then grow if the frame cannot fit (need is already bounded).
	if fr.start > 0 {
		fr.end = copy(fr.buf, fr.buf[fr.start:fr.end])
		fr.start = 0
	}
	if need > len(fr.buf) {
		size := len(fr.buf)
		for size < need {
			size *= 2
		}
		nb := make([]byte, min(size, FrameHeaderLen+MaxEnvelopeBytes))
		copy(nb, fr.buf[:fr.end])
		fr.buf = nb
	}
	for fr.end < need {
		m, err := fr.r.Read(fr.buf[fr.end:])
		fr.end += m
		if fr.end >= need {
			return nil
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// HasFrame reports whether the next ReadFrame returns without reading:
// a whole frame, or a length it refuses, is buffered.
func (fr *FrameReader) HasFrame() bool {
	if fr.end-fr.start < FrameHeaderLen {
		return false
	}
	n := int(binary.LittleEndian.Uint32(fr.buf[fr.start:]))
	return n == 0 || n > MaxEnvelopeBytes || fr.end-fr.start >= FrameHeaderLen+n
}

// Buffered reports how many bytes were read ahead and not yet returned.
func (fr *FrameReader) Buffered() int { return fr.end - fr.start }

// BeginFrame appends a placeholder length prefix and returns the offset
// where the JSON starts; FinishFrame patches it.
func BeginFrame(b []byte) ([]byte, int) {
	return append(b, 0, 0, 0, 0), len(b) + FrameHeaderLen
}

// FinishFrame writes the length of b[start:] into the prefix before start.
// It fails, leaving b as it was before BeginFrame, when the JSON is empty or
// longer than MaxEnvelopeBytes.
func FinishFrame(b []byte, start int) ([]byte, error) {
	n := len(b) - start
	if n == 0 || n > MaxEnvelopeBytes {
		return b[:start-FrameHeaderLen], &BusError{Code: ErrInvalidEnvelope, Dispatch: NotDispatched,
			Message: "envelope exceeds 65536 bytes"}
	}
	binary.LittleEndian.PutUint32(b[start-FrameHeaderLen:], uint32(n))
	return b, nil
}

// AppendFrame appends one complete frame: prefix and envelope.
func AppendFrame(b []byte, h Header, body Body, atts []Attachment) ([]byte, error) {
	b, start := BeginFrame(b)
	b = AppendEnvelope(b, h, body, atts)
	return FinishFrame(b, start)
}

// WriteFull writes all of p, retrying short writes that report no error
// (some writers return early on a non-blocking descriptor).
func WriteFull(w io.Writer, p []byte) error {
	for len(p) > 0 {
		n, err := w.Write(p)
		p = p[n:]
		if err != nil {
			return err
		}
		if n == 0 && len(p) > 0 {
			return io.ErrShortWrite
		}
	}
	return nil
}
