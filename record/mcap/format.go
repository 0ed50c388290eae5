package mcap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Magic opens and closes every MCAP file: 0x89 "MCAP" '0' "\r\n".
var Magic = [8]byte{0x89, 'M', 'C', 'A', 'P', '0', '\r', '\n'}

// Record opcodes.
const (
	opHeader          = 0x01
	opFooter          = 0x02
	opSchema          = 0x03
	opChannel         = 0x04
	opMessage         = 0x05
	opChunk           = 0x06
	opMessageIndex    = 0x07
	opChunkIndex      = 0x08
	opAttachment      = 0x09
	opAttachmentIndex = 0x0A
	opStatistics      = 0x0B
	opMetadata        = 0x0C
	opMetadataIndex   = 0x0D
	opSummaryOffset   = 0x0E
	opDataEnd         = 0x0F
)

// Compression names for chunks.
const (
	CompressionNone = ""
	CompressionZstd = "zstd"
)

const (
	recordHeaderLen = 1 + 8         // opcode, content length
	footerLen       = 1 + 8 + 20    // a footer record, whole
	dataEndLen      = 1 + 8 + 4     // a data end record, whole
	minFileLen      = 8 + 9 + 8     // magic, an empty header record's prefix, magic
	maxChunkLen     = 1 << 30       // the largest uncompressed chunk this reader accepts
	messagePrefix   = 2 + 4 + 8 + 8 // channel, sequence, log time, publish time
)

// Header is the file's first record.
type Header struct {
	Profile string
	Library string
}

// Schema describes how a channel's messages are encoded. ID 0 is reserved
// for "no schema".
type Schema struct {
	ID       uint16
	Name     string
	Encoding string
	Data     []byte
}

// Channel is a stream of messages: a topic with its encoding and metadata.
type Channel struct {
	ID              uint16
	SchemaID        uint16
	Topic           string
	MessageEncoding string
	Metadata        map[string]string
}

// Message is one message. From a Reader, Data aliases the file's mapping or
// a decompressed chunk: copy it to keep it past the Reader's Close.
type Message struct {
	ChannelID   uint16
	Sequence    uint32
	LogTime     uint64 // nanoseconds, by convention since the Unix epoch
	PublishTime uint64
	Data        []byte
}

// Statistics is the summary's count of the file's contents.
type Statistics struct {
	MessageCount         uint64
	SchemaCount          uint16
	ChannelCount         uint32
	AttachmentCount      uint32
	MetadataCount        uint32
	ChunkCount           uint32
	MessageStartTime     uint64
	MessageEndTime       uint64
	ChannelMessageCounts map[uint16]uint64
}

// ChunkIndex locates one chunk and its message indexes.
type ChunkIndex struct {
	MessageStartTime    uint64
	MessageEndTime      uint64
	ChunkStartOffset    uint64
	ChunkLength         uint64
	MessageIndexOffsets map[uint16]uint64
	MessageIndexLength  uint64
	Compression         string
	CompressedSize      uint64
	UncompressedSize    uint64
}

// Metadata is a named map of strings, stored in the data section.
type Metadata struct {
	Name     string
	Metadata map[string]string
}

// MetadataIndex locates a Metadata record.
type MetadataIndex struct {
	Offset uint64
	Length uint64
	Name   string
}

// Why a file could not be read, matched with errors.Is on an *Error.
var (
	// ErrNotMCAP: the file does not start with the MCAP magic.
	ErrNotMCAP = errors.New("not an MCAP file")
	// ErrTruncated: the file ends inside a record (a recording that was not
	// finished ends so, in its last chunk).
	ErrTruncated = errors.New("truncated MCAP file")
	// ErrCorrupt: a record's content contradicts the format.
	ErrCorrupt = errors.New("corrupt MCAP file")
	// ErrCRC: a chunk, the data section or the summary does not match its CRC.
	ErrCRC = errors.New("MCAP CRC mismatch")
	// ErrUnsupported: valid MCAP this reader cannot decode (lz4 chunks, a
	// chunk over 1 GiB, another major version).
	ErrUnsupported = errors.New("unsupported MCAP content")
	// ErrNoSummary: the file has no summary section (Summary only).
	ErrNoSummary = errors.New("MCAP file has no summary")
)

// Error reports bad input at a place in a file.
type Error struct {
	File   string
	Offset int64 // of the record at fault, from the start of the file
	Err    error // one of the Err values above
	Detail string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: offset %d: %v: %s", e.File, e.Offset, e.Err, e.Detail)
}

func (e *Error) Unwrap() error { return e.Err }

// Encoding: little-endian integers; strings and byte arrays with a uint32
// length; maps and arrays with a uint32 length in bytes.

func appendU16(b []byte, v uint16) []byte { return binary.LittleEndian.AppendUint16(b, v) }
func appendU32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }
func appendU64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }

func appendString(b []byte, s string) []byte {
	b = appendU32(b, uint32(len(s)))
	return append(b, s...)
}

func appendBytes32(b []byte, p []byte) []byte {
	b = appendU32(b, uint32(len(p)))
	return append(b, p...)
}

// appendStringMap writes m with sorted keys, so a file's bytes do not
// depend on map order.
func appendStringMap(b []byte, m map[string]string) []byte {
	at := len(b)
	b = appendU32(b, 0)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b = appendString(b, k)
		b = appendString(b, m[k])
	}
	binary.LittleEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	return b
}

// beginRecord appends an opcode and a length to patch with endRecord.
func beginRecord(b []byte, op byte) ([]byte, int) {
	b = appendU64(append(b, op), 0)
	return b, len(b)
}

func endRecord(b []byte, start int) []byte {
	binary.LittleEndian.PutUint64(b[start-8:], uint64(len(b)-start))
	return b
}

// dec reads a record's content; any read past its end marks it bad and
// returns zero values, so a parser checks once at the end.
type dec struct {
	b   []byte
	i   int
	bad bool
}

func (d *dec) take(n uint64) []byte {
	if d.bad || n > uint64(len(d.b)-d.i) {
		d.bad = true
		return nil
	}
	p := d.b[d.i : d.i+int(n)]
	d.i += int(n)
	return p
}

func (d *dec) u16() uint16 {
	if p := d.take(2); p != nil {
		return binary.LittleEndian.Uint16(p)
	}
	return 0
}

func (d *dec) u32() uint32 {
	if p := d.take(4); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (d *dec) u64() uint64 {
	if p := d.take(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

func (d *dec) str() string     { return string(d.take(uint64(d.u32()))) }
func (d *dec) bytes32() []byte { return d.take(uint64(d.u32())) }
func (d *dec) rest() []byte    { return d.take(uint64(len(d.b) - d.i)) }
func (d *dec) sub32() *dec     { return &dec{b: d.bytes32(), bad: d.bad} }
func (d *dec) done() bool      { return d.i >= len(d.b) }

func (d *dec) stringMap() map[string]string {
	s := d.sub32()
	m := map[string]string{}
	for !s.bad && !s.done() {
		k := s.str()
		m[k] = s.str()
	}
	d.bad = d.bad || s.bad
	return m
}
