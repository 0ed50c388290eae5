package leakcheck_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/flybus/flybus/internal/leakcheck"
	"golang.org/x/sys/unix"
)

func TestWaitGoroutines(t *testing.T) {
	base := leakcheck.Goroutines()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-stop
	}()
	if leakcheck.Goroutines() <= base {
		t.Fatal("started goroutine not counted")
	}
	close(stop)
	leakcheck.WaitGoroutines(t, base)
	<-done
}

func TestFDs(t *testing.T) {
	before, err := leakcheck.FDs()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	during, _ := leakcheck.FDs()
	f.Close()
	after, _ := leakcheck.FDs()
	if during != before+1 || after != before {
		t.Fatalf("fds before/during/after = %d/%d/%d", before, during, after)
	}
}

func TestMappingsAndFiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o700); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "a", "b", "file")
	if err := os.WriteFile(p, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(p, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if n, err := leakcheck.Files(dir); err != nil || n != 1 {
		t.Fatalf("Files = %d, %v; want 1", n, err)
	}

	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := leakcheck.Mappings(dir); err != nil || n != 1 {
		t.Fatalf("Mappings while mapped = %d, %v; want 1", n, err)
	}
	if err := unix.Munmap(m); err != nil {
		t.Fatal(err)
	}
	if n, err := leakcheck.Mappings(dir); err != nil || n != 0 {
		t.Fatalf("Mappings after unmap = %d, %v; want 0", n, err)
	}
}
