package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Checks serve makes before it creates anything, and the undoing of what a
// failed start created: a refused start must leave the machine as it was.

// checkSocketDirs refuses sockets whose directory is missing, before the
// router opens its store, so a typo in --listen creates nothing.
func checkSocketDirs(paths []string) error {
	for _, p := range paths {
		dir := filepath.Dir(p)
		fi, err := os.Stat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("socket %s: the directory %s does not exist (serve creates sockets, not their directories)", p, dir)
		case err != nil:
			return fmt.Errorf("socket %s: %w", p, err)
		case !fi.IsDir():
			return fmt.Errorf("socket %s: %s is not a directory", p, dir)
		}
	}
	return nil
}

// missingDirs lists the directories of path, deepest first, that do not
// exist yet: what creating path will create.
func missingDirs(path string) []string {
	var out []string
	for p := filepath.Clean(path); ; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			return out
		}
		out = append(out, p)
		if filepath.Dir(p) == p {
			return out
		}
	}
}

// removeCreated removes the directories missingDirs listed, deepest first.
// os.Remove leaves a directory that is not empty: anything someone else
// put there meanwhile stays.
func removeCreated(dirs []string) {
	for _, d := range dirs {
		_ = os.Remove(d)
	}
}

// isTmpfs reports whether dir is on a tmpfs. Artifacts are mapped and
// shared through the page cache; on a disk filesystem every frame also
// goes to the disk.
func isTmpfs(dir string) (bool, int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, 0, err
	}
	return int64(st.Type) == unix.TMPFS_MAGIC, int64(st.Type), nil
}
