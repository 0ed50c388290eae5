package store

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// SealPath says how Seal made a staging file immutable.
type SealPath uint8

const (
	// SealLease: the kernel proved no other open file description of the
	// inode existed, so the file was made read-only and renamed in place.
	// No byte moved.
	SealLease SealPath = iota + 1
	// SealCopy: someone still had the file open or mapped, so its bytes
	// were copied into a fresh inode and the staging file was unlinked.
	SealCopy
)

func (p SealPath) String() string {
	switch p {
	case SealLease:
		return "lease"
	case SealCopy:
		return "copy"
	}
	return "SealPath(?)"
}

// Sealed is the immutable file a seal produced.
type Sealed struct {
	RelPath string // relative to the store directory
	Size    int64
	Path    SealPath
	// Slot and Generation name the sealed artifact in pool mode: a copying
	// seal moves it to another slot. Zero and 1 in files mode.
	Slot       uint64
	Generation uint64
}

// Seal makes the artifact staged at relPath immutable and returns where it
// now lives. The file must still be exactly wantSize bytes long and, if
// digest is not nil, its bytes must hash to *digest under SHA-256;
// otherwise Seal fails with ErrMismatch. Seal never waits for the producer.
//
// Seal first proves that nobody can still write the bytes, with a lease the
// kernel grants only when no descriptor or writable mapping of the file is
// open for writing in any process; then it checks them and makes the file
// 0444. Files mode takes a write lease (no other open description at all)
// and renames the file into its sealed name; pool mode takes a read lease on
// the slot, so consumers' read-only mappings of earlier generations do not
// stand in the way, and the slot keeps its name. If the lease is refused, the
// bytes are copied into a fresh file (files mode) or another slot (pool
// mode, named in the result), which is checked and sealed instead, so a
// producer that kept a descriptor or a writable mapping writes only to
// something no reader is given; in pool mode the refused slot is kept out of
// use until nobody writes it.
//
// Only the file Stage created under relPath is sealed, and only while it
// has that one name: a file put in its place (a hard link, a rename over
// it) or given a second name fails with ErrReplaced. On failure the staging
// file is removed (files mode) or the slot recycled or retired (pool mode).
func (s *Store) Seal(relPath string, wantSize int64, digest *[32]byte) (Sealed, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return Sealed{}, &Error{Op: "seal", RelPath: relPath, Err: ErrClosed}
	}
	if s.mode == ModePool {
		return s.sealSlot(relPath, wantSize, digest)
	}
	k, seq := parseName(relPath)
	if k != kindStaging || wantSize < 0 {
		return Sealed{}, &Error{Op: "seal", RelPath: relPath, Err: ErrInvalidPath}
	}
	if s.pool.owns(seq) {
		return Sealed{}, &Error{Op: "seal", RelPath: relPath, Err: ErrInvalidPath}
	}
	// The staging file is gone after this call whatever happens, so its
	// record goes now.
	id, known := s.takeStaging(seq)
	sealed := fileName(kindSealed, seq)
	path, err := s.seal(relPath, sealed, seq, id, known, wantSize, digest)
	if err != nil {
		if derr := s.dropStaging(relPath); derr != nil {
			err = errors.Join(err, derr)
		}
		if errors.Is(err, ErrMismatch) {
			s.st.sealMismatch.Add(1)
		} else {
			s.st.sealFailures.Add(1)
		}
		return Sealed{}, &Error{Op: "seal", RelPath: relPath, Err: err}
	}
	s.st.sealed.Add(1)
	if path == SealLease {
		s.st.staging.Add(-1) // renamed; the copy path unlinked it already
		s.st.leaseSeals.Add(1)
	} else {
		s.st.copySeals.Add(1)
	}
	return Sealed{RelPath: sealed, Size: wantSize, Path: path, Generation: 1}, nil
}

func (s *Store) seal(staging, sealed string, seq uint64, id fileID, known bool, want int64, digest *[32]byte) (SealPath, error) {
	// O_NONBLOCK only guards against hanging on a FIFO planted under a
	// staging name; it changes nothing for a regular file.
	s.st.opens.Add(1)
	fd, err := unix.Openat(s.dirfd, staging, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, os.NewSyscallError("openat", err)
	}
	defer unix.Close(fd)
	// Whoever can write the store directory can put another file under
	// the staging name (a hard link, a rename over it); its bytes must not
	// become the artifact, so only the inode created under that name, with
	// no other name, is sealed. From here on everything is read through
	// fd, which cannot change inode.
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, os.NewSyscallError("fstat", err)
	}
	if err := checkStaging(&st, id, known); err != nil {
		return 0, err
	}

	leased, err := setLease(fd)
	if err != nil {
		return 0, err
	}
	if leased {
		done, err := s.sealInPlace(fd, staging, sealed, idOf(&st), want, digest)
		// Dropping the lease lets any open that blocked on it go ahead;
		// the file is read-only under its sealed name by then.
		unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_UNLCK)
		if err != nil || done {
			return SealLease, err
		}
	}
	return SealCopy, s.sealByCopy(fd, staging, sealed, seq, want, digest)
}

