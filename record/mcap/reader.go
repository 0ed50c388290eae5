package mcap

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"os"
	"reflect"
	"sync"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// Reader reads one MCAP file held in memory. It is not safe for concurrent
// use, but several Readers may share one file's bytes.
type Reader struct {
	// Name is the file's name in errors.
	Name   string
	Header Header
	// VerifyDataCRC makes Messages check the data section's CRC when it
	// reaches the data end record: one more pass over the file. Chunk CRCs
	// are always checked.
	VerifyDataCRC bool

	data      []byte
	dataStart int64 // the first record after the header
	unmap     func() error
}

// maxWindow is the largest zstd window accepted beyond a chunk's own size:
// encoders use at most 8 MiB at their usual levels.
const maxWindow = 16 << 20

// zstdDecoder is shared by every Reader: DecodeAll may run concurrently,
// and a decoder's buffers are worth keeping.
var zstdDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(4), zstd.WithDecoderMaxMemory(maxChunkLen))
})

// NewReader reads the magic and the header record of the file data, which
// name names in errors.
func NewReader(data []byte, name string) (*Reader, error) {
	r := &Reader{Name: name, data: data}
	if len(data) < len(Magic) || !bytes.Equal(data[:len(Magic)], Magic[:]) {
		if len(data) >= 6 && bytes.Equal(data[:5], Magic[:5]) {
			return nil, r.fail(5, ErrUnsupported, "MCAP major version %q; this reader knows '0'", data[5])
		}
		return nil, r.fail(0, ErrNotMCAP, "the file does not start with the MCAP magic bytes")
	}
	op, content, err := r.record(int64(len(Magic)))
	if err != nil {
		return nil, err
	}
	if op != opHeader {
		return nil, r.fail(8, ErrCorrupt, "the first record is opcode 0x%02x, not a header", op)
	}
	d := dec{b: content}
	r.Header = Header{Profile: d.str(), Library: d.str()}
	if d.bad {
		return nil, r.fail(8, ErrCorrupt, "the header record is shorter than its fields")
	}
	r.dataStart = int64(len(Magic)) + recordHeaderLen + int64(len(content))
	return r, nil
}

// Open maps the file at path read-only and reads its header. Close unmaps
// it; the bytes of every Message it returned go with it.
func Open(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	size := fi.Size()
	if size == 0 {
		return nil, &Error{File: path, Err: ErrNotMCAP, Detail: "the file is empty"}
	}
	if int64(int(size)) != size {
		return nil, fmt.Errorf("%s: too large to map", path)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%s: map: %w", path, err)
	}
	_ = unix.Madvise(data, unix.MADV_SEQUENTIAL) // a hint: readahead for a disk-backed file
	r, err := NewReader(data, path)
	if err != nil {
		unix.Munmap(data)
		return nil, err
	}
	r.unmap = func() error { return unix.Munmap(data) }
	return r, nil
}

// Close releases the mapping Open made. Idempotent.
func (r *Reader) Close() error {
	if u := r.unmap; u != nil {
		r.unmap = nil
		return u()
	}
	return nil
}

// Size is the file's length.
func (r *Reader) Size() int64 { return int64(len(r.data)) }

func (r *Reader) fail(off int64, kind error, format string, args ...any) *Error {
	return &Error{File: r.Name, Offset: off, Err: kind, Detail: fmt.Sprintf(format, args...)}
}

// record returns the record at off, which must lie within the file.
func (r *Reader) record(off int64) (byte, []byte, error) {
	size := int64(len(r.data))
	if off+recordHeaderLen > size {
		return 0, nil, r.fail(off, ErrTruncated, "the file ends inside a record's opcode and length (the recording was not finished)")
	}
	op := r.data[off]
	n := uint64(0)
	for i := range 8 {
		n |= uint64(r.data[off+1+int64(i)]) << (8 * i)
	}
	if rest := uint64(size - off - recordHeaderLen); n > rest {
		what := "a record"
		if op == opChunk {
			what = "a chunk"
		}
		return 0, nil, r.fail(off, ErrTruncated, "%s of %d bytes runs %d bytes past the end of the file (the recording was not finished)", what, n, n-rest)
	}
	start := off + recordHeaderLen
	return op, r.data[start : start+int64(n)], nil
}

// Iterator walks the data section's messages in file order.
type Iterator struct {
	r        *Reader
	pos      int64
	schemas  map[uint16]*Schema
	channels map[uint16]*Channel
	pending  []Message
	next     int
	cur      *Message
	curOff   int64
	chunkOff int64
	err      error
	done     bool
}

// Messages starts an iteration after the header.
func (r *Reader) Messages() *Iterator {
	return &Iterator{r: r, pos: r.dataStart, schemas: map[uint16]*Schema{}, channels: map[uint16]*Channel{}}
}

