package bridge

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/flybus/flybus/wire"
)

// The headers of a frame's messages. Every message of a frame carries the
// frame id, its chunk index and count, the origin and the topic sequence;
// the first also carries the manifest, which sizes and digests every part.
const (
	hdrOrigin      = "Flybus-Origin"      // the exporting bridge (Config.Origin)
	hdrRouter      = "Flybus-Router"      // the router the frame was published on
	hdrTopic       = "Flybus-Topic"       // the local topic it was published to
	hdrSeq         = "Flybus-Seq"         // its topic sequence there
	hdrIncarnation = "Flybus-Incarnation" // the topic's incarnation there
	hdrFrame       = "Flybus-Frame"       // unique per frame: chunks of one frame share it
	hdrChunk       = "Flybus-Chunk"       // "i/n", 0-based
	hdrManifest    = "Flybus-Manifest"    // JSON manifest, on chunk 0 only
)

// manifest describes a frame's body: the payload, then every artifact's
// bytes, concatenated in this order.
type manifest struct {
	Payload   part   `json:"payload"`
	Artifacts []part `json:"artifacts,omitempty"`
}

// part is one piece of a frame body.
type part struct {
	Name        string `json:"name,omitempty"`
	ContentType string `json:"type,omitempty"`
	Size        int64  `json:"size"`
	SHA256      string `json:"sha256"`
}

func (m *manifest) total() int64 {
	n := m.Payload.Size
	for _, a := range m.Artifacts {
		n += a.Size
	}
	return n
}

// frameMeta is what a frame's headers say besides its body.
type frameMeta struct {
	Origin      string
	Router      string
	Topic       string
	Seq         uint64
	Incarnation string
	Frame       string
}

// headerReserve is room left in every message for headers beyond those
// counted, so that a chunk never exceeds max_payload.
const headerReserve = 512

func headerSize(h nats.Header) int {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n
}

// chunkPlan splits a body of total bytes for a server whose max_payload is
// max, given the headers of the first message: one message when it fits.
func chunkPlan(total int64, first nats.Header, max int64) (chunk int64, n int, err error) {
	room := max - int64(headerSize(first)) - headerReserve
	if room < 1024 {
		return 0, 0, fmt.Errorf("the server's max_payload (%d bytes) leaves no room beside the frame's headers", max)
	}
	if total <= room {
		return total, 1, nil
	}
	n64 := (total + room - 1) / room
	if n64 > 1<<20 {
		return 0, 0, fmt.Errorf("a frame of %d bytes needs %d chunks of %d", total, n64, room)
	}
	return room, int(n64), nil
}

func parseChunk(s string) (i, n int, ok bool) {
	a, b, found := strings.Cut(s, "/")
	if !found {
		return 0, 0, false
	}
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || n < 1 || i < 0 || i >= n {
		return 0, 0, false
	}
	return i, n, true
}

func parseMeta(h nats.Header) (frameMeta, error) {
	m := frameMeta{Origin: h.Get(hdrOrigin), Router: h.Get(hdrRouter), Topic: h.Get(hdrTopic),
		Incarnation: h.Get(hdrIncarnation), Frame: h.Get(hdrFrame)}
	seq, err := strconv.ParseUint(h.Get(hdrSeq), 10, 64)
	if err != nil || m.Frame == "" || m.Origin == "" {
		return m, errors.New("not a flybus frame (missing origin, frame or sequence header)")
	}
	m.Seq = seq
	return m, nil
}

// sink receives one part's bytes, in order.
type sink interface {
	WriteAt(p []byte, off int64) (int, error)
}

// assembly rebuilds one frame from its chunks, checking order, sizes and
// digests. The payload is kept in memory; each artifact's bytes go to its
// sink (a staging file in the local store, or memory for a latest import)
// as they arrive. An import leaves the artifacts' digests to the router,
// which checks each when the import seals it with the manifest's: hashing
// them here too would double the importing host's hashing.
type assembly struct {
	meta    frameMeta
	man     manifest
	n       int   // chunks expected
	next    int   // next chunk index expected
	off     int64 // body bytes received
	payload []byte
	sinks   []sink
	hashes  []hash.Hash // the payload's, then each artifact's when checked here
}

var (
	errMissingChunk = errors.New("a chunk is missing")
	errCorrupt      = errors.New("size or digest mismatch")
)

