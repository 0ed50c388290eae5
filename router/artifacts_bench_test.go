package router_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/shmtest"
	"github.com/flybus/flybus/router"
)

// benchStoreRoot is where artifact benchmarks keep their store:
// FLYBUS_BENCH_STORE (for example a tmpfs mounted huge=within_size), else
// /dev/shm.
func benchStoreRoot(b *testing.B) string {
	base := os.Getenv("FLYBUS_BENCH_STORE")
	if base == "" {
		return shmtest.Dir(b, "flybus-bench-")
	}
	dir, err := os.MkdirTemp(base, "flybus-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// BenchmarkArtifactFrame measures, for one 1,228,800-byte frame through the
// router over a Unix socket, each step a producer and a consumer pay, beside
// the baselines docs/design.md judges them by, all in one run.
func BenchmarkArtifactFrame(b *testing.B) {
	root := benchStoreRoot(b)
	r, err := router.New(router.Config{Policy: router.OpenPolicy(), StoreRoot: root})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	path := filepath.Join(b.TempDir(), "p.sock")
	if _, err := r.ListenUnix(path); err != nil {
		b.Fatal(err)
	}
	nc, err := net.Dial("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	c, err := client.Connect(ctx, nc, client.Config{ClientID: "bench", StoreRoot: root})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	frame := frameBytes(1, frameSize)
	// Warm the staging pool for this size.
	w, _ := c.Artifacts().Allocate(ctx, frameSize, "image/x-rgba")
	w.Close()

	b.Run("allocate", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w, err := c.Artifacts().Allocate(ctx, frameSize, "image/x-rgba")
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			w.Close()
			b.StartTimer()
		}
	})
	b.Run("fill=write", func(b *testing.B) {
		b.SetBytes(frameSize)
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			w, _ := c.Artifacts().Allocate(ctx, frameSize, "image/x-rgba")
			b.StartTimer()
			if _, err := w.Write(frame); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			w.Close()
			b.StartTimer()
		}
	})
	b.Run("fill=map", func(b *testing.B) {
		b.SetBytes(frameSize)
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			w, _ := c.Artifacts().Allocate(ctx, frameSize, "image/x-rgba")
			b.StartTimer()
			m, err := w.Bytes()
			if err != nil {
				b.Fatal(err)
			}
			copy(m, frame)
			b.StopTimer()
			w.Close() // unmaps
			b.StartTimer()
		}
	})
	b.Run("seal=lease", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			w, _ := c.Artifacts().Allocate(ctx, frameSize, "image/x-rgba")
			w.Write(frame)
			b.StartTimer()
			a, err := w.Seal(ctx)
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			a.Close()
			b.StartTimer()
		}
	})
	b.Run("view+read", func(b *testing.B) {
		w, _ := c.Artifacts().Allocate(ctx, frameSize, "image/x-rgba")
		w.Write(frame)
		a, err := w.Seal(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer a.Close()
		b.SetBytes(frameSize)
		b.ReportAllocs()
		var sum byte
		for b.Loop() {
			v, err := a.View(ctx)
			if err != nil {
				b.Fatal(err)
			}
			bs := v.Bytes()
			for i := 0; i < len(bs); i += 64 {
				sum += bs[i]
			}
			v.Close()
		}
		_ = sum
	})
	b.Run("baseline=copy", func(b *testing.B) {
		dst := make([]byte, frameSize)
		b.SetBytes(frameSize)
		b.ReportAllocs()
		for b.Loop() {
			copy(dst, frame)
		}
	})
	b.Run("baseline=pwrite", func(b *testing.B) {
		// Into a fresh fallocated file each time, like a staging file.
		b.SetBytes(frameSize)
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			f, err := os.CreateTemp(root, "pw-")
			if err != nil {
				b.Fatal(err)
			}
			unix.Fallocate(int(f.Fd()), 0, 0, frameSize)
			b.StartTimer()
			if _, err := f.WriteAt(frame, 0); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			f.Close()
			os.Remove(f.Name())
			b.StartTimer()
		}
	})
	b.Run("baseline=map-touch-unmap", func(b *testing.B) {
		f, err := os.CreateTemp(root, "mt-")
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		f.WriteAt(frame, 0)
		b.SetBytes(frameSize)
		b.ReportAllocs()
		var sum byte
		for b.Loop() {
			m, err := unix.Mmap(int(f.Fd()), 0, frameSize, unix.PROT_READ, unix.MAP_SHARED)
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < len(m); i += 64 {
				sum += m[i]
			}
			unix.Munmap(m)
		}
		_ = sum
	})
	b.Run("baseline=raw-unix-pingpong", func(b *testing.B) { rawPingPong(b, 300, 1) })
}
