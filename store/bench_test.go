package store

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/flybus/flybus/internal/shmtest"
	"github.com/flybus/flybus/mmap"
	"golang.org/x/sys/unix"
)

// Benchmarks of every store step for one 1,228,800-byte frame, with the
// baselines they are judged against (copy, pwrite, the kernel's mapping
// floor). Per-iteration setup and teardown run with the timer stopped.
// FLYBUS_BENCH_STORE picks the store root (say, a huge=within_size tmpfs);
// the default is /dev/shm. Each benchmark runs as the sub-benchmark
// "frame=1228800" (shmtest.FrameBench).

func benchStore(b *testing.B, cfg Config) *Store {
	b.Helper()
	cfg.Root = shmtest.BenchDir(b, "flybus-bench-")
	return openStore(b, cfg)
}

func mustRemove(b *testing.B, s *Store, rel string) {
	if err := s.Remove(rel); err != nil {
		b.Fatal(err)
	}
}

// writeFrame opens a staging file, writes the frame with one WriteAt, and
// returns the still open file.
func writeFrame(b *testing.B, s *Store, rel string, data []byte) *os.File {
	f, err := OpenWrite(s.Root(), s.ID(), rel)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		b.Fatal(err)
	}
	return f
}

// openMapped opens rel of s with open (OpenRead or OpenWrite) and maps the
// frame with mapFile (mmap.MapFile or mmap.MapWritable), as a client
// resolving a location does; the caller closes both. Unlike openIn and
// mapIn it marks no test helper, which would cost inside a timed loop.
func openMapped[M any](b *testing.B, s *Store, open func(root, storeID, relPath string) (*os.File, error), rel string, mapFile func(*os.File, int64) (M, error)) (*os.File, M) {
	f, err := open(s.Root(), s.ID(), rel)
	if err != nil {
		b.Fatal(err)
	}
	m, err := mapFile(f, frame)
	if err != nil {
		b.Fatal(err)
	}
	return f, m
}

// BenchmarkStageWarm: Stage served by the pool. The pool is deep enough for
// a batch of stages with the timer running, so the figure is the lookup, not
// the cost of stopping the timer; between batches the timer stops while the
// staged files are removed and the pool refills. Meanwhile the refill
// goroutine works on the other core, as it would in a router.
func BenchmarkStageWarm(b *testing.B) {
	shmtest.FrameBench(b, func(b *testing.B) {
		const batch = 32
		s := benchStore(b, Config{PoolDepth: batch})
		mustRemove(b, s, mustStage(b, s, frame).RelPath) // the miss that makes the size recent
		if !s.pool.waitIdle() {
			b.Fatal("pool failed")
		}
		var staged []string
		for b.Loop() {
			if len(staged) == batch {
				b.StopTimer()
				for _, rel := range staged {
					mustRemove(b, s, rel)
				}
				staged = staged[:0]
				if !s.pool.waitIdle() {
					b.Fatal("pool failed")
				}
				b.StartTimer()
			}
			staged = append(staged, mustStage(b, s, frame).RelPath)
		}
		if s.Stats().PoolMisses != 1 {
			b.Fatalf("pool missed: %+v", s.Stats())
		}
	})
}

// BenchmarkStageCold: create and fallocate on the caller's path.
func BenchmarkStageCold(b *testing.B) {
	shmtest.FrameBench(b, func(b *testing.B) {
		s := benchStore(b, Config{PoolDepth: -1})
		for b.Loop() {
			st := mustStage(b, s, frame)
			b.StopTimer()
			mustRemove(b, s, st.RelPath)
			b.StartTimer()
		}
	})
}

// benchFill times fill of a frame's worth of data into a staged file;
// staging it and removing it run with the timer stopped.
func benchFill(b *testing.B, fill func(b *testing.B, s *Store, rel string, data []byte)) {
	shmtest.FrameBench(b, func(b *testing.B) {
		s := benchStore(b, Config{PoolDepth: -1})
		data := pattern(frame, 1)
		for b.Loop() {
			b.StopTimer()
			st := mustStage(b, s, frame)
			b.StartTimer()
			fill(b, s, st.RelPath, data)
			b.StopTimer()
			mustRemove(b, s, st.RelPath)
			b.StartTimer()
		}
	})
}