// Message is the current message, valid until the Reader is closed.
func (it *Iterator) Message() *Message { return it.cur }

// Offset is the file offset of the current message's record, or of the
// chunk that holds it.
func (it *Iterator) Offset() int64 { return it.curOff }

// Channel returns a channel defined so far, or nil.
func (it *Iterator) Channel(id uint16) *Channel { return it.channels[id] }

// Schema returns a schema defined so far, or nil.
func (it *Iterator) Schema(id uint16) *Schema { return it.schemas[id] }

// Err is why the iteration stopped early, or nil at the data's end. It is
// an *Error for bad input.
func (it *Iterator) Err() error { return it.err }

// Next moves to the next message and reports whether there is one. The
// messages of a chunk are returned only once the whole chunk has been
// checked.
func (it *Iterator) Next() bool {
	for {
		if it.next < len(it.pending) {
			it.cur = &it.pending[it.next]
			it.curOff = it.chunkOff
			it.next++
			return true
		}
		if it.done || it.err != nil {
			it.cur = nil
			return false
		}
		it.step()
		if it.cur != nil {
			return true
		}
	}
}

// step reads one top-level record: a message outside chunks becomes cur,
// a chunk fills pending.
func (it *Iterator) step() {
	it.cur = nil
	r, off := it.r, it.pos
	if off == int64(len(r.data)) {
		it.err = r.fail(off, ErrTruncated, "the file ends without a data end or footer record (the recording was not finished)")
		return
	}
	op, content, err := r.record(off)
	if err != nil {
		it.err = err
		return
	}
	it.pos = off + recordHeaderLen + int64(len(content))
	switch op {
	case opHeader:
		it.err = r.fail(off, ErrCorrupt, "a second header record")
	case opSchema, opChannel:
		it.err = it.define(op, content, off)
	case opMessage:
		m, err := it.message(content, off)
		if err != nil {
			it.err = err
			return
		}
		it.pending, it.next = it.pending[:0], 0
		it.cur, it.curOff = &m, off
	case opChunk:
		it.err = it.chunk(content, off)
	case opDataEnd:
		it.done = true
		it.err = it.dataEnd(content, off)
	case opFooter:
		it.done = true
	}
	// Every other record (indexes, attachments, metadata, statistics, and
	// opcodes this reader does not know) is skipped, as the spec asks.
}

func (it *Iterator) define(op byte, content []byte, off int64) error {
	r := it.r
	d := dec{b: content}
	if op == opSchema {
		s := &Schema{ID: d.u16(), Name: d.str(), Encoding: d.str(), Data: d.bytes32()}
		switch old := it.schemas[s.ID]; {
		case d.bad:
			return r.fail(off, ErrCorrupt, "a schema record is shorter than its fields")
		case s.ID == 0:
			return r.fail(off, ErrCorrupt, "a schema with the reserved id 0")
		case old != nil && (old.Name != s.Name || old.Encoding != s.Encoding || !bytes.Equal(old.Data, s.Data)):
			return r.fail(off, ErrCorrupt, "schema %d is defined twice, differently", s.ID)
		}
		it.schemas[s.ID] = s
		return nil
	}
	c := &Channel{ID: d.u16(), SchemaID: d.u16(), Topic: d.str(), MessageEncoding: d.str(), Metadata: d.stringMap()}
	switch old := it.channels[c.ID]; {
	case d.bad:
		return r.fail(off, ErrCorrupt, "a channel record is shorter than its fields")
	case c.SchemaID != 0 && it.schemas[c.SchemaID] == nil:
		return r.fail(off, ErrCorrupt, "channel %d (%q) names schema %d, which is not defined before it", c.ID, c.Topic, c.SchemaID)
	case old != nil && !reflect.DeepEqual(old, c):
		return r.fail(off, ErrCorrupt, "channel %d is defined twice, differently", c.ID)
	}
	it.channels[c.ID] = c
	return nil
}

func (it *Iterator) message(content []byte, off int64) (Message, error) {
	d := dec{b: content}
	m := Message{ChannelID: d.u16(), Sequence: d.u32(), LogTime: d.u64(), PublishTime: d.u64()}
	m.Data = d.rest()
	if d.bad {
		return m, it.r.fail(off, ErrCorrupt, "a message record is shorter than its fields")
	}
	if it.channels[m.ChannelID] == nil {
		return m, it.r.fail(off, ErrCorrupt, "a message on channel %d, which is not defined before it", m.ChannelID)
	}
	return m, nil
}

