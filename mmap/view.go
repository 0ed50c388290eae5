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
type View struct{ mapped }

// Writable is a read-write shared mapping of a file, typically a staging
// file a producer fills before it is sealed. Stores through Bytes reach the
// file directly; there is nothing to flush on tmpfs.
//
// A live Writable keeps the file open in the kernel. The store sees that and
// seals by copying, so close the mapping before sealing to get the cheap,
// copy-free seal.
type Writable struct{ mapped }

// MapFile maps the first size bytes of f read-only. f may be closed right
// after: the mapping keeps the file open in the kernel until Close. A size of
// zero maps nothing and yields an empty view.
func MapFile(f *os.File, size int64) (*View, error) {
	v := &View{}
	if err := mapInto(v, &v.mapped, f, size, unix.PROT_READ); err != nil {
		return nil, err
	}
	return v, nil
}

// MapWritable maps the first size bytes of f for reading and writing. f must
// be open for reading and writing; it may be closed right after. A size of
// zero maps nothing.
func MapWritable(f *os.File, size int64) (*Writable, error) {
	w := &Writable{}
	if err := mapInto(w, &w.mapped, f, size, unix.PROT_READ|unix.PROT_WRITE); err != nil {
		return nil, err
	}
	return w, nil
}

// mapped is what View and Writable share: the bytes, whether they were
// unmapped, and the safety net that unmaps them if the handle is collected
// without Close.
type mapped struct {
	data    []byte
	closed  atomic.Bool
	cleanup runtime.Cleanup
}

// mapInto maps f into m; owner is the handle m belongs to, whose
// collection triggers the safety net.
func mapInto[T any](owner *T, m *mapped, f *os.File, size int64, prot int) error {
	data, err := mapFile(f, size, prot)
	if err != nil {
		return err
	}
	m.data = data
	if len(data) > 0 {
		m.cleanup = runtime.AddCleanup(owner, unmapLeaked, data)
	}
	return nil
}

// Bytes returns the mapped bytes, valid until Close; after Close it returns
// nil. A View's bytes must not be written.
func (m *mapped) Bytes() []byte {
	if m.closed.Load() {
		return nil
	}
	return m.data
}

// Len returns the number of mapped bytes, or 0 after Close.
func (m *mapped) Len() int { return len(m.Bytes()) }

// Close unmaps the bytes. Only the first call does anything; later calls
// return nil. No slice from Bytes may be used after Close.
func (m *mapped) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	m.cleanup.Stop()
	return unmap(m.data)
}
