package store

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// The byte-level work behind Seal: size checks, hashing, copying.

// errDigest is the mismatch of a file whose bytes hash to another digest.
var errDigest = fmt.Errorf("%w: digest differs", ErrMismatch)

func sizeMismatch(got, want int64) error {
	return fmt.Errorf("%w: file has %d bytes, allocated %d", ErrMismatch, got, want)
}

// checkSize fails with ErrMismatch unless the file open at fd is want bytes.
func checkSize(fd int, want int64) error {
	var st unix.Stat_t
	if err := fstat(fd, &st); err != nil {
		return os.NewSyscallError("fstat", err)
	}
	if st.Size != want {
		return sizeMismatch(st.Size, want)
	}
	return nil
}

// copyBufSize is the chunk copied and hashed at a time: big enough to keep
// system calls few, small enough to stay in L2 between the read, the hash
// and the write.
const copyBufSize = 256 << 10

var copyBufs = sync.Pool{New: func() any { return new([copyBufSize]byte) }}

// checkDigest hashes the first want bytes of fd.
func checkDigest(fd int, want int64, digest *[32]byte) error {
	h := sha256.New()
	if err := eachChunk(fd, want, func(b []byte, _ int64) error { h.Write(b); return nil }); err != nil {
		return err
	}
	return compareDigest(h, digest)
}

// eachChunk reads the first want bytes of fd in copy-buffer chunks and
// hands each, with its offset, to fn; a file shorter than want is a size
// mismatch (it may have shrunk while being read).
func eachChunk(fd int, want int64, fn func(b []byte, off int64) error) error {
	buf := copyBufs.Get().(*[copyBufSize]byte)
	defer copyBufs.Put(buf)
	for off := int64(0); off < want; {
		n := int(min(copyBufSize, want-off))
		r, err := preadFull(fd, buf[:n], off)
		if err != nil {
			return err
		}
		if r < n {
			return sizeMismatch(off+int64(r), want)
		}
		if err := fn(buf[:r], off); err != nil {
			return err
		}
		off += int64(r)
	}
	return nil
}

// copyChecked copies want bytes from src to dst and checks the copy: its
// size, and the digest of exactly the bytes written into it, so a producer
// still writing into src cannot make the checked bytes differ from the
// sealed ones.
func (s *Store) copyChecked(dst, src int, want int64, digest *[32]byte) error {
	var h hash.Hash
	if digest != nil {
		h = sha256.New()
	}
	err := eachChunk(src, want, func(b []byte, off int64) error {
		if err := pwriteFull(dst, b, off); err != nil {
			return err
		}
		s.st.bytesCopied.Add(uint64(len(b)))
		if h != nil {
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// A length that changed while copying means the producer was still at
	// work: what was copied need not be what it meant to seal.
	if err := checkSize(src, want); err != nil {
		return err
	}
	if err := checkSize(dst, want); err != nil {
		return err
	}
	if h != nil {
		return compareDigest(h, digest)
	}
	return nil
}

func compareDigest(h hash.Hash, want *[32]byte) error {
	var sum [sha256.Size]byte
	if [sha256.Size]byte(h.Sum(sum[:0])) != *want {
		return errDigest
	}
	return nil
}

// preadFull reads into b at off until b is full or the file ends.
func preadFull(fd int, b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		r, err := unix.Pread(fd, b[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, os.NewSyscallError("pread", err)
		}
		if r == 0 {
			break
		}
		n += r
	}
	return n, nil
}

// pwriteFull writes all of b at off.
func pwriteFull(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		w, err := unix.Pwrite(fd, b, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return os.NewSyscallError("pwrite", err)
		}
		b, off = b[w:], off+int64(w)
	}
	return nil
}
