package mcap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"

	"github.com/klauspost/compress/zstd"
)

// File is what a Writer writes to: in order, plus WriteAt to fill in a
// chunk's header once the chunk is complete. *os.File is one (not opened
// with O_APPEND, which refuses WriteAt).
type File interface {
	io.Writer
	io.WriterAt
}

// WriterOptions configure a Writer. The zero value writes uncompressed
// 4 MiB chunks with CRCs.
type WriterOptions struct {
	// Profile and Library fill the header record.
	Profile, Library string
	// Compression of chunks: CompressionNone or CompressionZstd.
	Compression string
	// ChunkSize is the uncompressed size at which WriteMessages ends a chunk
	// after the messages it was given [4 MiB]. A chunk holds whole calls, so
	// one call's messages are never split between chunks.
	ChunkSize int64
	// NoCRC leaves the chunk and data section CRCs zero ("not computed"),
	// sparing one pass over the bytes. The summary's CRC is always written.
	NoCRC bool
}

const (
	defaultChunkSize = 4 << 20
	bufferLimit      = 64 << 10 // small records gather up to this much per write
	directWrite      = 16 << 10 // a slice this long is written to the file as it is
)

// Writer writes one MCAP file. It is not safe for concurrent use.
type Writer struct {
	f       File
	opts    WriterOptions
	buf     []byte
	pos     int64 // the file's logical length: written bytes and buf
	err     error // the first failure; every later call returns it
	crcs    bool
	dataCRC uint32
	closed  bool

	schemas  []Schema
	channels map[uint16]*Channel
	stats    Statistics

	// The open chunk, if any.
	open       bool
	chunkStart int64
	chunkHdr   []byte
	usize      int64
	ucrc       uint32
	bodyLen    int64
	bodyCRC    uint32
	startTime  uint64
	endTime    uint64
	nmsg       int
	index      map[uint16][]uint64 // channel -> (log time, offset) pairs
	enc        *zstd.Encoder

	chunkIndexes []ChunkIndex
	metaIndexes  []MetadataIndex
	scratch      []byte
}

// NewWriter writes the magic and the header record to f, which should be
// empty.
func NewWriter(f File, opts WriterOptions) (*Writer, error) {
	if opts.ChunkSize <= 0 {
		opts.ChunkSize = defaultChunkSize
	}
	w := &Writer{f: f, opts: opts, crcs: !opts.NoCRC, channels: map[uint16]*Channel{}, index: map[uint16][]uint64{}}
	w.stats.ChannelMessageCounts = map[uint16]uint64{}
	switch opts.Compression {
	case CompressionNone:
	case CompressionZstd:
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
		if err != nil {
			return nil, err
		}
		w.enc = enc
	default:
		return nil, fmt.Errorf("mcap: unknown compression %q (want none or zstd)", opts.Compression)
	}
	b := append([]byte(nil), Magic[:]...)
	b, at := beginRecord(b, opHeader)
	b = appendString(b, opts.Profile)
	b = appendString(b, opts.Library)
	w.emit(endRecord(b, at))
	return w, w.err
}

// Size is the file's length so far, buffered bytes included.
func (w *Writer) Size() int64 { return w.pos }

// Statistics are the counts so far.
func (w *Writer) Statistics() Statistics { return w.stats }

// AddSchema writes a schema record and returns its id (from 1).
func (w *Writer) AddSchema(name, encoding string, data []byte) (uint16, error) {
	if err := w.usable(); err != nil {
		return 0, err
	}
	if len(w.schemas) == 0xffff {
		return 0, errors.New("mcap: too many schemas")
	}
	s := Schema{ID: uint16(len(w.schemas) + 1), Name: name, Encoding: encoding, Data: slices.Clone(data)}
	w.schemas = append(w.schemas, s)
	w.stats.SchemaCount++
	w.inChunk(appendSchema(w.scratch[:0], &s))
	return s.ID, w.err
}

// AddChannel writes a channel record and returns its id (from 1).
// schemaID is 0 for a channel without a schema.
func (w *Writer) AddChannel(schemaID uint16, topic, messageEncoding string, metadata map[string]string) (uint16, error) {
	if err := w.usable(); err != nil {
		return 0, err
	}
	if int(schemaID) > len(w.schemas) {
		return 0, fmt.Errorf("mcap: no schema %d", schemaID)
	}
	if len(w.channels) == 0xfffe {
		return 0, errors.New("mcap: too many channels")
	}
	c := &Channel{ID: uint16(len(w.channels) + 1), SchemaID: schemaID, Topic: topic, MessageEncoding: messageEncoding, Metadata: metadata}
	w.channels[c.ID] = c
	w.stats.ChannelCount++
	w.inChunk(appendChannel(w.scratch[:0], c))
	return c.ID, w.err
}

