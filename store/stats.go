package store

import "sync/atomic"

// Stats is a snapshot of a store's files and counters. The file counts are
// kept by the store as it creates and removes files, not by scanning the
// directory.
type Stats struct {
	// Files on disk, by kind.
	PooledFiles  int64 // prepared staging files not yet handed out
	PooledBytes  int64 // their bytes (and of those being prepared or dropped)
	StagingFiles int64 // staging files handed out, not yet sealed or removed
	SealedFiles  int64 // sealed files not yet removed

	PoolHits   uint64 // Stage calls served by a prepared file
	PoolMisses uint64 // Stage calls that created a file on the caller's path
	PoolErrors uint64 // background preparations that failed

	LeaseSeals   uint64 // seals that proved no writer remained and moved no bytes
	CopySeals    uint64 // seals that copied because a writer remained
	SealMismatch uint64 // seals refused with ErrMismatch
	SealFailures uint64 // seals that failed for any other reason
	BytesCopied  uint64 // bytes written by copying seals

	// Pool mode: slot files, those free or quarantined, and their bytes.
	Slots, FreeSlots, QuarantinedSlots int
	SlotBytes                          int64
	// SlotsRetired counts slots unlinked by Retire instead of reused.
	SlotsRetired uint64

	// System calls on files, for proving what a steady state costs.
	Opens, Fallocates, Unlinks uint64
}

type counters struct {
	pooled, staging, sealed                 atomic.Int64
	poolHits, poolMisses, poolErrors        atomic.Uint64
	leaseSeals, copySeals                   atomic.Uint64
	sealMismatch, sealFailures, bytesCopied atomic.Uint64
	opens, fallocates, unlinks              atomic.Uint64
	slots                                   atomic.Int64
	slotsRetired                            atomic.Uint64
}

// Stats returns the store's current counts. Each field is read atomically;
// the snapshot as a whole is not, which is fine for monitoring.
func (s *Store) Stats() Stats {
	c := &s.st
	st := Stats{
		PooledFiles:  c.pooled.Load(),
		PooledBytes:  s.pool.bytes.Load(),
		StagingFiles: c.staging.Load(),
		SealedFiles:  c.sealed.Load(),
		PoolHits:     c.poolHits.Load(),
		PoolMisses:   c.poolMisses.Load(),
		PoolErrors:   c.poolErrors.Load(),
		LeaseSeals:   c.leaseSeals.Load(),
		CopySeals:    c.copySeals.Load(),
		SealMismatch: c.sealMismatch.Load(),
		SealFailures: c.sealFailures.Load(),
		BytesCopied:  c.bytesCopied.Load(),
		Opens:        c.opens.Load(),
		Fallocates:   c.fallocates.Load(),
		Unlinks:      c.unlinks.Load(),
		SlotsRetired: c.slotsRetired.Load(),
	}
	if s.slots != nil {
		ss := s.slots.stats()
		st.Slots, st.FreeSlots, st.QuarantinedSlots, st.SlotBytes = ss.Slots, ss.Free, ss.Quarantined, ss.Bytes
	}
	return st
}
