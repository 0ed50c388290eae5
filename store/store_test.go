package store

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flybus/flybus/internal/leakcheck"
	"github.com/flybus/flybus/internal/shmtest"
)

func TestOpenClose(t *testing.T) {
	root := filepath.Join(shmtest.Dir(t, "flybus-store-test-"), "nested", "root") // Open creates it
	goroutines := leakcheck.Goroutines()
	before := shmtest.FDs(t)

	s, err := Open(Config{Root: root, ID: "store-00000000000000ab"})
	if err != nil {
		t.Fatal(err)
	}
	if s.ID() != "store-00000000000000ab" || s.Root() != root || s.Dir() != filepath.Join(root, s.ID()) {
		t.Fatalf("ID/Root/Dir = %q %q %q", s.ID(), s.Root(), s.Dir())
	}
	for _, c := range []struct {
		path string
		perm fs.FileMode
	}{
		{root, fs.ModeDir | 0o700},
		{s.Dir(), fs.ModeDir | 0o700},
		{filepath.Join(s.Dir(), markerName), 0o600},
	} {
		fi, err := os.Lstat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != c.perm {
			t.Errorf("%s: mode %v, want %v", c.path, fi.Mode(), c.perm)
		}
	}
	marker, _ := os.ReadFile(filepath.Join(s.Dir(), markerName))
	if !strings.HasPrefix(string(marker), "flybus store "+s.ID()) {
		t.Errorf("marker says %q", marker)
	}
	if len(s.Orphans()) != 0 {
		t.Errorf("orphans in a fresh root: %v", s.Orphans())
	}
	// The store holds two descriptors: its directory and the locked marker.
	checkFDs(t, before+2)

	if _, err := s.Stage(4096); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := os.Lstat(s.Dir()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("store directory survives Close: %v", err)
	}
	if _, err := os.Lstat(root); err != nil {
		t.Fatalf("root removed by Close: %v", err)
	}
	checkFDs(t, before)
	leakcheck.WaitGoroutines(t, goroutines)

	if _, err := s.Stage(1); !errors.Is(err, ErrClosed) {
		t.Errorf("Stage after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Seal("stage-0000000000000001", 1, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Seal after Close: %v, want ErrClosed", err)
	}
	if err := s.Remove("stage-0000000000000001"); err != nil {
		t.Errorf("Remove after Close: %v, want nil", err)
	}
}

func TestOpenRefuses(t *testing.T) {
	root := shmtest.Dir(t, "flybus-store-test-")
	for _, cfg := range []Config{
		{Root: ""},
		{Root: root, ID: "store-ABCDEF0123456789"},
		{Root: root, ID: "store-123"},
		{Root: root, ID: "../store-0123456789abcdef"},
	} {
		if s, err := Open(cfg); err == nil {
			s.Close()
			t.Errorf("Open(%+v) succeeded", cfg)
		}
	}
	if s, err := Open(Config{Root: root}); err != nil {
		t.Errorf("Open with a generated id: %v", err)
	} else if !ValidStoreID(s.ID()) {
		t.Errorf("generated id %q is invalid", s.ID())
		s.Close()
	} else {
		s.Close()
	}
}

func TestOpenSameIDTwice(t *testing.T) {
	live := openStore(t, Config{ID: "store-0000000000000001", PoolDepth: -1})
	if _, err := live.Stage(10); err != nil {
		t.Fatal(err)
	}
	s, err := Open(Config{Root: live.Root(), ID: live.ID()})
	if err == nil {
		s.Close()
		t.Fatal("a second store with a live store's id opened")
	}
	if !errors.Is(err, fs.ErrExist) {
		t.Errorf("error %v, want EEXIST", err)
	}
	// The failed Open must not have touched the live store.
	if n := files(t, live); n != 2 {
		t.Errorf("live store holds %d files, want 2", n)
	}
}

func TestOrphanSweep(t *testing.T) {
	root := shmtest.Dir(t, "flybus-store-test-")

	// A live incarnation in this very process: flock conflicts between two
	// open file descriptions even in one process. (Opened first, or its own
	// sweep would take the dead store below.)
	live := openStore(t, Config{Root: root})

	// A dead incarnation: its directory and marker remain, its lock is gone.
	dead, err := Open(Config{Root: root, PoolDepth: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dead.Stage(4096); err != nil {
		t.Fatal(err)
	}
	dead.abandon()
	if n, _ := leakcheck.Files(dead.Dir()); n != 2 {
		t.Fatalf("abandoned store holds %d files, want 2", n)
	}

	// Things that are not dead stores.
	noMarker := filepath.Join(root, "store-0123456789abcdef")
	mkdir(t, noMarker)
	write(t, filepath.Join(noMarker, "data"))
	notAnID := filepath.Join(root, "keep-me")
	mkdir(t, notAnID)
	write(t, filepath.Join(notAnID, markerName))
	plainFile := filepath.Join(root, "store-fedcba9876543210")
	write(t, plainFile)
	symlinked := filepath.Join(root, "store-1111111111111111")
	deadElsewhere := filepath.Join(shmtest.Dir(t, "flybus-store-test-"), "store-2222222222222222")
	mkdir(t, deadElsewhere)
	write(t, filepath.Join(deadElsewhere, markerName))
	if err := os.Symlink(deadElsewhere, symlinked); err != nil {
		t.Fatal(err)
	}
	markerLink := filepath.Join(root, "store-3333333333333333")
	mkdir(t, markerLink)
	if err := os.Symlink(filepath.Join(deadElsewhere, markerName), filepath.Join(markerLink, markerName)); err != nil {
		t.Fatal(err)
	}

	s := openStore(t, Config{Root: root})
	orphans := s.Orphans()
	if len(orphans) != 1 || orphans[0].Dir != dead.Dir() || orphans[0].Err != nil {
		t.Fatalf("Orphans() = %v, want [{%s <nil>}]", orphans, dead.Dir())
	}
	if _, err := os.Lstat(dead.Dir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("dead store survives: %v", err)
	}
	for _, p := range []string{
		filepath.Join(live.Dir(), markerName),
		filepath.Join(noMarker, "data"),
		filepath.Join(notAnID, markerName),
		plainFile,
		symlinked,
		filepath.Join(deadElsewhere, markerName),
		filepath.Join(markerLink, markerName),
	} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("sweep removed %s: %v", p, err)
		}
	}
	// The live store still works.
	if _, err := live.Stage(100); err != nil {
		t.Errorf("live store after sweep: %v", err)
	}
}

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o700); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, p string) {
	t.Helper()
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
}
