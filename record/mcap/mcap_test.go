package mcap

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
)

// memFile is a File in memory.
type memFile struct{ b []byte }

func (f *memFile) Write(p []byte) (int, error) { f.b = append(f.b, p...); return len(p), nil }

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > int64(len(f.b)) {
		return 0, errors.New("WriteAt past the end")
	}
	return copy(f.b[off:], p), nil
}

// sample writes a file with two channels and n messages, some long enough
// to go to the file directly, in groups of three.
func sample(t testing.TB, opts WriterOptions, n int) (*memFile, []Message) {
	t.Helper()
	f := &memFile{}
	w, err := NewWriter(f, opts)
	if err != nil {
		t.Fatal(err)
	}
	sid, err := w.AddSchema("s", "jsonschema", []byte(`{"type":"object"}`))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := w.AddChannel(sid, "a", "json", map[string]string{"k": "v"})
	b, _ := w.AddChannel(0, "b", "application/octet-stream", nil)
	var all []Message
	for i := 0; i < n; i += 3 {
		var group []Message
		for j := i; j < min(i+3, n); j++ {
			m := Message{ChannelID: a, Sequence: uint32(j), LogTime: uint64(1000 + j), PublishTime: uint64(1000 + j), Data: fmt.Appendf(nil, `{"i":%d}`, j)}
			if j%3 == 2 {
				m.ChannelID, m.Data = b, bytes.Repeat([]byte{byte(j)}, 20000+j)
			}
			group = append(group, m)
		}
		if err := w.WriteMessages(group...); err != nil {
			t.Fatal(err)
		}
		all = append(all, group...)
	}
	if err := w.AddMetadata("info", map[string]string{"x": "1"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return f, all
}

func readAll(t testing.TB, data []byte) ([]Message, error) {
	t.Helper()
	r, err := NewReader(data, "test.mcap")
	if err != nil {
		return nil, err
	}
	r.VerifyDataCRC = true
	var got []Message
	it := r.Messages()
	for it.Next() {
		m := *it.Message()
		m.Data = bytes.Clone(m.Data)
		got = append(got, m)
	}
	return got, it.Err()
}

func TestRoundTrip(t *testing.T) {
	for _, opts := range []WriterOptions{
		{},
		{Compression: CompressionZstd},
		{ChunkSize: 1},
		{ChunkSize: 50000, Compression: CompressionZstd},
		{NoCRC: true, ChunkSize: 30000},
	} {
		t.Run(fmt.Sprintf("%+v", opts), func(t *testing.T) {
			f, want := sample(t, opts, 40)
			got, err := readAll(t, f.b)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d messages, want %d", len(got), len(want))
			}
			for i := range want {
				if got[i].ChannelID != want[i].ChannelID || got[i].Sequence != want[i].Sequence || got[i].LogTime != want[i].LogTime || !bytes.Equal(got[i].Data, want[i].Data) {
					t.Fatalf("message %d differs", i)
				}
			}
			r, _ := NewReader(f.b, "test.mcap")
			s, err := r.Summary()
			if err != nil {
				t.Fatal(err)
			}
			st := s.Statistics
			if st.MessageCount != 40 || st.ChannelCount != 2 || st.SchemaCount != 1 || st.MetadataCount != 1 ||
				st.ChannelMessageCounts[1]+st.ChannelMessageCounts[2] != 40 || int(st.ChunkCount) != len(s.ChunkIndexes) ||
				st.MessageStartTime != 1000 || st.MessageEndTime != 1039 {
				t.Fatalf("statistics %+v", st)
			}
			if len(s.Channels) != 2 || s.Channels[1].Metadata["k"] != "v" || len(s.MetadataIndexes) != 1 {
				t.Fatalf("summary %+v", s)
			}
			md, err := r.Metadata(s.MetadataIndexes[0])
			if err != nil || md.Name != "info" || md.Metadata["x"] != "1" {
				t.Fatalf("metadata %+v %v", md, err)
			}
			// Every chunk index points to a chunk record of its length, and
			// every message index to a message index record.
			for _, ci := range s.ChunkIndexes {
				op, content, err := r.record(int64(ci.ChunkStartOffset))
				if err != nil || op != opChunk || uint64(len(content))+9 != ci.ChunkLength || ci.Compression != opts.Compression {
					t.Fatalf("chunk index %+v: op %d, %d bytes, %v", ci, op, len(content), err)
				}
				for _, off := range ci.MessageIndexOffsets {
					if op, _, err := r.record(int64(off)); err != nil || op != opMessageIndex {
						t.Fatalf("message index at %d: op %d %v", off, op, err)
					}
				}
			}
		})
	}
}

func TestCRCCombine(t *testing.T) {
	a, b := bytes.Repeat([]byte("flybus"), 1000), []byte("a second part of other length")
	for _, cut := range []int{0, 1, 7, 4096, len(a)} {
		x, y := a[:cut], append(a[cut:], b...)
		want := crc32.ChecksumIEEE(append(bytes.Clone(x), y...))
		if got := crcCombine(crc32.ChecksumIEEE(x), crc32.ChecksumIEEE(y), int64(len(y))); got != want {
			t.Fatalf("cut %d: %08x, want %08x", cut, got, want)
		}
	}
}

// A file cut anywhere reads as the messages of its complete chunks, then an
// error naming the file and an offset within it; never a panic, never a
// message of an incomplete chunk.
func TestTruncated(t *testing.T) {
	for _, comp := range []string{CompressionNone, CompressionZstd} {
		f, want := sample(t, WriterOptions{ChunkSize: 30000, Compression: comp}, 30)
		last := 0
		for cut := 0; cut < len(f.b); cut += 1 + cut/50 {
			got, err := readAll(t, f.b[:cut])
			if err == nil { // cut after the data end: the messages are all there
				if len(got) != len(want) {
					t.Fatalf("cut at %d of %d: %d messages and no error", cut, len(f.b), len(got))
				}
				continue
			}
			var e *Error
			if !errors.As(err, &e) || e.File != "test.mcap" || e.Offset < 0 || e.Offset > int64(cut) {
				t.Fatalf("cut at %d: %v", cut, err)
			}
			if cut > 100 && !errors.Is(err, ErrTruncated) {
				t.Fatalf("cut at %d: %v, want ErrTruncated", cut, err)
			}
			if len(got) < last || len(got)%3 != 0 && len(got) != len(want) {
				t.Fatalf("cut at %d: %d messages after %d", cut, len(got), last)
			}
			last = len(got)
		}
		if last == 0 {
			t.Fatal("no cut kept a chunk")
		}
	}
}

// A writer that is never closed (a crash) leaves a file whose flushed
// chunks are readable, and whose unfinished chunk is reported as such.
func TestUnfinishedChunk(t *testing.T) {
	f := &memFile{}
	w, _ := NewWriter(f, WriterOptions{ChunkSize: 1 << 30})
	ch, _ := w.AddChannel(0, "x", "raw", nil)
	w.WriteMessages(Message{ChannelID: ch, Data: []byte("kept")})
	w.Flush()
	w.WriteMessages(Message{ChannelID: ch, Data: bytes.Repeat([]byte("lost"), 10000)})
	w.flush()
	got, err := readAll(t, f.b)
	if len(got) != 1 || string(got[0].Data) != "kept" || !errors.Is(err, ErrTruncated) {
		t.Fatalf("%d messages, %v", len(got), err)
	}
	r, _ := NewReader(f.b, "x")
	if _, err := r.Summary(); !errors.Is(err, ErrTruncated) {
		t.Fatalf("summary of an unfinished file: %v", err)
	}
}

func TestBadInput(t *testing.T) {
	f, _ := sample(t, WriterOptions{}, 9)
	good := f.b
	r, _ := NewReader(good, "x")
	s, _ := r.Summary()
	chunk := int64(s.ChunkIndexes[0].ChunkStartOffset)
	flip := func(at int64) []byte { b := bytes.Clone(good); b[at] ^= 0x55; return b }
	zf, _ := sample(t, WriterOptions{Compression: CompressionZstd}, 3)
	lz4 := zf.b
	at := bytes.Index(lz4, []byte("zstd"))
	copy(lz4[at:], "lz4 ")
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrNotMCAP},
		{"text", []byte("hello, this is not a recording at all"), ErrNotMCAP},
		{"major version", append([]byte{0x89, 'M', 'C', 'A', 'P', '1'}, good[6:]...), ErrUnsupported},
		{"chunk CRC", flip(chunk + 60), ErrCRC},
		{"chunk length", flip(chunk + 8), ErrTruncated},
		{"chunk fields", flip(chunk + 1), ErrCorrupt},
		{"compression", lz4, ErrUnsupported},
	}
	for _, c := range cases {
		_, err := readAll(t, c.data)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// A flipped byte in the summary is a summary CRC mismatch.
	bad := flip(int64(len(good)) - 40)
	r, _ = NewReader(bad, "x")
	if _, err := r.Summary(); !errors.Is(err, ErrCRC) && !errors.Is(err, ErrCorrupt) {
		t.Errorf("summary: %v", err)
	}
	// A flipped byte in a message index leaves the messages readable but
	// not the data section's CRC.
	bad = flip(int64(s.ChunkIndexes[0].MessageIndexOffsets[1]) + 12)
	if _, err := readAll(t, bad); !errors.Is(err, ErrCRC) {
		t.Errorf("data CRC: %v", err)
	}
}