// setLease takes a write lease on fd, reporting false when the kernel
// refuses because another open file description of the inode exists.
// F_SETLEASE needs the caller to own the file or hold CAP_LEASE; the store
// creates its staging files, so it owns them.
func setLease(fd int) (bool, error) { return takeLease(fd, unix.F_WRLCK) }

// takeLease takes a lease of kind (F_RDLCK or F_WRLCK) on fd, reporting
// false when the kernel refuses it because of other openers.
func takeLease(fd, kind int) (bool, error) {
	switch err := setLeaseFcntl(fd, kind); err {
	case nil:
		return true, nil
	case unix.EAGAIN:
		return false, nil
	default:
		return false, os.NewSyscallError("fcntl(F_SETLEASE)", err)
	}
}

// checkStaging refuses a staging file that is not the inode the store
// created (id; known is false if it created none under this name), or that
// has another name.
func checkStaging(st *unix.Stat_t, id fileID, known bool) error {
	switch {
	case !known:
		return fmt.Errorf("%w: the store staged no file under this name", ErrReplaced)
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("%w: not a regular file", ErrReplaced)
	case idOf(st) != id:
		return fmt.Errorf("%w: the name leads to inode %d, not to the file the store created (inode %d)", ErrReplaced, st.Ino, id.ino)
	case st.Nlink != 1:
		// Another name is a way to open the inode for writing once it
		// is sealed, or a file the producer could not otherwise publish.
		return fmt.Errorf("%w: the file has %d links, not 1", ErrReplaced, st.Nlink)
	}
	return nil
}

// checkNamed refuses a sealed name that does not lead to inode id: the
// name was swapped while the seal ran. The file is unlinked.
func (s *Store) checkNamed(name string, id fileID) error {
	var st unix.Stat_t
	if err := unix.Fstatat(s.dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return os.NewSyscallError("fstatat", err)
	}
	if idOf(&st) != id {
		unix.Unlinkat(s.dirfd, name, 0)
		return fmt.Errorf("%w: %s was swapped while it was sealed", ErrReplaced, name)
	}
	return nil
}

// sealInPlace checks, freezes and renames a leased staging file. It reports
// false, with no error, when the file must be copied after all.
func (s *Store) sealInPlace(fd int, staging, sealed string, id fileID, want int64, digest *[32]byte) (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, os.NewSyscallError("fstat", err)
	}
	// The lease counts open files, not names, and link(2) does not break
	// it: a name added since the first check is refused the same way.
	if st.Nlink != 1 {
		return false, fmt.Errorf("%w: the file has %d links, not 1", ErrReplaced, st.Nlink)
	}
	if st.Size != want {
		return false, sizeMismatch(st.Size, want)
	}
	if digest != nil {
		if err := checkDigest(fd, want, digest); err != nil {
			return false, err
		}
	}
	if err := unix.Fchmod(fd, 0o444); err != nil {
		return false, os.NewSyscallError("fchmod", err)
	}
	if err := unix.Renameat2(s.dirfd, staging, s.dirfd, sealed, unix.RENAME_NOREPLACE); err != nil {
		return false, os.NewSyscallError("renameat2", err)
	}
	// The rename goes by name, and a lease does not stop a rename over the
	// staging name while the bytes were checked.
	if err := s.checkNamed(sealed, id); err != nil {
		s.st.staging.Add(-1) // the rename consumed the staging name
		return true, err
	}
	return true, nil
}

// sealByCopy copies the staging file open at src into a fresh sealed inode.
func (s *Store) sealByCopy(src int, staging, sealed string, seq uint64, want int64, digest *[32]byte) error {
	// Unlink the staging name before reading: from here on whatever the
	// producer writes through a descriptor or mapping it kept lands in an
	// inode nobody will read. src keeps it readable for the copy.
	if err := s.dropStaging(staging); err != nil {
		return err
	}
	if err := checkSize(src, want); err != nil {
		return err
	}
	tmp := fileName(kindCopy, seq)
	s.st.opens.Add(1)
	dst, err := unix.Openat(s.dirfd, tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return os.NewSyscallError("openat", err)
	}
	err = s.copyChecked(dst, src, want, digest)
	if err == nil {
		if ferr := unix.Fchmod(dst, 0o444); ferr != nil {
			err = os.NewSyscallError("fchmod", ferr)
		}
	}
	var st unix.Stat_t
	if err == nil {
		if serr := unix.Fstat(dst, &st); serr != nil {
			err = os.NewSyscallError("fstat", serr)
		}
	}
	if cerr := unix.Close(dst); err == nil && cerr != nil {
		err = os.NewSyscallError("close", cerr)
	}
	if err == nil {
		if rerr := unix.Renameat2(s.dirfd, tmp, s.dirfd, sealed, unix.RENAME_NOREPLACE); rerr != nil {
			err = os.NewSyscallError("renameat2", rerr)
		} else {
			err = s.checkNamed(sealed, idOf(&st))
		}
	}
	if err != nil {
		unix.Unlinkat(s.dirfd, tmp, 0)
	}
	return err
}
