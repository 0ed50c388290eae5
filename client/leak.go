package client

import (
	"runtime"
)

// The safety net for handles a program forgets to close. Every handle that
// owns something on the router (a share of a delivery, a hold, a reply
// capability, a mapping, a staging file) registers a cleanup when it is
// made and stops it in Close. A handle collected unclosed releases what it
// held, is counted in Stats().Leaked and logged with its type, so a
// forgotten Message no longer blocks its subscription's credit forever.
// Correctness never depends on it: collection may come late or not at all.

// leak is what a collected handle still held. release must not refer to
// the handle itself, or it would never be collected.
type leak struct {
	handle  string // the type's name, for the log
	release func()
}

// watch registers h's safety net.
func watch[T any](c *Client, h *T, handle string, release func()) runtime.Cleanup {
	return runtime.AddCleanup(h, c.leaked, leak{handle: handle, release: release})
}

func (c *Client) leaked(l leak) {
	if c.Err() != nil {
		return // the connection has ended: the router released everything
	}
	c.cfg.Logger.Warn("flybus: a handle was garbage-collected without Close; released what it held",
		"handle", l.handle, "client", c.cfg.ClientID)
	c.leaks.Add(1) // after the log line, so a reader of Stats sees it written
	l.release()
}

// Stats counts what the client did on the program's behalf.
type Stats struct {
	// Leaked counts handles collected without Close (their owners were
	// released by the safety net). Nonzero means a missing Close.
	Leaked uint64
	// ControlErrors counts fire-and-forget commands (consumes, releases,
	// unregisters, cancels) the router refused.
	ControlErrors uint64
	// ArtifactOpens counts artifact.open round trips (View, ReaderAt).
	ArtifactOpens uint64
	// Maps and Unmaps count mmap and munmap calls for views: per view in
	// files mode, per slot in pool mode.
	Maps, Unmaps uint64
	// CachedSlots is how many slots are mapped now (pool mode), and
	// CachedViews how many views were served by a cached mapping.
	CachedSlots int
	CachedViews uint64
	// Config.AllocateAhead: allocations prepared and not yet taken, the
	// Allocates they answered at once, and those released unused (evicted
	// by a more recent size, or at Close).
	PreparedWriters  int
	AllocatedAhead   uint64
	PreparedReleased uint64
	// OpenedAhead counts views and readers that found their read location
	// asked for when the delivery arrived (Config.OpenAhead).
	OpenedAhead uint64
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	cached, hits, maps, unmaps := c.slots.cacheStats()
	return Stats{Leaked: c.leaks.Load(), ControlErrors: c.controlErrors.Load(), ArtifactOpens: c.artifactOpens.Load(),
		Maps: c.maps.Load() + maps, Unmaps: c.unmaps.Load() + unmaps, CachedSlots: cached, CachedViews: hits,
		PreparedWriters: c.ahead.preparedWriters(), AllocatedAhead: c.ahead.served.Load(), PreparedReleased: c.ahead.released.Load(),
		OpenedAhead: c.openedAhead.Load()}
}
