package store

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/flybus/flybus/internal/leakcheck"
	"github.com/flybus/flybus/internal/shmtest"
)

func TestStage(t *testing.T) {
	s := openStore(t, Config{PoolDepth: -1})
	before := shmtest.FDs(t)
	for _, size := range []int64{0, 1, 4096, 1228800} {
		st := mustStage(t, s, size)
		if st.Size != size {
			t.Errorf("Size = %d, want %d", st.Size, size)
		}
		if !ValidRelPath(st.RelPath) {
			t.Errorf("RelPath %q is not a valid location", st.RelPath)
		}
		checkFile(t, s, st.RelPath, make([]byte, size), 0o600)
	}
	checkFDs(t, before)
	stats := s.Stats()
	if stats.StagingFiles != 4 || stats.PoolMisses != 4 || stats.PoolHits != 0 || stats.PooledFiles != 0 {
		t.Errorf("Stats = %+v", stats)
	}
	if _, err := s.Stage(-1); err == nil {
		t.Error("Stage(-1) succeeded")
	}
}

// TestStageIsAllocated proves the file's blocks exist before anyone writes:
// a producer's write cannot fail for space.
func TestStageIsAllocated(t *testing.T) {
	s := openStore(t, Config{PoolDepth: -1})
	st := mustStage(t, s, 1228800)
	if got := statBlocks(t, filepath.Join(s.Dir(), st.RelPath)) * 512; got < st.Size {
		t.Errorf("%d bytes allocated, want at least %d", got, st.Size)
	}
}

func TestStagePool(t *testing.T) {
	s := openStore(t, Config{PoolDepth: 2, PoolSizes: 4})
	const size = 1228800

	first := mustStage(t, s, size)
	if st := s.Stats(); st.PoolMisses != 1 || st.PoolHits != 0 {
		t.Fatalf("first Stage: %+v, want one miss", st)
	}
	// The size is now recent; wait for the refill goroutine to prepare it.
	if !s.pool.waitIdle() {
		t.Fatal("pool failed to fill")
	}
	if n := s.pool.readyFiles(size); n != 2 {
		t.Fatalf("%d prepared files, want 2", n)
	}
	if n := files(t, s); n != 4 { // marker, first, two prepared
		t.Fatalf("%d files on disk, want 4", n)
	}

	before := shmtest.FDs(t)
	seen := map[string]bool{first.RelPath: true}
	for i := 0; i < 5; i++ {
		st := mustStage(t, s, size)
		if seen[st.RelPath] {
			t.Fatalf("name %s handed out twice", st.RelPath)
		}
		seen[st.RelPath] = true
		checkFile(t, s, st.RelPath, make([]byte, size), 0o600)
		if !s.pool.waitIdle() {
			t.Fatal("pool failed to refill")
		}
	}
	checkFDs(t, before)
	st := s.Stats()
	if st.PoolHits != 5 || st.PoolMisses != 1 {
		t.Errorf("hits %d misses %d, want 5 and 1", st.PoolHits, st.PoolMisses)
	}
	if st.StagingFiles != 6 || st.PooledFiles != 2 {
		t.Errorf("staging %d pooled %d, want 6 and 2", st.StagingFiles, st.PooledFiles)
	}
	if n := files(t, s); n != 1+6+2 {
		t.Errorf("%d files on disk, want 9", n)
	}
}

func TestStagePoolForgetsOldSizes(t *testing.T) {
	s := openStore(t, Config{PoolDepth: 1, PoolSizes: 2})
	for _, size := range []int64{100, 200, 300} {
		if _, err := s.Stage(size); err != nil {
			t.Fatal(err)
		}
		if !s.pool.waitIdle() {
			t.Fatal("pool failed")
		}
	}
	// 100 fell out of the two recent sizes: its prepared file is gone.
	if n := s.pool.readyFiles(100); n != 0 {
		t.Errorf("%d prepared files of a forgotten size", n)
	}
	if st := s.Stats(); st.PooledFiles != 2 {
		t.Errorf("PooledFiles = %d, want 2", st.PooledFiles)
	}
	if n := files(t, s); n != 1+3+2 {
		t.Errorf("%d files on disk, want 6", n)
	}
	// A size the pool holds is served from it.
	if _, err := s.Stage(200); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.PoolHits != 1 {
		t.Errorf("PoolHits = %d, want 1", st.PoolHits)
	}
}

