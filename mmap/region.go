package mmap

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"sync/atomic"

	mmapgo "github.com/edsrzf/mmap-go"
	"golang.org/x/sys/unix"
)

// Region is a long-lived read-only shared mapping of a whole file: a
// consumer's cached mapping of a pooled store's slot, made once and read
// for many generations of the slot. Regions are made off the hot path, so
// they use mmap-go's MapRegion, whose bookkeeping (a slice header it
// unmaps by) costs nothing that matters there; per-view mappings, made and
// unmapped per frame, use MmapPtr directly (MapFile) to skip x/sys's table
// of active mappings.
type Region struct {
	m       mmapgo.MMap
	closed  atomic.Bool
	cleanup runtime.Cleanup
}

// MapRegion maps the first size bytes of f read-only. f may be closed right
// after. The file must keep at least size bytes while mapped.
func MapRegion(f *os.File, size int64) (*Region, error) {
	if size <= 0 || size > math.MaxInt {
		return nil, fmt.Errorf("%w: %d", ErrSize, size)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, os.NewSyscallError("fstat", err)
	}
	if size > st.Size {
		return nil, fmt.Errorf("%w: %d bytes, file has %d", ErrSize, size, st.Size)
	}
	m, err := mmapgo.MapRegion(f, int(size), mmapgo.RDONLY, 0, 0)
	if err != nil {
		return nil, err
	}
	r := &Region{m: m}
	r.cleanup = runtime.AddCleanup(r, unmapRegionLeaked, m)
	return r, nil
}

func unmapRegionLeaked(m mmapgo.MMap) {
	leaked.Add(1)
	m.Unmap()
}

// Bytes returns the mapped bytes, valid until Close; nil after. Never write
// to them.
func (r *Region) Bytes() []byte {
	if r.closed.Load() {
		return nil
	}
	return r.m
}

// Close unmaps the region. Idempotent.
func (r *Region) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	r.cleanup.Stop()
	return r.m.Unmap()
}
