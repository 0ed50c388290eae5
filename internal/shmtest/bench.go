package shmtest

import (
	"io"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// FrameSize is the frame the bus is built around, 640x480 RGBA: the size
// the frame benchmarks of mmap and store move.
const FrameSize = 1228800

// BenchDir returns a fresh directory for a benchmark's files, removed when
// the benchmark ends: under FLYBUS_BENCH_STORE if set (to measure, say, a
// tmpfs mounted huge=within_size), else on /dev/shm as Dir makes it.
func BenchDir(b *testing.B, prefix string) string {
	b.Helper()
	base := os.Getenv("FLYBUS_BENCH_STORE")
	if base == "" {
		return Dir(b, prefix)
	}
	dir, err := os.MkdirTemp(base, prefix)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// FrameBench runs fn as the sub-benchmark "frame=1228800", which reports
// its allocations and counts FrameSize bytes an iteration.
func FrameBench(b *testing.B, fn func(b *testing.B)) {
	b.Run("frame=1228800", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(FrameSize)
		fn(b)
	})
}

// Sink keeps the compiler from discarding the reads of Touch and Copy;
// exported so that nothing flags it as written and never read.
var Sink byte

// Touch reads one byte of every 64-byte cache line of p, which faults in
// every page the way a consumer reading all of p would.
func Touch(p []byte) {
	var s byte
	for i := 0; i < len(p); i += 64 {
		s += p[i]
	}
	Sink += s
}

// MapTouch loops over the least a view can cost, the floor under the view
// benchmarks: map the first size bytes of fd read-only and shared, Touch
// them, unmap.
func MapTouch(b *testing.B, fd, size int) {
	for b.Loop() {
		m, err := unix.Mmap(fd, 0, size, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			b.Fatal(err)
		}
		Touch(m)
		if err := unix.Munmap(m); err != nil {
			b.Fatal(err)
		}
	}
}

// Copy loops over copy() of src into a slice of its size, the baseline the
// frame benchmarks are judged by.
func Copy(b *testing.B, src []byte) {
	dst := make([]byte, len(src))
	for b.Loop() {
		copy(dst, src)
	}
	Sink += dst[len(dst)-1]
}

// PingPong loops over hops round trips of msg on c, whose peer echoes
// what it reads (see Echo): the floor any local bus pays for a message.
func PingPong(b *testing.B, c net.Conn, msg []byte, hops int) {
	for b.Loop() {
		for range hops {
			if _, err := c.Write(msg); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(c, msg); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// Echo writes back every size-byte message it reads from c until c fails,
// then closes c.
func Echo(c net.Conn, size int) {
	defer c.Close()
	p := make([]byte, size)
	for {
		if _, err := io.ReadFull(c, p); err != nil {
			return
		}
		if _, err := c.Write(p); err != nil {
			return
		}
	}
}