// TestStagePoolNamesRefused: names the pool has not handed out are not
// the router's to seal or remove.
func TestStagePoolNamesRefused(t *testing.T) {
	s := openStore(t, Config{PoolDepth: 1})
	if _, err := s.Stage(10); err != nil {
		t.Fatal(err)
	}
	if !s.pool.waitIdle() {
		t.Fatal("pool failed")
	}
	s.pool.mu.Lock()
	seq := s.pool.ready[10][0]
	s.pool.mu.Unlock()
	name := fileName(kindStaging, seq)
	if _, err := s.Seal(name, 10, nil); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("Seal of a prepared file: %v, want ErrInvalidPath", err)
	}
	if err := s.Remove(name); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("Remove of a prepared file: %v, want ErrInvalidPath", err)
	}
	st, err := s.Stage(10)
	if err != nil || st.RelPath != name {
		t.Fatalf("Stage = %v, %v; want the prepared %s", st, err, name)
	}
}

func TestStageConcurrent(t *testing.T) {
	s := openStore(t, Config{})
	goroutines := leakcheck.Goroutines()
	var wg sync.WaitGroup
	names := make(chan string, 64)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 16; i++ {
				st, err := s.Stage(int64(4096 * (1 + i%3)))
				if err != nil {
					t.Error(err)
					return
				}
				names <- st.RelPath
			}
		}()
	}
	wg.Wait()
	close(names)
	seen := map[string]bool{}
	for n := range names {
		if seen[n] {
			t.Fatalf("name %s handed out twice", n)
		}
		seen[n] = true
		if err := s.Remove(n); err != nil {
			t.Fatal(err)
		}
	}
	leakcheck.WaitGoroutines(t, goroutines)
	if !s.pool.waitIdle() {
		t.Fatal("pool failed")
	}
	st := s.Stats()
	if st.PoolHits+st.PoolMisses != 64 || st.StagingFiles != 0 {
		t.Errorf("Stats = %+v", st)
	}
	if n := files(t, s); int64(n) != 1+st.PooledFiles {
		t.Errorf("%d files on disk, want marker and %d prepared", n, st.PooledFiles)
	}
}

func TestStageZerosAfterReuseOfSize(t *testing.T) {
	// A staged file is always a fresh inode: bytes written into an earlier
	// file of the same size never show up in a later one.
	s := openStore(t, Config{PoolDepth: 1})
	a := mustStage(t, s, 4096)
	fill(t, s, a.RelPath, pattern(4096, 1))
	if _, err := s.Seal(a.RelPath, 4096, nil); err != nil {
		t.Fatal(err)
	}
	s.pool.waitIdle()
	b := mustStage(t, s, 4096)
	got, err := os.ReadFile(filepath.Join(s.Dir(), b.RelPath))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, make([]byte, 4096)) {
		t.Error("a new staging file is not all zeros")
	}
}

// Prepared staging files are capped at a quarter of MaxBytes: four sizes
// staged once each, two deep, would otherwise keep 4 MiB of files no
// artifact uses on the tmpfs against a 4 MiB bound.
func TestPreparedFilesStayWithinTheirShare(t *testing.T) {
	const maxBytes = 4 << 20
	s := openStore(t, Config{MaxBytes: maxBytes})
	for i := range 4 {
		st := mustStage(t, s, 512<<10+int64(i)*4096)
		if err := s.Remove(st.RelPath); err != nil {
			t.Fatal(err)
		}
		if !s.pool.waitIdle() {
			t.Fatal("the pool failed")
		}
	}
	st := s.Stats()
	if st.PooledBytes > maxBytes/4 || st.PooledFiles == 0 {
		t.Fatalf("%d prepared files of %d bytes, want some and at most %d bytes", st.PooledFiles, st.PooledBytes, maxBytes/4)
	}
	var onDisk int64
	ents, err := os.ReadDir(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() && strings.HasPrefix(e.Name(), "stage-") {
			onDisk += fi.Size()
		}
	}
	if onDisk != st.PooledBytes {
		t.Fatalf("%d bytes of staging files on disk, the store counts %d", onDisk, st.PooledBytes)
	}
}
