package store

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/flybus/flybus/internal/leakcheck"
	"github.com/flybus/flybus/internal/shmtest"
	"golang.org/x/sys/unix"
)

// openStore opens a files-mode store under a fresh root and closes it when
// the test ends (openPool opens a pooled one).
func openStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	cfg.Mode = ModeFiles
	return openAnyStore(t, cfg)
}

func openAnyStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	if cfg.Root == "" {
		cfg.Root = shmtest.Dir(t, "flybus-store-test-")
	}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// checkFDs fails if the number of open descriptors is not n.
func checkFDs(t testing.TB, n int) {
	t.Helper()
	if got := shmtest.FDs(t); got != n {
		t.Fatalf("open descriptors: %d, want %d", got, n)
	}
}

// files counts the regular files in the store directory, the marker
// included.
func files(t testing.TB, s *Store) int {
	t.Helper()
	n, err := leakcheck.Files(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

// fill writes data into a staging file through a descriptor and closes it,
// as a well-behaved producer does.
func fill(t testing.TB, s *Store, rel string, data []byte) {
	t.Helper()
	f := openIn(t, s, OpenWrite, rel)
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// checkFile fails unless rel in s holds exactly want with permissions perm.
func checkFile(t testing.TB, s *Store, rel string, want []byte, perm fs.FileMode) {
	t.Helper()
	p := filepath.Join(s.Dir(), rel)
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != perm {
		t.Errorf("%s: mode %v, want %v", rel, fi.Mode(), perm)
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: contents differ (%d bytes, want %d)", rel, len(got), len(want))
	}
}

func checkGone(t testing.TB, s *Store, rel string) {
	t.Helper()
	if _, err := os.Lstat(filepath.Join(s.Dir(), rel)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s still exists (%v)", rel, err)
	}
}

func statBlocks(t testing.TB, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks
}

// openIn opens rel of s with open (OpenRead or OpenWrite), as a client
// resolving a location does.
func openIn(t testing.TB, s *Store, open func(root, storeID, relPath string) (*os.File, error), rel string) *os.File {
	t.Helper()
	f, err := open(s.Root(), s.ID(), rel)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// mapIn maps n bytes of rel of s with mapFile (mmap.MapFile or
// mmap.MapWritable) and closes the descriptor, which the mapping outlives.
func mapIn[M any](t testing.TB, s *Store, open func(root, storeID, relPath string) (*os.File, error), rel string, mapFile func(*os.File, int64) (M, error), n int64) M {
	t.Helper()
	f := openIn(t, s, open, rel)
	m, err := mapFile(f, n)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustStage(t testing.TB, s *Store, size int64) Staging {
	t.Helper()
	st, err := s.Stage(size)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// mustSeal seals st, which holds data, checking data's digest.
func mustSeal(t testing.TB, s *Store, st Staging, data []byte) Sealed {
	t.Helper()
	d := sha256.Sum256(data)
	out, err := s.Seal(st.RelPath, int64(len(data)), &d)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
