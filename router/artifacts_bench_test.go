package router_test

import (
	"context"
	"io"
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
func benchStoreRoot(b *testing.B) string { return shmtest.BenchDir(b, "flybus-bench-") }

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
	w, _ := c.Allocate(ctx, frameSize, "image/x-rgba")
	w.Close()
	// eachWriter times step on each iteration's writer, allocated (and
	// written, if filled) with the timer stopped; what step returns is
	// closed with the timer stopped too.
	eachWriter := func(b *testing.B, filled bool, step func(w *client.ArtifactWriter) io.Closer) {
		for b.Loop() {
			b.StopTimer()
			w, _ := c.Allocate(ctx, frameSize, "image/x-rgba")
			if filled {
				w.Write(frame)
			}
			b.StartTimer()
			done := step(w)
			b.StopTimer()
			done.Close()
			b.StartTimer()
		}
	}

	b.Run("allocate", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w, err := c.Allocate(ctx, frameSize, "image/x-rgba")
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
		eachWriter(b, false, func(w *client.ArtifactWriter) io.Closer {
			if _, err := w.Write(frame); err != nil {
				b.Fatal(err)
			}
			return w
		})
	})
	b.Run("fill=map", func(b *testing.B) {
		b.SetBytes(frameSize)
		b.ReportAllocs()
		eachWriter(b, false, func(w *client.ArtifactWriter) io.Closer {
			m, err := w.Bytes()
			if err != nil {
				b.Fatal(err)
			}
			copy(m, frame)
			return w // Close unmaps
		})
	})
	b.Run("seal=lease", func(b *testing.B) {
		b.ReportAllocs()
		eachWriter(b, true, func(w *client.ArtifactWriter) io.Closer {
			a, err := w.Seal(ctx)
			if err != nil {
				b.Fatal(err)
			}
			return a
		})
	})
	b.Run("view+read", func(b *testing.B) {
		w, _ := c.Allocate(ctx, frameSize, "image/x-rgba")
		w.Write(frame)
		a, err := w.Seal(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer a.Close()
		b.SetBytes(frameSize)
		b.ReportAllocs()
		for b.Loop() {
			v, err := a.View(ctx)
			if err != nil {
				b.Fatal(err)
			}
			shmtest.Touch(v.Bytes())
			v.Close()
		}
	})
	b.Run("baseline=copy", func(b *testing.B) {
		b.SetBytes(frameSize)
		b.ReportAllocs()
		shmtest.Copy(b, frame)
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
		shmtest.MapTouch(b, int(f.Fd()), frameSize)
	})
	b.Run("baseline=raw-unix-pingpong", func(b *testing.B) { rawPingPong(b, 300, 1) })
}