// chunk checks a chunk whole (length, decompression, CRC, every record's
// framing and channel) and only then queues its messages.
func (it *Iterator) chunk(content []byte, off int64) error {
	r := it.r
	if len(content) == 0 {
		return r.fail(off, ErrTruncated, "an unfinished chunk: its header was never completed (the recording was not finished)")
	}
	d := dec{b: content}
	d.u64() // message start and end times: not needed to read
	d.u64()
	usize, ucrc := d.u64(), d.u32()
	compression := d.str()
	recs := d.take(d.u64())
	if d.bad || !d.done() {
		return r.fail(off, ErrCorrupt, "the chunk's fields do not match its length")
	}
	var data []byte
	switch compression {
	case CompressionNone:
		if usize != uint64(len(recs)) {
			return r.fail(off, ErrCorrupt, "an uncompressed chunk of %d bytes says it holds %d", len(recs), usize)
		}
		data = recs
	case CompressionZstd:
		if usize > maxChunkLen {
			return r.fail(off, ErrUnsupported, "a chunk of %d bytes uncompressed; this reader takes at most %d", usize, maxChunkLen)
		}
		// The frame header says how much memory decoding takes: refuse a
		// window or a content size out of proportion to the chunk before
		// the decoder allocates for it.
		var fh zstd.Header
		if err := fh.Decode(recs); err != nil {
			return r.fail(off, ErrCorrupt, "the chunk's zstd frame header: %v", err)
		}
		if fh.WindowSize > max(maxWindow, usize) || (fh.HasFCS && fh.FrameContentSize > usize) {
			return r.fail(off, ErrCorrupt, "the chunk's zstd frame wants a %d-byte window for %d bytes", fh.WindowSize, usize)
		}
		zdec, err := zstdDecoder()
		if err != nil {
			return err
		}
		// A fresh buffer per chunk: messages handed out from the previous
		// chunk stay valid.
		dst := make([]byte, 0, min(usize, 64<<20, uint64(len(recs))*64+4096))
		out, err := zdec.DecodeAll(recs, dst)
		if err != nil {
			return r.fail(off, ErrCorrupt, "the chunk does not decompress: %v", err)
		}
		if uint64(len(out)) != usize {
			return r.fail(off, ErrCorrupt, "the chunk decompresses to %d bytes, not the %d it says", len(out), usize)
		}
		data = out
	default:
		return r.fail(off, ErrUnsupported, "chunk compression %q (this reader knows none and zstd)", compression)
	}
	if ucrc != 0 {
		if got := crc32.ChecksumIEEE(data); got != ucrc {
			return r.fail(off, ErrCRC, "the chunk's records have CRC %08x, the chunk says %08x", got, ucrc)
		}
	}
	it.pending, it.next, it.chunkOff = it.pending[:0], 0, off
	for p := 0; p < len(data); {
		inner := off + int64(p) // for errors: the chunk's offset plus the record's place in it
		if len(data)-p < recordHeaderLen {
			return r.fail(inner, ErrCorrupt, "chunk at %d: a record header cut off at byte %d of its records", off, p)
		}
		op := data[p]
		n := uint64(0)
		for i := range 8 {
			n |= uint64(data[p+1+i]) << (8 * i)
		}
		p += recordHeaderLen
		if n > uint64(len(data)-p) {
			return r.fail(off, ErrCorrupt, "chunk at %d: a record at byte %d of its records runs past them", off, p-recordHeaderLen)
		}
		rec := data[p : p+int(n)]
		p += int(n)
		var err error
		switch op {
		case opSchema, opChannel:
			err = it.define(op, rec, off)
		case opMessage:
			var m Message
			if m, err = it.message(rec, off); err == nil {
				it.pending = append(it.pending, m)
			}
		}
		if err != nil {
			it.pending = it.pending[:0]
			return err
		}
	}
	return nil
}

func (it *Iterator) dataEnd(content []byte, off int64) error {
	r := it.r
	d := dec{b: content}
	crc := d.u32()
	if d.bad {
		return r.fail(off, ErrCorrupt, "a data end record is shorter than its CRC")
	}
	if r.VerifyDataCRC && crc != 0 {
		if got := crc32.ChecksumIEEE(r.data[:off]); got != crc {
			return r.fail(off, ErrCRC, "the data section has CRC %08x, the data end says %08x", got, crc)
		}
	}
	return nil
}

// Summary is a file's summary section.
type Summary struct {
	Schemas         map[uint16]*Schema
	Channels        map[uint16]*Channel
	Statistics      *Statistics // nil if the file has none
	ChunkIndexes    []ChunkIndex
	MetadataIndexes []MetadataIndex
}

