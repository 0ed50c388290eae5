package store

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Staging is a staging file handed out for a producer to fill.
type Staging struct {
	RelPath string // relative to the store directory
	Size    int64  // the allocated length; Seal expects exactly this
	// Slot and Generation name the slot and its use in pool mode (the
	// artifact's id and generation); zero and 1 in files mode.
	Slot       uint64
	Generation uint64
}

// Stage returns a fresh staging file of exactly size bytes, mode 0600, all
// zeros and already allocated, so a producer's writes cannot fail for space.
// The store keeps no descriptor open to it: the producer's must be the only
// ones, or Seal will have to copy.
//
// For a size staged recently this takes a file prepared ahead by the pool
// (a hit); otherwise the file is created on the caller's path (a miss).
func (s *Store) Stage(size int64) (Staging, error) {
	if size < 0 {
		return Staging{}, &Error{Op: "stage", Err: fmt.Errorf("negative size %d", size)}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return Staging{}, &Error{Op: "stage", Err: ErrClosed}
	}
	if s.mode == ModePool {
		return s.stageSlot(size)
	}
	if seq, ok := s.pool.take(size); ok {
		s.st.poolHits.Add(1)
		s.st.pooled.Add(-1)
		s.st.staging.Add(1)
		return Staging{RelPath: fileName(kindStaging, seq), Size: size, Generation: 1}, nil
	}
	s.st.poolMisses.Add(1)
	seq := s.seq.Add(1)
	name := fileName(kindStaging, seq)
	if err := s.createStaging(seq, size); err != nil {
		return Staging{}, &Error{Op: "stage", RelPath: name, Err: err}
	}
	s.st.staging.Add(1)
	return Staging{RelPath: name, Size: size, Generation: 1}, nil
}

// fileID is an inode's identity. Seal checks that a staging name still
// leads to the inode the store created under it.
type fileID struct{ dev, ino uint64 }

func idOf(st *unix.Stat_t) fileID { return fileID{dev: uint64(st.Dev), ino: st.Ino} }

// createStaging creates staging file seq as a new inode of size allocated
// bytes, records its identity and closes it. On error nothing is left
// behind.
func (s *Store) createStaging(seq uint64, size int64) error {
	name := fileName(kindStaging, seq)
	s.st.opens.Add(1)
	fd, err := unix.Openat(s.dirfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return os.NewSyscallError("openat", err)
	}
	var st unix.Stat_t
	if err = unix.Fstat(fd, &st); err != nil {
		err = os.NewSyscallError("fstat", err)
	}
	if err == nil && size > 0 {
		s.st.fallocates.Add(1)
		err = fallocate(fd, size)
	}
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = os.NewSyscallError("close", cerr)
	}
	if err != nil {
		unix.Unlinkat(s.dirfd, name, 0)
		return err
	}
	s.inoMu.Lock()
	s.inodes[seq] = idOf(&st)
	s.inoMu.Unlock()
	return nil
}

// takeStaging removes and returns the identity recorded for staging file
// seq; false if the store never created it (or already sealed it).
func (s *Store) takeStaging(seq uint64) (fileID, bool) {
	s.inoMu.Lock()
	defer s.inoMu.Unlock()
	id, ok := s.inodes[seq]
	delete(s.inodes, seq)
	return id, ok
}

// fallocate allocates size bytes at the start of fd. tmpfs gives up with
// EINTR when a signal is pending, and the Go runtime signals its threads to
// preempt goroutines, so EINTR is retried; pages allocated before the
// interruption stay, so a retry resumes cheaply.
func fallocate(fd int, size int64) error {
	for {
		err := unix.Fallocate(fd, 0, 0, size)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return os.NewSyscallError("fallocate", err)
		}
		return nil
	}
}

// refill runs the pool's jobs off the callers' path until the pool stops.
// After a failed job it waits for the next Stage rather than retry at once,
// so a full filesystem does not make it spin.
func (s *Store) refill() {
	p := s.pool
	defer close(p.done)
	for {
		select {
		case <-p.quit:
			return
		case <-p.wake:
		}
		for {
			j, ok := p.next()
			if !ok {
				break
			}
			err := s.runJob(j)
			p.finish(j, err)
			if err != nil {
				s.st.poolErrors.Add(1)
				break
			}
		}
	}
}

func (s *Store) runJob(j job) error {
	if j.drop {
		s.takeStaging(j.seq)
		s.st.unlinks.Add(1)
		if err := unix.Unlinkat(s.dirfd, fileName(kindStaging, j.seq), 0); err != nil && err != unix.ENOENT {
			return os.NewSyscallError("unlinkat", err)
		}
		s.st.pooled.Add(-1)
		return nil
	}
	if err := s.createStaging(j.seq, j.size); err != nil {
		return err
	}
	s.st.pooled.Add(1)
	return nil
}