// BenchmarkFillWriteAt: a producer's fill of a staged file: OpenWrite,
// one WriteAt, Close. Compare with BenchmarkPwrite.
func BenchmarkFillWriteAt(b *testing.B) {
	benchFill(b, func(b *testing.B, s *Store, rel string, data []byte) {
		if err := writeFrame(b, s, rel, data).Close(); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkFillWritable: the same fill through a writable mapping:
// OpenWrite, map, copy, unmap, Close.
func BenchmarkFillWritable(b *testing.B) {
	benchFill(b, func(b *testing.B, s *Store, rel string, data []byte) {
		f, w := openMapped(b, s, OpenWrite, rel, mmap.MapWritable)
		copy(w.Bytes(), data)
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	})
}

// benchSeal times Seal of a filled frame. With keepOpen the producer's
// descriptor stays open, which forces the copy path.
func benchSeal(b *testing.B, keepOpen, withDigest bool, want SealPath) {
	shmtest.FrameBench(b, func(b *testing.B) {
		s := benchStore(b, Config{PoolDepth: -1})
		data := pattern(frame, 1)
		var digest *[32]byte
		if withDigest {
			d := sha256.Sum256(data)
			digest = &d
		}
		for b.Loop() {
			b.StopTimer()
			st := mustStage(b, s, frame)
			f := writeFrame(b, s, st.RelPath, data)
			if !keepOpen {
				f.Close()
			}
			b.StartTimer()
			sealed, err := s.Seal(st.RelPath, frame, digest)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if sealed.Path != want {
				b.Fatalf("sealed by %v, want %v", sealed.Path, want)
			}
			if keepOpen {
				f.Close()
			}
			mustRemove(b, s, sealed.RelPath)
			b.StartTimer()
		}
	})
}

func BenchmarkSealLease(b *testing.B)       { benchSeal(b, false, false, SealLease) }
func BenchmarkSealLeaseSHA256(b *testing.B) { benchSeal(b, false, true, SealLease) }
func BenchmarkSealCopy(b *testing.B)        { benchSeal(b, true, false, SealCopy) }
func BenchmarkSealCopySHA256(b *testing.B)  { benchSeal(b, true, true, SealCopy) }

// sealedFrame stages, fills and seals one frame for the read benchmarks.
func sealedFrame(b *testing.B, s *Store) string {
	st := mustStage(b, s, frame)
	writeFrame(b, s, st.RelPath, pattern(frame, 1)).Close()
	sealed, err := s.Seal(st.RelPath, frame, nil)
	if err != nil {
		b.Fatal(err)
	}
	return sealed.RelPath
}

// BenchmarkView: a consumer's access to every line of a sealed frame:
// OpenRead, map, touch, unmap, Close. Compare with BenchmarkKernelFloor.
func BenchmarkView(b *testing.B) {
	shmtest.FrameBench(b, func(b *testing.B) {
		s := benchStore(b, Config{PoolDepth: -1})
		rel := sealedFrame(b, s)
		for b.Loop() {
			f, v := openMapped(b, s, OpenRead, rel, mmap.MapFile)
			f.Close()
			shmtest.Touch(v.Bytes())
			if err := v.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkKernelFloor: the least any view can cost: unix.Mmap read-only of
// a sealed file already open, touch every line, munmap.
func BenchmarkKernelFloor(b *testing.B) {
	shmtest.FrameBench(b, func(b *testing.B) {
		s := benchStore(b, Config{PoolDepth: -1})
		f, err := os.Open(filepath.Join(s.Dir(), sealedFrame(b, s)))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		shmtest.MapTouch(b, int(f.Fd()), frame)
	})
}

// BenchmarkPwrite: one pwrite of the frame into a fresh fallocated file
// already open; the baseline for a producer's fill.
func BenchmarkPwrite(b *testing.B) {
	shmtest.FrameBench(b, func(b *testing.B) {
		dir := benchStore(b, Config{PoolDepth: -1}).Dir()
		data := pattern(frame, 1)
		p := filepath.Join(dir, "pwrite")
		for b.Loop() {
			b.StopTimer()
			fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
			if err != nil {
				b.Fatal(err)
			}
			if err := fallocate(fd, frame); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if n, err := unix.Pwrite(fd, data, 0); err != nil || n != frame {
				b.Fatal(n, err)
			}
			b.StopTimer()
			unix.Close(fd)
			unix.Unlink(p)
			b.StartTimer()
		}
	})
}

// BenchmarkCopy: copy() of a frame between two Go slices, the baseline of
// every performance target.
func BenchmarkCopy(b *testing.B) {
	shmtest.FrameBench(b, func(b *testing.B) { shmtest.Copy(b, pattern(frame, 1)) })
}

// BenchmarkLifecycleSizes: a whole artifact's store work (stage, seal,
// collect) in each mode, for artifacts of one size and of 64 sizes taken in
// turn (64 KiB to 8 MiB in 128 KiB steps). It reports the bytes of slot
// files the pool holds at the end (slot-bytes): what the choice of mode
// costs in tmpfs memory when sizes vary.
func BenchmarkLifecycleSizes(b *testing.B) {
	for _, mode := range []Mode{ModeFiles, ModePool} {
		for _, sizes := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/sizes=%d", mode, sizes), func(b *testing.B) {
				s := openAnyStore(b, Config{Root: shmtest.BenchDir(b, "flybus-bench-"), Mode: mode})
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					size := int64(64<<10 + (i%sizes)*128<<10)
					i++
					st := mustStage(b, s, size)
					sealed, err := s.Seal(st.RelPath, size, nil)
					if err != nil {
						b.Fatal(err)
					}
					if err := s.Collect(sealed.RelPath, sealed.Generation); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(s.Stats().SlotBytes), "slot-bytes")
			})
		}
	}
}
