package shmtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Dir's directory is fresh, reached through no symbolic link (a store
// root must not be), on /dev/shm when there is one, and gone after the
// test.
func TestDir(t *testing.T) {
	var dir string
	t.Run("use", func(t *testing.T) {
		dir = Dir(t, "flybus-shmtest-")
		if real, err := filepath.EvalSymlinks(dir); err != nil || real != dir {
			t.Fatalf("%s resolves to %s (%v)", dir, real, err)
		}
		if base := shmBase(); base != "" && (filepath.Dir(dir) != base || !strings.HasPrefix(filepath.Base(dir), "flybus-shmtest-")) {
			t.Fatalf("%s is not a flybus-shmtest- directory on %s", dir, base)
		}
		ents, err := os.ReadDir(dir)
		if err != nil || len(ents) != 0 {
			t.Fatalf("not a fresh directory: %v %v", ents, err)
		}
		if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o444); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s outlived its test: %v", dir, err)
	}
}