// WriteMessages writes msgs into the open chunk (opening one first if
// needed), then ends the chunk if it has reached ChunkSize. The messages of
// one call always share a chunk. Data is written as it is: a long slice goes
// to the file in one write, without being copied.
func (w *Writer) WriteMessages(msgs ...Message) error {
	if err := w.usable(); err != nil {
		return err
	}
	for i := range msgs {
		if w.channels[msgs[i].ChannelID] == nil {
			return fmt.Errorf("mcap: no channel %d", msgs[i].ChannelID)
		}
	}
	for i := range msgs {
		m := &msgs[i]
		if !w.open {
			w.openChunk()
		}
		var h [recordHeaderLen + messagePrefix]byte
		h[0] = opMessage
		binary.LittleEndian.PutUint64(h[1:], uint64(messagePrefix+len(m.Data)))
		binary.LittleEndian.PutUint16(h[9:], m.ChannelID)
		binary.LittleEndian.PutUint32(h[11:], m.Sequence)
		binary.LittleEndian.PutUint64(h[15:], m.LogTime)
		binary.LittleEndian.PutUint64(h[23:], m.PublishTime)
		w.index[m.ChannelID] = append(w.index[m.ChannelID], m.LogTime, uint64(w.usize))
		w.records(h[:])
		w.records(m.Data)
		if w.nmsg == 0 || m.LogTime < w.startTime {
			w.startTime = m.LogTime
		}
		if w.nmsg == 0 || m.LogTime > w.endTime {
			w.endTime = m.LogTime
		}
		w.nmsg++
		if w.stats.MessageCount == 0 || m.LogTime < w.stats.MessageStartTime {
			w.stats.MessageStartTime = m.LogTime
		}
		if m.LogTime > w.stats.MessageEndTime {
			w.stats.MessageEndTime = m.LogTime
		}
		w.stats.MessageCount++
		w.stats.ChannelMessageCounts[m.ChannelID]++
	}
	if w.open && w.usize >= w.opts.ChunkSize {
		w.closeChunk()
	}
	return w.err
}

// AddMetadata ends the open chunk and writes a metadata record, which the
// summary indexes by name.
func (w *Writer) AddMetadata(name string, metadata map[string]string) error {
	if err := w.usable(); err != nil {
		return err
	}
	w.closeChunk()
	start := w.pos
	b, at := beginRecord(w.scratch[:0], opMetadata)
	b = appendString(b, name)
	b = appendStringMap(b, metadata)
	b = endRecord(b, at)
	w.emit(b)
	w.scratch = b
	w.metaIndexes = append(w.metaIndexes, MetadataIndex{Offset: uint64(start), Length: uint64(len(b)), Name: name})
	w.stats.MetadataCount++
	return w.err
}

// Flush ends the open chunk and hands every buffered byte to the file, so
// that a reader (or whoever finds the file after a crash) sees everything
// written so far.
func (w *Writer) Flush() error {
	if err := w.usable(); err != nil {
		return err
	}
	w.closeChunk()
	w.flush()
	return w.err
}

// Close ends the open chunk and writes the data end, the summary, the
// summary offsets and the footer. It does not close the file.
func (w *Writer) Close() error {
	if w.closed {
		return w.err
	}
	w.closeChunk()
	w.closed = true
	if w.err != nil {
		return w.err
	}
	var crc uint32
	if w.crcs {
		crc = w.dataCRC
	}
	b, at := beginRecord(w.scratch[:0], opDataEnd)
	b = endRecord(appendU32(b, crc), at)
	w.raw(b)

	summaryStart := w.pos
	var s []byte
	type group struct {
		op          byte
		start, size uint64
	}
	var groups []group
	mark := func(op byte, from int) {
		if len(s) > from {
			groups = append(groups, group{op, uint64(summaryStart) + uint64(from), uint64(len(s) - from)})
		}
	}
	from := len(s)
	for i := range w.schemas {
		s = appendSchema(s, &w.schemas[i])
	}
	mark(opSchema, from)
	from = len(s)
	ids := make([]uint16, 0, len(w.channels))
	for id := range w.channels {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		s = appendChannel(s, w.channels[id])
	}
	mark(opChannel, from)
	from = len(s)
	s = appendStatistics(s, &w.stats)
	mark(opStatistics, from)
	from = len(s)
	for i := range w.chunkIndexes {
		s = appendChunkIndex(s, &w.chunkIndexes[i])
	}
	mark(opChunkIndex, from)
	from = len(s)
	for _, m := range w.metaIndexes {
		s, at = beginRecord(s, opMetadataIndex)
		s = appendU64(s, m.Offset)
		s = appendU64(s, m.Length)
		s = endRecord(appendString(s, m.Name), at)
	}
	mark(opMetadataIndex, from)
	offsetStart := summaryStart + int64(len(s))
	for _, g := range groups {
		s, at = beginRecord(s, opSummaryOffset)
		s = append(s, g.op)
		s = appendU64(s, g.start)
		s = endRecord(appendU64(s, g.size), at)
	}
	s = appendU64(append(s, opFooter), 20)
	s = appendU64(s, uint64(summaryStart))
	s = appendU64(s, uint64(offsetStart))
	s = appendU32(s, crc32.ChecksumIEEE(s)) // from the summary's start through the footer's fields before it
	s = append(s, Magic[:]...)
	w.raw(s)
	w.flush()
	return w.err
}

