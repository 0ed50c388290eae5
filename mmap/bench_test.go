package mmap_test

import (
	"os"
	"testing"

	"github.com/flybus/flybus/internal/shmtest"
	"github.com/flybus/flybus/mmap"
)

// frame is the size of the video frames the bus is built around.
const frame = shmtest.FrameSize

// benchFile creates a file of frame bytes where benchmark files live
// (FLYBUS_BENCH_STORE, else /dev/shm) and returns it open read-write.
func benchFile(b *testing.B) *os.File {
	f := openRW(b, writeFile(b, shmtest.BenchDir(b, "flybus-mmap-bench-"), pattern(frame)))
	b.Cleanup(func() { f.Close() })
	return f
}

// benchMap times a whole use of a frame through a mapping: map it with
// mapFile, use its bytes, unmap.
func benchMap[M interface {
	Bytes() []byte
	Close() error
}](b *testing.B, mapFile func(*os.File, int64) (M, error), use func(p []byte)) {
	shmtest.FrameBench(b, func(b *testing.B) {
		f := benchFile(b)
		for b.Loop() {
			m, err := mapFile(f, frame)
			if err != nil {
				b.Fatal(err)
			}
			use(m.Bytes())
			if err := m.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkView is a consumer's access to every line of a frame: map, touch,
// unmap. Compare with BenchmarkKernelFloor.
func BenchmarkView(b *testing.B) { benchMap(b, mmap.MapFile, shmtest.Touch) }

// BenchmarkWritable is a producer filling a frame in place: map, copy, unmap.
func BenchmarkWritable(b *testing.B) {
	src := pattern(frame)
	benchMap(b, mmap.MapWritable, func(p []byte) { copy(p, src) })
}

// BenchmarkKernelFloor is the least a view can cost: a raw read-only mapping,
// one read per line, unmap.
func BenchmarkKernelFloor(b *testing.B) {
	shmtest.FrameBench(b, func(b *testing.B) {
		shmtest.MapTouch(b, int(benchFile(b).Fd()), frame)
	})
}

// BenchmarkCopy is the baseline every figure is compared with: copy() of a
// frame between two Go slices.
func BenchmarkCopy(b *testing.B) {
	shmtest.FrameBench(b, func(b *testing.B) { shmtest.Copy(b, pattern(frame)) })
}
