package mmap

import (
	"os"
	"runtime"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// View is a read-only shared mapping of a file, typically a sealed artifact.
// The bytes must never be written: the pages are mapped without write
// permission and a write faults.
type View struct {
	data    []byte
	closed  atomic.Bool
	cleanup runtime.Cleanup
}

// MapFile maps the first size bytes of f read-only. f may be closed right
// after: the mapping keeps the file open in the kernel until Close. A size of
// zero maps nothing and yields an empty view.
func MapFile(f *os.File, size int64) (*View, error) {
	data, err := mapFile(f, size, unix.PROT_READ)
	if err != nil {
		return nil, err
	}
	v := &View{data: data}
	if len(data) > 0 {
		v.cleanup = runtime.AddCleanup(v, unmapLeaked, data)
	}
	return v, nil
}

// Bytes returns the mapped bytes. The slice is valid until Close and must
// not be written; after Close, Bytes returns nil.
func (v *View) Bytes() []byte {
	if v.closed.Load() {
		return nil
	}
	return v.data
}

// Len returns the number of mapped bytes, or 0 after Close.
func (v *View) Len() int { return len(v.Bytes()) }

// Close unmaps the view. Only the first call does anything; later calls
// return nil. No slice from Bytes may be used after Close.
func (v *View) Close() error {
	if v.closed.Swap(true) {
		return nil
	}
	v.cleanup.Stop()
	return unmap(v.data)
}