func (w *Writer) usable() error {
	if w.err == nil && w.closed {
		return errors.New("mcap: writer closed")
	}
	return w.err
}

// raw appends p to the file: through the buffer, or straight to the file
// when p is long.
func (w *Writer) raw(p []byte) {
	if w.err != nil {
		return
	}
	if len(p) >= directWrite {
		w.flush()
		if w.err != nil {
			return
		}
		for len(p) > 0 && w.err == nil {
			k := min(len(p), writePiece)
			n, err := w.f.Write(p[:k])
			w.pos += int64(n)
			w.err = err
			p = p[k:]
		}
		return
	}
	w.buf = append(w.buf, p...)
	w.pos += int64(len(p))
	if len(w.buf) >= bufferLimit {
		w.flush()
	}
}

// writePiece bounds one write of a long record: the kernel copies a
// write whole before it lets another thread have the CPU, and consumers
// beside a recorder of large frames should not wait for a frame's copy.
const writePiece = 256 << 10

func (w *Writer) flush() {
	if w.err != nil || len(w.buf) == 0 {
		return
	}
	_, w.err = w.f.Write(w.buf)
	w.buf = w.buf[:0]
}

// emit writes a data-section record outside any chunk.
func (w *Writer) emit(p []byte) {
	if w.crcs {
		w.dataCRC = crc32.Update(w.dataCRC, crc32.IEEETable, p)
	}
	w.raw(p)
}

// inChunk writes a schema or channel record into the open chunk.
func (w *Writer) inChunk(rec []byte) {
	if !w.open {
		w.openChunk()
	}
	w.records(rec)
	w.scratch = rec
}

// records adds uncompressed bytes to the open chunk's records.
func (w *Writer) records(p []byte) {
	w.usize += int64(len(p))
	if w.crcs {
		w.ucrc = crc32.Update(w.ucrc, crc32.IEEETable, p)
	}
	if w.enc == nil {
		w.bodyLen += int64(len(p))
		w.raw(p)
		return
	}
	if _, err := w.enc.Write(p); err != nil && w.err == nil {
		w.err = err
	}
}

// body receives the encoder's output.
type body struct{ w *Writer }

func (b body) Write(p []byte) (int, error) {
	w := b.w
	w.bodyLen += int64(len(p))
	if w.crcs {
		w.bodyCRC = crc32.Update(w.bodyCRC, crc32.IEEETable, p)
	}
	w.raw(p)
	return len(p), w.err
}

// openChunk writes a chunk header whose record length is zero: until
// closeChunk fills it in, a reader sees an unfinished chunk and stops there.
func (w *Writer) openChunk() {
	h := append(w.chunkHdr[:0], opChunk)
	h = appendU64(h, 0) // record length
	h = appendU64(h, 0) // message start time
	h = appendU64(h, 0) // message end time
	h = appendU64(h, 0) // uncompressed size
	h = appendU32(h, 0) // uncompressed CRC
	h = appendString(h, w.opts.Compression)
	h = appendU64(h, 0) // records length
	w.chunkHdr = h
	w.open, w.chunkStart = true, w.pos
	w.usize, w.ucrc, w.bodyLen, w.bodyCRC = 0, 0, 0, 0
	w.nmsg, w.startTime, w.endTime = 0, 0, 0
	w.raw(h)
	if w.enc != nil {
		w.enc.Reset(body{w})
	}
}

