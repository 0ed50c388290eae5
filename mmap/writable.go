package mmap

import (
	"os"
	"runtime"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Writable is a read-write shared mapping of a file, typically a staging
// file a producer fills before it is sealed. Stores through Bytes reach the
// file directly; there is nothing to flush on tmpfs.
//
// A live Writable keeps the file open in the kernel. The store sees that and
// seals by copying, so close the mapping before sealing to get the cheap,
// copy-free seal.
type Writable struct {
	data    []byte
	closed  atomic.Bool
	cleanup runtime.Cleanup
}

// MapWritable maps the first size bytes of f for reading and writing. f must
// be open for reading and writing; it may be closed right after. A size of
// zero maps nothing.
func MapWritable(f *os.File, size int64) (*Writable, error) {
	data, err := mapFile(f, size, unix.PROT_READ|unix.PROT_WRITE)
	if err != nil {
		return nil, err
	}
	w := &Writable{data: data}
	if len(data) > 0 {
		w.cleanup = runtime.AddCleanup(w, unmapLeaked, data)
	}
	return w, nil
}

// Bytes returns the mapped bytes, valid until Close; after Close it returns
// nil.
func (w *Writable) Bytes() []byte {
	if w.closed.Load() {
		return nil
	}
	return w.data
}

// Len returns the number of mapped bytes, or 0 after Close.
func (w *Writable) Len() int { return len(w.Bytes()) }

// Close unmaps the region. Only the first call does anything; later calls
// return nil. No slice from Bytes may be used after Close.
func (w *Writable) Close() error {
	if w.closed.Swap(true) {
		return nil
	}
	w.cleanup.Stop()
	return unmap(w.data)
}
