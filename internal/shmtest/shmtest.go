// Package shmtest holds the one helper the tests of mmap, store, router and
// the commands share for a scratch directory on /dev/shm, the tmpfs where
// flybus stores live in production.
package shmtest

import (
	"os"
	"path/filepath"
	"testing"
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
