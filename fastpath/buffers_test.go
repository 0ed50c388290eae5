package fastpath

import (
	"fmt"
	"io"
	"testing"
)

// drain reads c until it fails, so that writes never block on a full
// socket buffer.
func drain(c io.Reader) {
	buf := make([]byte, 256<<10)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// BenchmarkWriteBatch writes 300-byte envelopes (the size of a typical
// reply or small delivery) through a Unix socket, batch frames per write,
// and reports CPU and wall time per frame: what WriteBatch trades.
func BenchmarkWriteBatch(b *testing.B) {
	const frame = 300
	for _, batch := range []int{1, 4, 16, 32, 64} {
		b.Run(fmt.Sprintf("frames=%d", batch), func(b *testing.B) {
			w, r := socketPair(b)
			go drain(r)
			buf := make([]byte, 0, batch*frame)
			env := make([]byte, frame)
			b.ReportAllocs()
			b.SetBytes(frame)
			cpu0 := cpuTime(b)
			for i := 0; i < b.N; i += batch {
				buf = buf[:0]
				for range batch {
					buf = append(buf, env...) // stands in for encoding
				}
				if _, err := w.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/frame")
		})
	}
}

// BenchmarkKeepWriteBuffer writes size bytes per write through a Unix
// socket, encoding into a buffer kept across writes or into a fresh one
// each time (what a connection pays after KeepWriteBytes dropped its
// buffer): the fresh buffer's share of the write shrinks as writes grow.
func BenchmarkKeepWriteBuffer(b *testing.B) {
	for _, size := range []int{16 << 10, 128 << 10, 512 << 10, 2 << 20} {
		for _, keep := range []bool{true, false} {
			b.Run(fmt.Sprintf("bytes=%d/kept=%v", size, keep), func(b *testing.B) {
				w, r := socketPair(b)
				go drain(r)
				chunk := make([]byte, 4096)
				var buf []byte
				b.ReportAllocs()
				b.SetBytes(int64(size))
				for b.Loop() {
					if keep {
						buf = buf[:0]
					} else {
						buf = nil
					}
					for len(buf) < size {
						buf = append(buf, chunk...)
					}
					if _, err := w.Write(buf); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