func TestOpenFile(t *testing.T) {
	f, want := sample(t, WriterOptions{Compression: CompressionZstd}, 12)
	path := filepath.Join(t.TempDir(), "a.mcap")
	if err := os.WriteFile(path, f.b, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n := 0
	for it := r.Messages(); it.Next(); n++ {
	}
	if n != len(want) {
		t.Fatalf("%d messages", n)
	}
	empty := filepath.Join(t.TempDir(), "empty.mcap")
	os.WriteFile(empty, nil, 0o644)
	if _, err := Open(empty); !errors.Is(err, ErrNotMCAP) {
		t.Fatalf("empty file: %v", err)
	}
}

// FuzzReader reads arbitrary bytes as a file: messages, summary and
// metadata. It must not panic; an error must be an *Error in the file.
func FuzzReader(f *testing.F) {
	for _, opts := range []WriterOptions{{}, {Compression: CompressionZstd}, {ChunkSize: 1}} {
		mf, _ := sample(f, opts, 4)
		f.Add(mf.b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader(data, "fuzz.mcap")
		if err != nil {
			checkError(t, err, len(data))
			return
		}
		defer r.Close()
		r.VerifyDataCRC = true
		it := r.Messages()
		for it.Next() {
			if it.Channel(it.Message().ChannelID) == nil {
				t.Fatal("a message without its channel")
			}
		}
		if err := it.Err(); err != nil {
			checkError(t, err, len(data))
		}
		s, err := r.Summary()
		if err != nil {
			checkError(t, err, len(data))
			return
		}
		for _, mi := range s.MetadataIndexes {
			if _, err := r.Metadata(mi); err != nil {
				checkError(t, err, len(data))
			}
		}
	})
}

func checkError(t *testing.T, err error, size int) {
	var e *Error
	if !errors.As(err, &e) || e.File != "fuzz.mcap" || e.Offset < 0 || e.Offset > int64(size) {
		t.Fatalf("not an *Error within the file: %v", err)
	}
}
