package store

import (
	"os"

	"golang.org/x/sys/unix"
)

// Remove unlinks a staging or sealed file, typically when the last owner of
// an artifact lets go. Mappings and descriptors already open keep working;
// the memory is freed when they close. Removing a file that is already gone
// is not an error, and after Close Remove does nothing: the directory is
// gone. It does not touch files the store has not handed out.
func (s *Store) Remove(relPath string) error {
	k, seq := parseName(relPath)
	if k != kindStaging && k != kindSealed {
		return &Error{Op: "remove", RelPath: relPath, Err: ErrInvalidPath}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil
	}
	if k == kindStaging && s.pool.owns(seq) {
		return &Error{Op: "remove", RelPath: relPath, Err: ErrInvalidPath}
	}
	if k == kindStaging {
		s.takeStaging(seq)
	}
	switch err := unix.Unlinkat(s.dirfd, relPath, 0); err {
	case nil:
	case unix.ENOENT:
		return nil
	default:
		return &Error{Op: "remove", RelPath: relPath, Err: os.NewSyscallError("unlinkat", err)}
	}
	if k == kindStaging {
		s.st.staging.Add(-1)
	} else {
		s.st.sealed.Add(-1)
	}
	return nil
}

// dropStaging unlinks a staging file that a seal consumed or gave up on.
func (s *Store) dropStaging(name string) error {
	switch err := unix.Unlinkat(s.dirfd, name, 0); err {
	case nil:
		s.st.staging.Add(-1)
		return nil
	case unix.ENOENT:
		return nil
	default:
		return os.NewSyscallError("unlinkat", err)
	}
}
