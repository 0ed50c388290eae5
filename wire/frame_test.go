package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
)

// Framing: u32 little-endian length, 1..65536 bytes of JSON. The reader
// checks the length before it grows its buffer, survives any split of the
// stream into reads, and tells a clean end between frames from a cut one.

// recordingReader serves a fixed stream in chunks of at most step bytes
// (0: whatever the caller asks) and records every Read: how many bytes the
// caller asked for and how many it got.
type recordingReader struct {
	data   []byte
	step   int
	err    error // returned once data runs out; io.EOF when nil
	asked  []int
	served int
}

func (r *recordingReader) Read(p []byte) (int, error) {
	r.asked = append(r.asked, len(p))
	if r.served == len(r.data) {
		if r.err != nil {
			return 0, r.err
		}
		return 0, io.EOF
	}
	n := len(p)
	if r.step > 0 {
		n = min(n, r.step)
	}
	n = copy(p[:n], r.data[r.served:])
	r.served += n
	return n, nil
}

// eofWithDataReader returns its last bytes together with io.EOF, as
// io.Reader permits.
type eofWithDataReader struct{ data []byte }

func (r *eofWithDataReader) Read(p []byte) (int, error) {
	n := copy(p, r.data)
	r.data = r.data[n:]
	if len(r.data) == 0 {
		return n, io.EOF
	}
	return n, nil
}

