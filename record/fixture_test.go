package record

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/flybus/flybus/wire"
)

var updateFixtures = flag.Bool("update", false, "rewrite testdata/sample*.mcap")

// writeSample writes the recording that testdata/sample.mcap (and, with
// zstd, sample-zstd.mcap) holds: python/tests/test_mcap.py reads them. The
// receive times are fixed, so the bytes are too.
func writeSample(t *testing.T, path, compression string) {
	t.Helper()
	rec, err := Create(path, Options{Compression: compression, FlushInterval: -1, ChunkSize: 8192})
	if err != nil {
		t.Fatal(err)
	}
	rec.SetRetention("cam.front", wire.RetainNone)
	rec.SetRetention("tel", wire.RetainLatest)
	frame := make([]byte, 4096)
	for i := range frame {
		frame[i] = byte(i * 7)
	}
	s := sha256.Sum256(frame)
	digest := hex.EncodeToString(s[:])
	pubs := []struct {
		topic   string
		payload string
		arts    []artifactInfo
		data    [][]byte
	}{
		{"cam.front", `{"seq":1,"width":32,"height":32}`, []artifactInfo{{Name: "frame", ContentType: "image/x-rgba", ByteLength: 4096, Digest: digest}}, [][]byte{frame}},
		{"tel", `{"speed":1.5}`, nil, nil},
		{"cam.front", `{"seq":2}`, []artifactInfo{{Name: "frame", ContentType: "image/x-rgba", ByteLength: 4096, Digest: digest},
			{Name: "meta", ContentType: "text/plain", ByteLength: 5}}, [][]byte{frame, []byte("hello")}},
	}
	for i, p := range pubs {
		rec.clock = func() uint64 { return 1_700_000_000_000_000_000 + uint64(i)*16_666_667 }
		if err := rec.write(p.topic, wire.TopicInc(1+i%2), uint64(i+1), uint64(i), []byte(p.payload), p.arts, p.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSampleFixtures checks that the writer still writes the committed
// samples byte for byte (go test ./record -run Sample -update rewrites
// them) and that they read back.
func TestSampleFixtures(t *testing.T) {
	for name, comp := range map[string]string{"sample.mcap": "none", "sample-zstd.mcap": "zstd"} {
		committed := filepath.Join("testdata", name)
		path := filepath.Join(t.TempDir(), name)
		writeSample(t, path, comp)
		got, _ := os.ReadFile(path)
		if *updateFixtures {
			if err := os.WriteFile(committed, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(committed)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: the writer's output differs from the committed file (%v); rerun with -update if the change is meant", name, err)
		}
		r, err := Open(committed)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			p, err := r.Next()
			if err != nil {
				break
			}
			n++
			if p.Topic == "tel" && p.Retention != wire.RetainLatest {
				t.Fatalf("%+v", p)
			}
		}
		r.Close()
		if n != 3 {
			t.Fatalf("%s: %d publications", name, n)
		}
	}
}