// startAssembly takes a frame's first chunk; hashArtifacts checks the
// artifacts' digests here too, not only the payload's.
func startAssembly(h nats.Header, maxArtifact int64, hashArtifacts bool) (*assembly, error) {
	meta, err := parseMeta(h)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errCorrupt, err)
	}
	i, n, ok := parseChunk(h.Get(hdrChunk))
	if !ok {
		return nil, fmt.Errorf("%w: bad chunk header %q", errCorrupt, h.Get(hdrChunk))
	}
	if i != 0 {
		return nil, fmt.Errorf("%w: frame %s starts at chunk %d", errMissingChunk, meta.Frame, i)
	}
	a := &assembly{meta: meta, n: n, next: 0}
	if err := json.Unmarshal([]byte(h.Get(hdrManifest)), &a.man); err != nil {
		return nil, fmt.Errorf("%w: manifest: %v", errCorrupt, err)
	}
	if a.man.Payload.Size < 0 || a.man.Payload.Size > 1<<16 {
		return nil, fmt.Errorf("%w: payload of %d bytes", errCorrupt, a.man.Payload.Size)
	}
	if len(a.man.Artifacts) > wire.MaxAttachments {
		// No publication could carry them.
		return nil, fmt.Errorf("%w: %d artifacts, a publication carries %d", errCorrupt, len(a.man.Artifacts), wire.MaxAttachments)
	}
	names := map[string]bool{}
	for _, p := range a.man.Artifacts {
		if p.Size < 0 || (maxArtifact > 0 && p.Size > maxArtifact) || names[p.Name] || p.Name == "" {
			return nil, fmt.Errorf("%w: artifact %q of %d bytes", errCorrupt, p.Name, p.Size)
		}
		names[p.Name] = true
	}
	a.payload = make([]byte, a.man.Payload.Size)
	hashed := 1
	if hashArtifacts {
		hashed += len(a.man.Artifacts)
	}
	a.hashes = make([]hash.Hash, hashed)
	for i := range a.hashes {
		a.hashes[i] = sha256.New()
	}
	return a, nil
}

// accept checks that a chunk header is this frame's expected next one.
func (a *assembly) accept(h nats.Header) error {
	if h.Get(hdrFrame) != a.meta.Frame {
		return fmt.Errorf("%w: frame %s ended after %d of %d chunks", errMissingChunk, a.meta.Frame, a.next, a.n)
	}
	i, n, ok := parseChunk(h.Get(hdrChunk))
	if !ok || n != a.n {
		return fmt.Errorf("%w: bad chunk header %q", errCorrupt, h.Get(hdrChunk))
	}
	if i != a.next {
		return fmt.Errorf("%w: frame %s: chunk %d came after %d", errMissingChunk, a.meta.Frame, i, a.next-1)
	}
	return nil
}

// write adds the next chunk's data; done reports the last chunk.
func (a *assembly) write(data []byte) (done bool, err error) {
	total := a.man.total()
	if a.off+int64(len(data)) > total {
		return false, fmt.Errorf("%w: more bytes than the manifest's %d", errCorrupt, total)
	}
	for len(data) > 0 {
		idx, start, size := a.locate(a.off)
		k := min(int64(len(data)), size-(a.off-start))
		piece := data[:k]
		if idx < len(a.hashes) {
			a.hashes[idx].Write(piece)
		}
		if idx == 0 {
			copy(a.payload[a.off-start:], piece)
		} else if _, err := a.sinks[idx-1].WriteAt(piece, a.off-start); err != nil {
			return false, err
		}
		a.off += k
		data = data[k:]
	}
	a.next++
	if a.next < a.n {
		return false, nil
	}
	if a.off != total {
		return false, fmt.Errorf("%w: %d bytes, the manifest says %d", errCorrupt, a.off, total)
	}
	if err := a.check(); err != nil {
		return false, err
	}
	return true, nil
}

// locate finds the part holding body offset off.
func (a *assembly) locate(off int64) (idx int, start, size int64) {
	start, size = 0, a.man.Payload.Size
	if off < size {
		return 0, 0, size
	}
	for i, p := range a.man.Artifacts {
		start += size
		size = p.Size
		if off < start+size {
			return i + 1, start, size
		}
	}
	return len(a.man.Artifacts), start, size
}

func (a *assembly) check() error {
	if hexSum(a.hashes[0]) != a.man.Payload.SHA256 {
		return fmt.Errorf("%w: payload digest", errCorrupt)
	}
	for i, h := range a.hashes[1:] {
		if hexSum(h) != a.man.Artifacts[i].SHA256 {
			return fmt.Errorf("%w: artifact %q digest", errCorrupt, a.man.Artifacts[i].Name)
		}
	}
	return nil
}

func hexSum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
