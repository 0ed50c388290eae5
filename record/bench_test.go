package record

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The benchmarks compare the recorder's cost per 640x480 RGBA frame
// (1,228,800 bytes) with a plain write of the same bytes to a file on the
// same filesystem, and measure the reader. The frame is read through a
// read-only mapping of a file on /dev/shm, as a recorder reads an artifact.
// Besides ns/op they report cpu-ns/frame: user and system CPU of the whole
// process (GC included) per frame.
//
//	go test ./record -run '^$' -bench 'Frame|Reader' -benchtime 2s

const frameSize = 640 * 480 * 4

// benchDir is where the benchmarks write: /dev/shm when there is one.
func benchDir(b *testing.B) string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "flybus-bench-")
		if err == nil {
			b.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	return b.TempDir()
}

// mappedFrame returns a read-only mapping of a frame-sized file, as the
// store's artifacts are mapped.
func mappedFrame(b *testing.B, dir string) []byte {
	path := filepath.Join(dir, "frame")
	data := make([]byte, frameSize)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := os.WriteFile(path, data, 0o444); err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, frameSize, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { unix.Munmap(m) })
	return m
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// perFile bounds what a benchmark leaves on /dev/shm: it starts a new file
// every so many frames, outside the timer.
const perFile = 64

func BenchmarkPlainWriteFrame(b *testing.B) {
	dir := benchDir(b)
	frame := mappedFrame(b, dir)
	path := filepath.Join(dir, "plain.bin")
	var f *os.File
	b.SetBytes(frameSize)
	b.ReportAllocs()
	cpu0 := cpuTime()
	for i := 0; b.Loop(); i++ {
		if i%perFile == 0 {
			b.StopTimer()
			if f != nil {
				f.Close()
			}
			var err error
			if f, err = os.Create(path); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		if _, err := f.Write(frame); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/frame")
	f.Close()
}

func BenchmarkRecordFrame(b *testing.B) {
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"none", Options{}},
		{"none-nocrc", Options{NoCRC: true}},
		{"zstd", Options{Compression: "zstd"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			dir := benchDir(b)
			frame := mappedFrame(b, dir)
			path := filepath.Join(dir, "rec.mcap")
			opts := c.opts
			opts.FlushInterval = -1
			arts := []artifactInfo{{Name: "frame", ContentType: "image/x-rgba", ByteLength: frameSize}}
			data := [][]byte{frame}
			payload := []byte(`{"width":640,"height":480,"seq":1}`)
			var rec *Recorder
			b.SetBytes(frameSize)
			b.ReportAllocs()
			cpu0 := cpuTime()
			for i := 0; b.Loop(); i++ {
				if i%perFile == 0 {
					b.StopTimer()
					if rec != nil {
						rec.Close()
					}
					var err error
					if rec, err = Create(path, opts); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				if err := rec.write("camera.front", 1, uint64(i), 0, payload, arts, data); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/frame")
			rec.Close()
		})
	}
}

func BenchmarkReader(b *testing.B) {
	for _, comp := range []string{"none", "zstd"} {
		b.Run(comp, func(b *testing.B) {
			dir := benchDir(b)
			frame := mappedFrame(b, dir)
			path := filepath.Join(dir, "read.mcap")
			rec, err := Create(path, Options{Compression: comp, FlushInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			const frames = 32
			arts := []artifactInfo{{Name: "frame", ContentType: "image/x-rgba", ByteLength: frameSize}}
			for i := range frames {
				if err := rec.write("camera.front", 1, uint64(i), 0, []byte(`{}`), arts, [][]byte{frame}); err != nil {
					b.Fatal(err)
				}
			}
			if err := rec.Close(); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(frameSize)
			b.ReportAllocs()
			cpu0 := cpuTime()
			var r *Reader
			var sink byte
			for i := 0; b.Loop(); i++ {
				if i%frames == 0 {
					if r != nil {
						r.Close()
					}
					if r, err = Open(path); err != nil {
						b.Fatal(err)
					}
				}
				p, err := r.Next()
				if err == io.EOF {
					b.Fatal("fewer frames than expected")
				}
				if err != nil {
					b.Fatal(err)
				}
				sink ^= p.Artifacts[0].Data[frameSize-1] // the bytes are there to read
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/frame")
			r.Close()
			_ = sink
		})
	}
}
