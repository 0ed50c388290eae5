package mmap

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// leaked counts mappings released by a cleanup instead of Close.
var leaked atomic.Uint64

// Leaked returns how many View and Writable handles were garbage collected
// without Close since the process started. Each one held its mapping until a
// garbage collection noticed it; a non-zero value points at a missing Close.
func Leaked() uint64 { return leaked.Load() }

// ErrSize reports a size that is negative or beyond the end of the file.
var ErrSize = errors.New("mmap: size out of range for file")

// mapFile maps the first size bytes of f with prot, shared. Size zero yields
// a nil slice and no mapping: mmap refuses a zero length.
func mapFile(f *os.File, size int64, prot int) ([]byte, error) {
	if size < 0 || size > math.MaxInt {
		return nil, fmt.Errorf("%w: %d", ErrSize, size)
	}
	fd := int(f.Fd())
	// Refuse to map past the end of the file: touching such a page raises
	// SIGBUS, which kills a Go program.
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		runtime.KeepAlive(f)
		return nil, os.NewSyscallError("fstat", err)
	}
	if size > st.Size {
		runtime.KeepAlive(f)
		return nil, fmt.Errorf("%w: %d bytes, file has %d", ErrSize, size, st.Size)
	}
	if size == 0 {
		runtime.KeepAlive(f)
		return nil, nil
	}
	// MmapPtr bypasses x/sys's table of active mappings (a global lock and a
	// map insert per call); the handle remembers the region instead.
	p, err := unix.MmapPtr(fd, 0, nil, uintptr(size), prot, unix.MAP_SHARED)
	runtime.KeepAlive(f)
	if err != nil {
		return nil, os.NewSyscallError("mmap", err)
	}
	return unsafe.Slice((*byte)(p), int(size)), nil
}

// unmap releases a region returned by mapFile.
func unmap(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if err := unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(b)), uintptr(len(b))); err != nil {
		return os.NewSyscallError("munmap", err)
	}
	return nil
}

// unmapLeaked is the cleanup of a handle that was never closed. It must not
// refer to the handle, or the handle could never become unreachable.
func unmapLeaked(b []byte) {
	leaked.Add(1)
	_ = unmap(b)
}
