package mmap_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/flybus/flybus/internal/shmtest"
	"github.com/flybus/flybus/mmap"
)

// pattern returns n bytes that differ from their neighbours and from zero.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	return b
}

func writeFile(t testing.TB, dir string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, "frame")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func openRead(t testing.TB, p string) *os.File {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestView(t *testing.T) {
	dir := shmtest.Dir(t, "flybus-mmap-test-")
	want := pattern(1228800)
	p := writeFile(t, dir, want)
	fdsBefore := shmtest.FDs(t)

	f := openRead(t, p)
	v, err := mmap.MapFile(f, int64(len(want)))
	if err != nil {
		t.Fatal(err)
	}
	// The mapping keeps the file open in the kernel; the descriptor is not
	// needed any more.
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(v.Bytes(), want) || v.Len() != len(want) {
		t.Fatal("view bytes differ from the file")
	}
	if n := shmtest.Mappings(t, dir); n != 1 {
		t.Fatalf("mappings while open = %d, want 1", n)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}
	if v.Bytes() != nil || v.Len() != 0 {
		t.Fatal("Bytes after Close is not nil")
	}
	if n := shmtest.Mappings(t, dir); n != 0 {
		t.Fatalf("mappings after Close = %d, want 0", n)
	}
	if n := shmtest.FDs(t); n != fdsBefore {
		t.Fatalf("descriptors: %d before, %d after", fdsBefore, n)
	}
}

func TestViewOutlivesUnlink(t *testing.T) {
	dir := shmtest.Dir(t, "flybus-mmap-test-")
	want := pattern(3 * 4096)
	p := writeFile(t, dir, want)
	f := openRead(t, p)
	v, err := mmap.MapFile(f, int64(len(want)))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(v.Bytes(), want) {
		t.Fatal("view changed after unlink")
	}
	// The kernel still lists the mapping, marked deleted.
	if n := shmtest.Mappings(t, dir); n != 1 {
		t.Fatalf("mappings of unlinked file = %d, want 1", n)
	}
}

func TestViewSizes(t *testing.T) {
	dir := shmtest.Dir(t, "flybus-mmap-test-")
	p := writeFile(t, dir, pattern(100))
	f := openRead(t, p)
	defer f.Close()

	// A prefix is fine, and may end inside a page.
	v, err := mmap.MapFile(f, 10)
	if err != nil {
		t.Fatal(err)
	}
	if v.Len() != 10 || !bytes.Equal(v.Bytes(), pattern(10)) {
		t.Fatal("prefix view wrong")
	}
	v.Close()

	// Zero length needs no mapping and still closes cleanly.
	v, err = mmap.MapFile(f, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v.Len() != 0 || shmtest.Mappings(t, dir) != 0 {
		t.Fatal("empty view mapped something")
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}

	for _, size := range []int64{-1, 101, 4096} {
		if _, err := mmap.MapFile(f, size); !errors.Is(err, mmap.ErrSize) {
			t.Errorf("MapFile(size %d) = %v, want ErrSize", size, err)
		}
		if _, err := mmap.MapWritable(f, size); !errors.Is(err, mmap.ErrSize) {
			t.Errorf("MapWritable(size %d) = %v, want ErrSize", size, err)
		}
	}
	if n := shmtest.Mappings(t, dir); n != 0 {
		t.Fatalf("refused maps left %d mappings", n)
	}
}

func TestWritable(t *testing.T) {
	dir := shmtest.Dir(t, "flybus-mmap-test-")
	const size = 1228800
	p := writeFile(t, dir, make([]byte, size))
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	w, err := mmap.MapWritable(f, size)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := pattern(size)
	copy(w.Bytes(), want)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}
	if w.Bytes() != nil {
		t.Fatal("Bytes after Close is not nil")
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("file does not hold what was written through the mapping")
	}
	if n := shmtest.Mappings(t, dir); n != 0 {
		t.Fatalf("mappings after Close = %d, want 0", n)
	}
}

func TestWritableNeedsWriteAccess(t *testing.T) {
	dir := shmtest.Dir(t, "flybus-mmap-test-")
	p := writeFile(t, dir, pattern(4096))
	f := openRead(t, p)
	defer f.Close()
	if w, err := mmap.MapWritable(f, 4096); err == nil {
		w.Close()
		t.Fatal("writable mapping of a read-only descriptor succeeded")
	}
}

// forget maps a view and drops it without Close.
func forget(t *testing.T, p string) {
	f := openRead(t, p)
	defer f.Close()
	if _, err := mmap.MapFile(f, 4096); err != nil {
		t.Fatal(err)
	}
}

func TestLeakedViewIsUnmapped(t *testing.T) {
	dir := shmtest.Dir(t, "flybus-mmap-test-")
	p := writeFile(t, dir, pattern(4096))
	before := mmap.Leaked()
	forget(t, p)
	if n := shmtest.Mappings(t, dir); n != 1 {
		t.Fatalf("mappings = %d, want 1", n)
	}
	// Cleanups run on their own goroutine after a collection finds the view
	// unreachable; collect until the counter moves.
	deadline := time.Now().Add(10 * time.Second)
	for mmap.Leaked() == before {
		if time.Now().After(deadline) {
			t.Fatal("cleanup of a forgotten view never ran")
		}
		runtime.GC()
		runtime.Gosched()
	}
	if n := shmtest.Mappings(t, dir); n != 0 {
		t.Fatalf("mappings after cleanup = %d, want 0", n)
	}
}