// Summary reads the summary section through the footer, checking its CRC,
// without reading the data section. A file without one (a recording that
// did not finish, or a writer that wrote none) gives an error matching
// ErrNoSummary or ErrTruncated.
func (r *Reader) Summary() (*Summary, error) {
	size := int64(len(r.data))
	fo := size - int64(len(Magic)) - footerLen
	if fo < int64(len(Magic)) || !bytes.Equal(r.data[size-int64(len(Magic)):], Magic[:]) {
		return nil, r.fail(size, ErrTruncated, "the file does not end with a footer and the MCAP magic (the recording was not finished)")
	}
	op, content, err := r.record(fo)
	if err != nil || op != opFooter || len(content) != 20 {
		return nil, r.fail(fo, ErrCorrupt, "no footer record before the closing magic")
	}
	d := dec{b: content}
	ss, sos, crc := int64(d.u64()), int64(d.u64()), d.u32()
	if ss == 0 {
		return nil, r.fail(fo, ErrNoSummary, "the footer points to no summary")
	}
	if ss < int64(len(Magic)) || ss > fo || (sos != 0 && (sos < ss || sos > fo)) {
		return nil, r.fail(fo, ErrCorrupt, "the footer's summary offsets %d and %d lie outside the file", ss, sos)
	}
	if crc != 0 {
		if got := crc32.ChecksumIEEE(r.data[ss : fo+recordHeaderLen+16]); got != crc {
			return nil, r.fail(ss, ErrCRC, "the summary has CRC %08x, the footer says %08x", got, crc)
		}
	}
	end := fo
	if sos != 0 {
		end = sos
	}
	s := &Summary{Schemas: map[uint16]*Schema{}, Channels: map[uint16]*Channel{}}
	it := &Iterator{r: r, schemas: s.Schemas, channels: s.Channels}
	for off := ss; off < end; {
		op, content, err := r.record(off)
		if err != nil {
			return nil, err
		}
		if off+recordHeaderLen+int64(len(content)) > end {
			return nil, r.fail(off, ErrCorrupt, "a summary record runs past the summary")
		}
		d := dec{b: content}
		switch op {
		case opSchema, opChannel:
			if err := it.define(op, content, off); err != nil {
				return nil, err
			}
		case opStatistics:
			st := &Statistics{MessageCount: d.u64(), SchemaCount: d.u16(), ChannelCount: d.u32(), AttachmentCount: d.u32(),
				MetadataCount: d.u32(), ChunkCount: d.u32(), MessageStartTime: d.u64(), MessageEndTime: d.u64(),
				ChannelMessageCounts: map[uint16]uint64{}}
			m := d.sub32()
			for !m.bad && !m.done() {
				st.ChannelMessageCounts[m.u16()] = m.u64()
			}
			if d.bad || m.bad {
				return nil, r.fail(off, ErrCorrupt, "a statistics record is shorter than its fields")
			}
			s.Statistics = st
		case opChunkIndex:
			c := ChunkIndex{MessageStartTime: d.u64(), MessageEndTime: d.u64(), ChunkStartOffset: d.u64(), ChunkLength: d.u64(),
				MessageIndexOffsets: map[uint16]uint64{}}
			m := d.sub32()
			for !m.bad && !m.done() {
				c.MessageIndexOffsets[m.u16()] = m.u64()
			}
			c.MessageIndexLength, c.Compression, c.CompressedSize, c.UncompressedSize = d.u64(), d.str(), d.u64(), d.u64()
			if d.bad || m.bad {
				return nil, r.fail(off, ErrCorrupt, "a chunk index record is shorter than its fields")
			}
			s.ChunkIndexes = append(s.ChunkIndexes, c)
		case opMetadataIndex:
			mi := MetadataIndex{Offset: d.u64(), Length: d.u64(), Name: d.str()}
			if d.bad {
				return nil, r.fail(off, ErrCorrupt, "a metadata index record is shorter than its fields")
			}
			s.MetadataIndexes = append(s.MetadataIndexes, mi)
		}
		off += recordHeaderLen + int64(len(content))
	}
	return s, nil
}

// Metadata reads the metadata record an index entry points to.
func (r *Reader) Metadata(mi MetadataIndex) (*Metadata, error) {
	off := int64(mi.Offset)
	if mi.Offset > uint64(len(r.data)) || off < int64(len(Magic)) {
		return nil, r.fail(int64(len(r.data)), ErrCorrupt, "a metadata index points to offset %d, outside the file", mi.Offset)
	}
	op, content, err := r.record(off)
	if err != nil {
		return nil, err
	}
	if op != opMetadata || uint64(len(content))+recordHeaderLen != mi.Length {
		return nil, r.fail(off, ErrCorrupt, "the metadata index for %q points to no metadata record of its length", mi.Name)
	}
	d := dec{b: content}
	m := &Metadata{Name: d.str(), Metadata: d.stringMap()}
	if d.bad {
		return nil, r.fail(off, ErrCorrupt, "a metadata record is shorter than its fields")
	}
	return m, nil
}
