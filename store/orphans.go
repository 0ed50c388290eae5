package store

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Orphan is a dead incarnation's store directory found by Open.
type Orphan struct {
	Dir string // absolute path of the directory
	Err error  // nil if it was removed
}

// sweep removes the store directories under root whose router is gone. A
// directory is an orphan only if its name is a store id, it holds the
// marker, and the marker's lock can be taken; a live router holds that lock
// for its whole life. Anything else, including directories without a
// marker, is never touched.
func sweep(root string) ([]Orphan, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	var found []Orphan
	for _, e := range entries {
		if !e.IsDir() || !ValidStoreID(e.Name()) {
			continue
		}
		dir := filepath.Join(root, e.Name())
		fd, ok := lockDead(dir)
		if !ok {
			continue
		}
		// Remove while holding the lock so a concurrent sweep skips it.
		err := os.RemoveAll(dir)
		unix.Close(fd)
		found = append(found, Orphan{Dir: dir, Err: err})
	}
	return found, nil
}

// lockDead opens and locks dir's marker if nobody holds it. Any failure
// means "not provably dead", and the directory is left alone.
func lockDead(dir string) (int, bool) {
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, false
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, markerName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, false
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return -1, false
	}
	// flock locks belong to the open file description, so this conflicts
	// even with a live store in this same process.
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		unix.Close(fd)
		return -1, false
	}
	return fd, true
}
