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

// newFile writes data to a file in a fresh directory on /dev/shm and
// returns both.
func newFile(t testing.TB, data []byte) (dir, p string) {
	t.Helper()
	dir = shmtest.Dir(t, "flybus-mmap-test-")
	return dir, writeFile(t, dir, data)
}

// readOnly is newFile of pattern(n), opened read-only and closed when the
// test ends.
func readOnly(t testing.TB, n int) (dir string, f *os.File) {
	t.Helper()
	dir, p := newFile(t, pattern(n))
	f = openRead(t, p)
	t.Cleanup(func() { f.Close() })
	return dir, f
}

func openRead(t testing.TB, p string) *os.File {
	t.Helper()
	return open(t, p, os.O_RDONLY)
}

func openRW(t testing.TB, p string) *os.File {
	t.Helper()
	return open(t, p, os.O_RDWR)
}

func open(t testing.TB, p string, flag int) *os.File {
	t.Helper()
	f, err := os.OpenFile(p, flag, 0)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// wantMappings fails unless this process holds n mappings of files under
// dir.
func wantMappings(t testing.TB, dir string, n int, when string) {
	t.Helper()
	if got := shmtest.Mappings(t, dir); got != n {
		t.Fatalf("mappings %s = %d, want %d", when, got, n)
	}
}

func TestView(t *testing.T) {
	want := pattern(1228800)
	dir, p := newFile(t, want)
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
	wantMappings(t, dir, 1, "while open")
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}
	if v.Bytes() != nil || v.Len() != 0 {
		t.Fatal("Bytes after Close is not nil")
	}
	wantMappings(t, dir, 0, "after Close")
	if n := shmtest.FDs(t); n != fdsBefore {
		t.Fatalf("descriptors: %d before, %d after", fdsBefore, n)
	}
}

func TestViewOutlivesUnlink(t *testing.T) {
	want := pattern(3 * 4096)
	dir, p := newFile(t, want)
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
	wantMappings(t, dir, 1, "of the unlinked file")
}

func TestViewSizes(t *testing.T) {
	dir, f := readOnly(t, 100)

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
	wantMappings(t, dir, 0, "after refused maps")
}

func TestWritable(t *testing.T) {
	const size = 1228800
	dir, p := newFile(t, make([]byte, size))
	f := openRW(t, p)
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
	wantMappings(t, dir, 0, "after Close")
}

func TestWritableNeedsWriteAccess(t *testing.T) {
	_, f := readOnly(t, 4096)
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
	dir, p := newFile(t, pattern(4096))
	before := mmap.Leaked()
	forget(t, p)
	wantMappings(t, dir, 1, "of the forgotten view")
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
	wantMappings(t, dir, 0, "after cleanup")
}