func (w *Writer) closeChunk() {
	if !w.open || w.err != nil {
		return
	}
	w.open = false
	if w.enc != nil {
		if err := w.enc.Close(); err != nil {
			w.err = err
			return
		}
	} else {
		w.bodyCRC = w.ucrc
	}
	h := w.chunkHdr
	var ucrc uint32
	if w.crcs {
		ucrc = w.ucrc
	}
	binary.LittleEndian.PutUint64(h[1:], uint64(len(h)-recordHeaderLen)+uint64(w.bodyLen))
	binary.LittleEndian.PutUint64(h[9:], w.startTime)
	binary.LittleEndian.PutUint64(h[17:], w.endTime)
	binary.LittleEndian.PutUint64(h[25:], uint64(w.usize))
	binary.LittleEndian.PutUint32(h[33:], ucrc)
	binary.LittleEndian.PutUint64(h[len(h)-8:], uint64(w.bodyLen))
	if flushed := w.pos - int64(len(w.buf)); w.chunkStart >= flushed {
		copy(w.buf[w.chunkStart-flushed:], h)
	} else if _, err := w.f.WriteAt(h, w.chunkStart); err != nil {
		w.err = err
		return
	}
	if w.crcs {
		w.dataCRC = crc32.Update(w.dataCRC, crc32.IEEETable, h)
		w.dataCRC = crcCombine(w.dataCRC, w.bodyCRC, w.bodyLen)
	}
	ci := ChunkIndex{
		MessageStartTime: w.startTime, MessageEndTime: w.endTime,
		ChunkStartOffset: uint64(w.chunkStart), ChunkLength: uint64(len(h)) + uint64(w.bodyLen),
		MessageIndexOffsets: map[uint16]uint64{}, Compression: w.opts.Compression,
		CompressedSize: uint64(w.bodyLen), UncompressedSize: uint64(w.usize),
	}
	ids := make([]uint16, 0, len(w.index))
	for id, e := range w.index {
		if len(e) > 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	indexStart := w.pos
	for _, id := range ids {
		ci.MessageIndexOffsets[id] = uint64(w.pos)
		e := w.index[id]
		b, at := beginRecord(w.scratch[:0], opMessageIndex)
		b = appendU16(b, id)
		b = appendU32(b, uint32(len(e)*8))
		for _, v := range e {
			b = appendU64(b, v)
		}
		b = endRecord(b, at)
		w.emit(b)
		w.scratch = b
		w.index[id] = e[:0]
	}
	ci.MessageIndexLength = uint64(w.pos - indexStart)
	w.chunkIndexes = append(w.chunkIndexes, ci)
	w.stats.ChunkCount++
}

func appendSchema(b []byte, s *Schema) []byte {
	b, at := beginRecord(b, opSchema)
	b = appendU16(b, s.ID)
	b = appendString(b, s.Name)
	b = appendString(b, s.Encoding)
	return endRecord(appendBytes32(b, s.Data), at)
}

func appendChannel(b []byte, c *Channel) []byte {
	b, at := beginRecord(b, opChannel)
	b = appendU16(b, c.ID)
	b = appendU16(b, c.SchemaID)
	b = appendString(b, c.Topic)
	b = appendString(b, c.MessageEncoding)
	return endRecord(appendStringMap(b, c.Metadata), at)
}

func appendStatistics(b []byte, s *Statistics) []byte {
	b, at := beginRecord(b, opStatistics)
	b = appendU64(b, s.MessageCount)
	b = appendU16(b, s.SchemaCount)
	b = appendU32(b, s.ChannelCount)
	b = appendU32(b, s.AttachmentCount)
	b = appendU32(b, s.MetadataCount)
	b = appendU32(b, s.ChunkCount)
	b = appendU64(b, s.MessageStartTime)
	b = appendU64(b, s.MessageEndTime)
	b = appendU32(b, uint32(len(s.ChannelMessageCounts)*10))
	for _, id := range sortedKeys(s.ChannelMessageCounts) {
		b = appendU16(b, id)
		b = appendU64(b, s.ChannelMessageCounts[id])
	}
	return endRecord(b, at)
}

func appendChunkIndex(b []byte, c *ChunkIndex) []byte {
	b, at := beginRecord(b, opChunkIndex)
	b = appendU64(b, c.MessageStartTime)
	b = appendU64(b, c.MessageEndTime)
	b = appendU64(b, c.ChunkStartOffset)
	b = appendU64(b, c.ChunkLength)
	b = appendU32(b, uint32(len(c.MessageIndexOffsets)*10))
	for _, id := range sortedKeys(c.MessageIndexOffsets) {
		b = appendU16(b, id)
		b = appendU64(b, c.MessageIndexOffsets[id])
	}
	b = appendU64(b, c.MessageIndexLength)
	b = appendString(b, c.Compression)
	b = appendU64(b, c.CompressedSize)
	return endRecord(appendU64(b, c.UncompressedSize), at)
}

func sortedKeys(m map[uint16]uint64) []uint16 {
	ids := make([]uint16, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
