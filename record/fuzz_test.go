package record

import (
	"errors"
	"io"
	"testing"

	"github.com/flybus/flybus/record/mcap"
)

// FuzzPublications reads arbitrary bytes as a recording. It must not
// panic; it may return publications, each whole, and then io.EOF or an
// error naming the file and an offset in it. The seed corpus in
// testdata/fuzz/FuzzPublications holds small recordings: uncompressed,
// zstd, cut short, and one written by @mcap/core.
func FuzzPublications(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := fromBytes(data, "fuzz.mcap")
		if err != nil {
			wantFileError(t, err, len(data))
			return
		}
		defer r.Close()
		for {
			p, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				if p != nil {
					t.Fatal("a publication returned with an error")
				}
				wantFileError(t, err, len(data))
				break
			}
			if p.Topic == "" || len(p.Payload) == 0 {
				t.Fatalf("publication %+v", p)
			}
		}
		mr, err := mcap.NewReader(data, "fuzz.mcap")
		if err == nil {
			if _, err := mr.Summary(); err != nil {
				wantFileError(t, err, len(data))
			}
		}
	})
}

func wantFileError(t *testing.T, err error, size int) {
	t.Helper()
	var e *mcap.Error
	if !errors.As(err, &e) || e.File != "fuzz.mcap" || e.Offset < 0 || e.Offset > int64(size) {
		t.Fatalf("not an error within the file: %v", err)
	}
}
