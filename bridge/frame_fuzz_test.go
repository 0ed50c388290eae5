package bridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
)

// fuzzMaxArtifact is the per-artifact bound FuzzAssembly's assemblies
// run with, as an import runs with its router's maxArtifactBytes.
const fuzzMaxArtifact = 4096

// boundedSink records an artifact's bytes and fails the test for a write
// outside the part.
type boundedSink struct {
	t   *testing.T
	buf []byte
}

func (s *boundedSink) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(s.buf)) {
		s.t.Fatalf("a write of %d bytes at %d into a part of %d", len(p), off, len(s.buf))
	}
	return copy(s.buf[off:], p), nil
}

// FuzzAssembly plays a peer the import does not trust: the first chunk's
// Flybus-Chunk header, the manifest and the frame's body come from the
// input, and cuts splits the body into the chunks the first header
// announces (one cut byte per chunk boundary, as a share of what is left).
// Checked: nothing panics; a refusal is a missing chunk or a corrupt
// frame; no write lands outside its part; and a frame completes only at
// its last chunk, with exactly the bytes its manifest sizes, the payload
// (and, when the assembly hashes them, every artifact) matching its
// digest, and every part holding its slice of the body.
func FuzzAssembly(f *testing.F) {
	for _, s := range assemblySeeds() {
		f.Add(s.chunk, s.manifest, s.body, s.cuts, s.hashArtifacts)
	}
	f.Fuzz(func(t *testing.T, chunk0, man string, body, cuts []byte, hashArtifacts bool) {
		h := nats.Header{}
		h.Set(hdrOrigin, "peer")
		h.Set(hdrFrame, "peer-1")
		h.Set(hdrSeq, "1")
		h.Set(hdrChunk, chunk0)
		h.Set(hdrManifest, man)
		a, err := startAssembly(h, fuzzMaxArtifact, hashArtifacts)
		if err != nil {
			wantRefusal(t, "the first chunk", err)
			return
		}
		if a.n > 64 {
			return // a valid header, but more chunks than the input can cut
		}
		sinks := make([]*boundedSink, len(a.man.Artifacts))
		for i, p := range a.man.Artifacts {
			sinks[i] = &boundedSink{t: t, buf: make([]byte, p.Size)}
			a.sinks = append(a.sinks, sinks[i])
		}
		rest := body
		for i := range a.n {
			if i > 0 {
				hi := nats.Header{}
				hi.Set(hdrFrame, "peer-1")
				hi.Set(hdrChunk, strconv.Itoa(i)+"/"+strconv.Itoa(a.n))
				if err := a.accept(hi); err != nil {
					t.Fatalf("chunk %d of %d refused: %v", i, a.n, err)
				}
			}
			k := len(rest)
			if i < a.n-1 {
				share := 0
				if i < len(cuts) {
					share = int(cuts[i])
				}
				k = len(rest) * share / 255
			}
			done, err := a.write(rest[:k])
			rest = rest[k:]
			if err != nil {
				wantRefusal(t, "chunk "+strconv.Itoa(i), err)
				return
			}
			if done != (i == a.n-1) {
				t.Fatalf("chunk %d of %d: done %v", i, a.n, done)
			}
		}
		// Complete: every byte placed where the manifest says.
		if int64(len(body)) != a.man.total() || a.off != a.man.total() {
			t.Fatalf("complete with %d body bytes (%d placed), the manifest says %d", len(body), a.off, a.man.total())
		}
		if sha256Hex(a.payload) != a.man.Payload.SHA256 || !bytes.Equal(a.payload, body[:a.man.Payload.Size]) {
			t.Fatal("complete with a payload other than the manifest's")
		}
		off := a.man.Payload.Size
		for i, p := range a.man.Artifacts {
			part := body[off : off+p.Size]
			if !bytes.Equal(sinks[i].buf, part) || (hashArtifacts && sha256Hex(part) != p.SHA256) {
				t.Fatalf("complete with artifact %q other than its part of the body", p.Name)
			}
			off += p.Size
		}
	})
}

// wantRefusal fails the test unless err says a chunk is missing or the
// frame is corrupt.
func wantRefusal(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, errCorrupt) && !errors.Is(err, errMissingChunk) {
		t.Fatalf("%s: %v is neither a missing chunk nor a corrupt frame", what, err)
	}
}

type assemblySeed struct {
	chunk, manifest string
	body, cuts      []byte
	hashArtifacts   bool
}

// assemblySeeds are whole frames in one, two and three chunks, with and
// without artifacts, and a few a peer could get wrong.
func assemblySeeds() []assemblySeed {
	payload := []byte(`{"n":1}`)
	art := bytes.Repeat([]byte("ab"), 700)
	frame := func(arts ...[]byte) (string, []byte) {
		m := manifest{Payload: part{Size: int64(len(payload)), SHA256: sha256Hex(payload)}}
		body := append([]byte{}, payload...)
		for i, b := range arts {
			m.Artifacts = append(m.Artifacts, part{Name: "a" + strconv.Itoa(i), ContentType: "x/y", Size: int64(len(b)), SHA256: sha256Hex(b)})
			body = append(body, b...)
		}
		j, _ := json.Marshal(&m)
		return string(j), body
	}
	one, oneBody := frame(art)
	two, twoBody := frame(art, []byte{}, art[:3])
	none, noneBody := frame()
	many := make([][]byte, 33)
	for i := range many {
		many[i] = []byte{byte(i)}
	}
	tooMany, tooManyBody := frame(many...)
	bad := append([]byte{}, oneBody...)
	bad[len(bad)-1] ^= 1
	return []assemblySeed{
		{"0/1", one, oneBody, nil, true},
		{"0/2", one, oneBody, []byte{100}, false},
		{"0/3", two, twoBody, []byte{10, 200}, true},
		{"0/1", none, noneBody, nil, false},
		{"0/1", tooMany, tooManyBody, nil, false},
		{"0/2", one, bad, []byte{128}, true},                       // an artifact byte changed
		{"0/2", one, oneBody[:len(oneBody)-1], []byte{128}, false}, // short
		{"1/2", one, oneBody, []byte{128}, false},                  // the first chunk lost
		{"0/0", one, oneBody, nil, false},                          // a bad chunk header
		{"0/1", `{"payload":{"size":-1}}`, nil, nil, false},
	}
}
