// Package shmtest holds the helpers the tests of mmap, store, router and
// the commands share for a scratch directory on /dev/shm, the tmpfs where
// flybus stores live in production, and for counting what a test leaves
// open there; and, in bench.go, the fixtures the benchmarks of mmap, store
// and router share: where their files live, the one-frame sub-benchmark,
// a consumer's touch of every line, and the loops of the baselines they
// are judged by (a raw mapping, copy(), a socket ping-pong).
package shmtest

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/flybus/flybus/internal/leakcheck"
)

// Dir returns a fresh directory on /dev/shm whose name starts with prefix,
// removed when the test ends. It is made under the real path of /dev/shm,
// because the store refuses a root reached through a symbolic link (some
// systems link /dev/shm to /run/shm). Where there is no /dev/shm it is
// t.TempDir().
func Dir(t testing.TB, prefix string) string {
	t.Helper()
	base := shmBase()
	if base == "" {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp(base, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// MkdirMode makes dir (and its parents) and gives dir exactly perm, which
// MkdirAll alone does not: it honours the umask. Tests of unsafe store
// roots need the exact mode.
func MkdirMode(t testing.TB, dir string, perm fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, perm); err != nil {
		t.Fatal(err)
	}
}

// FDs is how many descriptors this process holds.
func FDs(t testing.TB) int {
	t.Helper()
	return counter{t}.of(leakcheck.FDs())
}

// Mappings is how many of this process's mappings name a file under dir,
// unlinked ones included.
func Mappings(t testing.TB, dir string) int {
	t.Helper()
	return counter{t}.of(leakcheck.Mappings(dir))
}

// counter fails its test when a count cannot be read: a leak check that
// cannot count proves nothing.
type counter struct{ t testing.TB }

func (c counter) of(n int, err error) int {
	c.t.Helper()
	if err != nil {
		c.t.Fatal(err)
	}
	return n
}

// shmBase is the real path of /dev/shm, or "" where it is not a directory.
func shmBase() string {
	real, err := filepath.EvalSymlinks("/dev/shm")
	if err != nil {
		return ""
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return ""
	}
	return real
}