// stream concatenates frames, each behind its length prefix.
func stream(frames ...[]byte) []byte {
	var b []byte
	for _, f := range frames {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

func testFrames(t testing.TB) [][]byte {
	frames := [][]byte{typicalCall(), typicalPublish(), []byte("{}"), []byte("1")}
	for _, nf := range sampleFrames(t) {
		frames = append(frames, nf.frame)
	}
	// Sizes around the reader's initial buffer and the maximum.
	for _, n := range []int{minReadBuf - FrameHeaderLen, minReadBuf - FrameHeaderLen + 1, 3 * minReadBuf, MaxEnvelopeBytes} {
		frames = append(frames, padPublish(t, n))
	}
	return frames
}

func readAll(t *testing.T, fr *FrameReader, want [][]byte) {
	t.Helper()
	for i, w := range want {
		got, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.Equal(got, w) {
			t.Fatalf("frame %d: got %d bytes %.60q, want %d bytes %.60q", i, len(got), got, len(w), w)
		}
	}
	if f, err := fr.ReadFrame(); err != io.EOF {
		t.Fatalf("after the last frame: %q, %v; want io.EOF", f, err)
	}
}

func TestFrameReaderOneByteAtATime(t *testing.T) {
	frames := testFrames(t)
	r := &recordingReader{data: stream(frames...), step: 1}
	readAll(t, NewFrameReader(r), frames)
	if r.served != len(r.data) {
		t.Errorf("served %d of %d bytes", r.served, len(r.data))
	}
}

func TestFrameReaderOddChunks(t *testing.T) {
	frames := testFrames(t)
	for _, step := range []int{2, 3, 5, 4093, 8191} {
		readAll(t, NewFrameReader(&recordingReader{data: stream(frames...), step: step}), frames)
	}
}

// Many small frames arriving together cost one read.
func TestFrameReaderManyFramesOneRead(t *testing.T) {
	var frames [][]byte
	for len(stream(frames...)) < minReadBuf-200 {
		frames = append(frames, typicalCall())
	}
	r := &recordingReader{data: stream(frames...)}
	readAll(t, NewFrameReader(r), frames)
	// One read delivered everything; the second saw the end of the stream.
	if len(r.asked) != 2 {
		t.Errorf("%d frames took %d reads, want 2 (data, EOF)", len(frames), len(r.asked))
	}
}

func TestFrameReaderEOFWithData(t *testing.T) {
	frames := [][]byte{typicalCall(), typicalPublish()}
	readAll(t, NewFrameReader(&eofWithDataReader{data: stream(frames...)}), frames)
}

// A bad length prefix is refused from the four prefix bytes alone: no
// further read, and no buffer larger than the initial one is requested.
func TestFrameReaderBadLength(t *testing.T) {
	for _, c := range []struct {
		name   string
		length uint32
	}{
		{"Zero", 0},
		{"MaxPlusOne", MaxEnvelopeBytes + 1},
		{"Huge", 1<<32 - 1},
	} {
		for _, step := range []int{1, 4} {
			t.Run(c.name+"/Step"+strconv.Itoa(step), func(t *testing.T) {
				// The body bytes are there to be read; the reader must not.
				data := append(binary.LittleEndian.AppendUint32(nil, c.length), bytes.Repeat([]byte("x"), 100)...)
				r := &recordingReader{data: data, step: step}
				fr := NewFrameReader(r)
				frame, err := fr.ReadFrame()
				if err != ErrFrameLength || frame != nil {
					t.Fatalf("got %q, %v; want ErrFrameLength", frame, err)
				}
				var pe *ProtocolError
				if !errors.As(err, &pe) {
					t.Errorf("ErrFrameLength is not a *ProtocolError")
				}
				if r.served != FrameHeaderLen {
					t.Errorf("read %d bytes in %d calls, want only the %d-byte prefix", r.served, len(r.asked), FrameHeaderLen)
				}
				for _, n := range r.asked {
					if n > minReadBuf {
						t.Errorf("asked for %d bytes before refusing", n)
					}
				}
				if len(fr.buf) != minReadBuf {
					t.Errorf("buffer grew to %d", len(fr.buf))
				}
			})
		}
	}
}

func TestFrameReaderEOF(t *testing.T) {
	one := stream(typicalCall())
	cases := []struct {
		name string
		data []byte
		want error
		n    int // frames read before the error
	}{
		{"Empty", nil, io.EOF, 0},
		{"BetweenFrames", one, io.EOF, 1},
		{"InPrefix", one[:2], io.ErrUnexpectedEOF, 0},
		{"AfterPrefix", one[:FrameHeaderLen], io.ErrUnexpectedEOF, 0},
		{"InBody", one[:len(one)-1], io.ErrUnexpectedEOF, 0},
		{"InSecondPrefix", append(append([]byte(nil), one...), 1, 0), io.ErrUnexpectedEOF, 1},
	}
	for _, c := range cases {
		for _, step := range []int{1, 0} {
			t.Run(c.name+"/Step"+strconv.Itoa(step), func(t *testing.T) {
				fr := NewFrameReader(&recordingReader{data: c.data, step: step})
				for i := range c.n {
					if _, err := fr.ReadFrame(); err != nil {
						t.Fatalf("frame %d: %v", i, err)
					}
				}
				if _, err := fr.ReadFrame(); err != c.want {
					t.Fatalf("got %v, want %v", err, c.want)
				}
			})
		}
	}
}

// Errors other than EOF come back unchanged.
func TestFrameReaderPassesErrors(t *testing.T) {
	boom := errors.New("boom")
	one := stream(typicalCall())
	for _, cut := range []int{0, 2, len(one) - 1, len(one)} {
		fr := NewFrameReader(&recordingReader{data: one[:cut], step: 3, err: boom})
		_, err := fr.ReadFrame()
		if cut == len(one) {
			if err != nil {
				t.Fatalf("whole frame: %v", err)
			}
			_, err = fr.ReadFrame()
		}
		if err != boom {
			t.Errorf("cut at %d: got %v, want the reader's error", cut, err)
		}
	}
}

// The buffer grows only as far as one maximum frame with its prefix.
func TestFrameReaderGrowth(t *testing.T) {
	small := padPublish(t, minReadBuf-FrameHeaderLen+1) // one byte too many for the initial buffer
	max := padPublish(t, MaxEnvelopeBytes)
	fr := NewFrameReader(&recordingReader{data: stream(small, max, small), step: 1000})
	if f, err := fr.ReadFrame(); err != nil || !bytes.Equal(f, small) {
		t.Fatalf("small: %v", err)
	}
	if len(fr.buf) != 2*minReadBuf {
		t.Errorf("after a %d-byte frame the buffer is %d, want %d", len(small), len(fr.buf), 2*minReadBuf)
	}
	if f, err := fr.ReadFrame(); err != nil || !bytes.Equal(f, max) {
		t.Fatalf("max: %v", err)
	}
	if len(fr.buf) != MaxEnvelopeBytes+FrameHeaderLen {
		t.Errorf("after a maximum frame the buffer is %d, want %d", len(fr.buf), MaxEnvelopeBytes+FrameHeaderLen)
	}
	if f, err := fr.ReadFrame(); err != nil || !bytes.Equal(f, small) {
		t.Fatalf("small after max: %v", err)
	}
	if len(fr.buf) != MaxEnvelopeBytes+FrameHeaderLen {
		t.Errorf("buffer changed to %d", len(fr.buf))
	}
}

func TestFrameReaderBuffered(t *testing.T) {
	a, b := typicalCall(), typicalPublish()
	fr := NewFrameReader(bytes.NewReader(stream(a, b)))
	if _, err := fr.ReadFrame(); err != nil {
		t.Fatal(err)
	}
	if got := fr.Buffered(); got != FrameHeaderLen+len(b) {
		t.Errorf("Buffered() = %d, want %d", got, FrameHeaderLen+len(b))
	}
}

// HasFrame says whether the next ReadFrame can return without reading:
// a whole frame is buffered, or a length the reader refuses at once.
func TestFrameReaderHasFrame(t *testing.T) {
	a, b := typicalCall(), typicalPublish()
	s := stream(a, b)
	cut := len(s) - 3 // b's last bytes still to come
	r := &recordingReader{data: s[:cut]}
	fr := NewFrameReader(r)
	if fr.HasFrame() {
		t.Fatal("HasFrame before anything was read")
	}
	if _, err := fr.ReadFrame(); err != nil {
		t.Fatal(err)
	}
	if fr.HasFrame() {
		t.Fatalf("HasFrame with %d of b's %d bytes buffered", fr.Buffered(), FrameHeaderLen+len(b))
	}
	fr = NewFrameReader(bytes.NewReader(s))
	if _, err := fr.ReadFrame(); err != nil {
		t.Fatal(err)
	}
	if !fr.HasFrame() {
		t.Fatal("no HasFrame with b whole in the buffer")
	}
	if _, err := fr.ReadFrame(); err != nil || fr.HasFrame() {
		t.Fatalf("after the last frame: %v, HasFrame %v", err, fr.HasFrame())
	}
	for _, n := range []uint32{0, MaxEnvelopeBytes + 1} {
		bad := binary.LittleEndian.AppendUint32(append([]byte(nil), stream(a)...), n)
		fr = NewFrameReader(bytes.NewReader(bad))
		if _, err := fr.ReadFrame(); err != nil {
			t.Fatal(err)
		}
		if !fr.HasFrame() {
			t.Errorf("length %d: HasFrame false, but ReadFrame refuses it without reading", n)
		}
		if _, err := fr.ReadFrame(); !errors.Is(err, ErrFrameLength) {
			t.Errorf("length %d: %v", n, err)
		}
	}
}

// oneByteWriter accepts one byte per call; zeroWriter accepts nothing.
type oneByteWriter struct {
	bytes.Buffer
	calls int
}

func (w *oneByteWriter) Write(p []byte) (int, error) {
	w.calls++
	if len(p) == 0 {
		return 0, nil
	}
	return w.Buffer.Write(p[:1])
}

type zeroWriter struct{}

func (zeroWriter) Write([]byte) (int, error) { return 0, nil }

type failWriter struct {
	after int
	err   error
}

func (w *failWriter) Write(p []byte) (int, error) {
	if w.after == 0 {
		return 0, w.err
	}
	n := min(len(p), w.after)
	w.after -= n
	return n, nil
}

func TestWriteFull(t *testing.T) {
	frame, err := AppendFrame(nil, Header{ID: 1, Kind: KindCommand, Op: OpPublish}, &Publish{Topic: "t", Payload: RawJSON(`{"a":1}`)}, sampleAttachments())
	if err != nil {
		t.Fatal(err)
	}
	var w oneByteWriter
	if err := WriteFull(&w, frame); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(w.Bytes(), frame) || w.calls != len(frame) {
		t.Errorf("wrote %d bytes in %d calls, want %d in %d", w.Len(), w.calls, len(frame), len(frame))
	}
	// What was written reads back as the frame.
	got, err := NewFrameReader(bytes.NewReader(w.Bytes())).ReadFrame()
	if err != nil || !bytes.Equal(got, frame[FrameHeaderLen:]) {
		t.Errorf("read back %q, %v", got, err)
	}
	if err := WriteFull(zeroWriter{}, frame); err != io.ErrShortWrite {
		t.Errorf("writer that takes nothing: %v, want io.ErrShortWrite", err)
	}
	boom := errors.New("boom")
	if err := WriteFull(&failWriter{after: 5, err: boom}, frame); err != boom {
		t.Errorf("failing writer: %v, want its error", err)
	}
	if err := WriteFull(zeroWriter{}, nil); err != nil {
		t.Errorf("empty write: %v", err)
	}
}

func TestAppendFrame(t *testing.T) {
	prefix := []byte("previous frame bytes")
	h := Header{ID: 1, Kind: KindCommand, Op: OpPublish}

	// Exactly the maximum fits, and the prefix carries its length.
	max := padPublish(t, MaxEnvelopeBytes)
	var pub Publish
	var d Decoder
	if err := decodeFrame(t, &d, max).DecodeBody(&pub); err != nil {
		t.Fatal(err)
	}
	out, err := AppendFrame(append([]byte(nil), prefix...), h, &pub, nil)
	if err != nil {
		t.Fatalf("maximum frame: %v", err)
	}
	if !bytes.Equal(out[:len(prefix)], prefix) || binary.LittleEndian.Uint32(out[len(prefix):]) != MaxEnvelopeBytes ||
		!bytes.Equal(out[len(prefix)+FrameHeaderLen:], max) {
		t.Fatal("maximum frame: wrong bytes")
	}

	// One byte more fails and leaves the buffer as it was.
	over := &Publish{Topic: "t", Payload: RawJSON(string(pub.Payload[:len(pub.Payload)-2]) + `p"}`)}
	for _, capacity := range []int{len(prefix), 1 << 17} {
		buf := append(make([]byte, 0, capacity), prefix...)
		out, err := AppendFrame(buf, h, over, nil)
		var be *BusError
		if !errors.As(err, &be) || be.Code != ErrInvalidEnvelope {
			t.Fatalf("cap %d: got %v, want INVALID_ENVELOPE", capacity, err)
		}
		if !bytes.Equal(out, prefix) {
			t.Errorf("cap %d: buffer is now %d bytes %.40q, want the original", capacity, len(out), out)
		}
		if !bytes.Equal(buf, prefix) {
			t.Errorf("cap %d: the caller's slice changed", capacity)
		}
	}

	// Far over the limit too, with many attachments.
	huge := &Publish{Topic: "t", Payload: RawJSON(`{"x":"` + strings.Repeat("y", 200000) + `"}`)}
	if out, err := AppendFrame(prefix, h, huge, sampleAttachments()); err == nil || !bytes.Equal(out, prefix) {
		t.Errorf("200 kB envelope: %v, %d bytes", err, len(out))
	}
}

func TestFinishFrameEmpty(t *testing.T) {
	b, start := BeginFrame([]byte("ab"))
	out, err := FinishFrame(b, start)
	if err == nil || string(out) != "ab" {
		t.Errorf("empty frame: %q, %v", out, err)
	}
}

// FuzzFrameReader splits a stream into reads of the fuzzer's sizes. The
// reader returns exactly the frames the stream holds, in order, refuses a
// bad length, never panics, and HasFrame is true exactly when the next
// ReadFrame returns without asking for more bytes.
func FuzzFrameReader(f *testing.F) {
	a, b := typicalCall(), typicalPublish()
	f.Add(stream(a, b), uint8(0))
	f.Add(stream(a, b), uint8(7))
	f.Add(stream(a)[:10], uint8(3))
	f.Add(binary.LittleEndian.AppendUint32(stream(a), 0), uint8(0))
	f.Add(binary.LittleEndian.AppendUint32(nil, MaxEnvelopeBytes+1), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		r := &recordingReader{data: data, step: int(step)}
		fr := NewFrameReader(r)
		at := 0 // where the next frame's prefix starts in data
		for {
			has := fr.HasFrame()
			asked := len(r.asked)
			frame, err := fr.ReadFrame()
			if has && len(r.asked) != asked {
				t.Fatalf("HasFrame was true, yet ReadFrame read (at %d)", at)
			}
			if !has && len(r.asked) == asked {
				t.Fatalf("HasFrame was false, yet ReadFrame did not read (at %d): %v", at, err)
			}
			if err != nil {
				if len(data)-at >= FrameHeaderLen {
					n := int(binary.LittleEndian.Uint32(data[at:]))
					valid := n > 0 && n <= MaxEnvelopeBytes
					if valid && len(data)-at >= FrameHeaderLen+n {
						t.Fatalf("a whole frame at %d was refused: %v", at, err)
					}
					if !valid && !errors.Is(err, ErrFrameLength) {
						t.Fatalf("length %d at %d: %v", n, at, err)
					}
				}
				return
			}
			n := int(binary.LittleEndian.Uint32(data[at:]))
			if !bytes.Equal(frame, data[at+FrameHeaderLen:at+FrameHeaderLen+n]) {
				t.Fatalf("frame at %d differs from the stream", at)
			}
			at += FrameHeaderLen + n
		}
	})
}
