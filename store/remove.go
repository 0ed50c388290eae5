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
	return s.Collect(relPath, 1)
}

// Collect ends generation gen of the artifact at relPath: in files mode
// it removes the file (see Remove); in pool mode the slot is made writable
// again and goes back to its free list, or is quarantined when a writer
// still has it open. A generation the slot has left is ignored.
func (s *Store) Collect(relPath string, gen uint64) error {
	if s.mode == ModePool {
		s.mu.RLock()
		defer s.mu.RUnlock()
		if s.closed {
			return nil
		}
		return s.recycleSlot(relPath, gen)
	}
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
	s.st.unlinks.Add(1)
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

// Retire ends generation gen of the artifact at relPath for good. In files
// mode it is Remove. In pool mode the slot is unlinked instead of going back
// to its free list: a process that still maps it keeps that generation's
// bytes, and the next artifact of its size gets a new slot under a new id.
// The router retires what a connection that ended still owned, because its
// program may go on reading a view it never closed. A generation the slot
// has left is ignored.
func (s *Store) Retire(relPath string, gen uint64) error {
	if s.mode != ModePool {
		return s.Collect(relPath, gen)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil
	}
	sl, _, err := s.slots.inUse(relPath, gen)
	if sl == nil {
		return err
	}
	s.retireSlot(sl)
	return nil
}

// dropStaging unlinks a staging file that a seal consumed or gave up on.
func (s *Store) dropStaging(name string) error {
	s.st.unlinks.Add(1)
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
