package mmap_test

import (
	"os"
	"testing"

	"github.com/flybus/flybus/internal/shmtest"
	"github.com/flybus/flybus/mmap"
	"golang.org/x/sys/unix"
)

// frame is the size of the video frames the bus is built around.
const frame = 1228800

// sink keeps the compiler from discarding reads of mapped memory.
var sink byte

// touch reads one byte of every 64-byte cache line, which faults in every
// page the way a consumer reading the whole frame would.
func touch(b []byte) {
	var s byte
	for i := 0; i < len(b); i += 64 {
		s += b[i]
	}
	sink += s
}

// benchDir is where benchmark files live: FLYBUS_BENCH_STORE if set (to
// measure, say, a huge=within_size tmpfs), else a fresh directory on
// /dev/shm.
func benchDir(b *testing.B) string {
	if d := os.Getenv("FLYBUS_BENCH_STORE"); d != "" {
		d, err := os.MkdirTemp(d, "flybus-mmap-bench-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(d) })
		return d
	}
	return shmtest.Dir(b, "flybus-mmap-test-")
}

// benchFile creates a file of frame bytes and returns it open read-write.
func benchFile(b *testing.B) *os.File {
	p := writeFile(b, benchDir(b), pattern(frame))
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return f
}

// BenchmarkView is a consumer's access to every line of a frame: map, touch,
// unmap. Compare with BenchmarkKernelFloor.
func BenchmarkView(b *testing.B) {
	b.Run("frame=1228800", func(b *testing.B) {
		f := benchFile(b)
		b.ReportAllocs()
		b.SetBytes(frame)
		for b.Loop() {
			v, err := mmap.MapFile(f, frame)
			if err != nil {
				b.Fatal(err)
			}
			touch(v.Bytes())
			if err := v.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkWritable is a producer filling a frame in place: map, copy, unmap.
func BenchmarkWritable(b *testing.B) {
	b.Run("frame=1228800", func(b *testing.B) {
		f := benchFile(b)
		src := pattern(frame)
		b.ReportAllocs()
		b.SetBytes(frame)
		for b.Loop() {
			w, err := mmap.MapWritable(f, frame)
			if err != nil {
				b.Fatal(err)
			}
			copy(w.Bytes(), src)
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkKernelFloor is the least a view can cost: a raw read-only mapping,
// one read per line, unmap.
func BenchmarkKernelFloor(b *testing.B) {
	b.Run("frame=1228800", func(b *testing.B) {
		f := benchFile(b)
		fd := int(f.Fd())
		b.ReportAllocs()
		b.SetBytes(frame)
		for b.Loop() {
			m, err := unix.Mmap(fd, 0, frame, unix.PROT_READ, unix.MAP_SHARED)
			if err != nil {
				b.Fatal(err)
			}
			touch(m)
			if err := unix.Munmap(m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCopy is the baseline every figure is compared with: copy() of a
// frame between two Go slices.
func BenchmarkCopy(b *testing.B) {
	b.Run("frame=1228800", func(b *testing.B) {
		src, dst := pattern(frame), make([]byte, frame)
		b.ReportAllocs()
		b.SetBytes(frame)
		for b.Loop() {
			copy(dst, src)
		}
		sink += dst[frame-1]
	})
}
