package client

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// The safety net for handles a program forgets to close. Every handle that
// owns something on the router (a share of a delivery, a hold, a reply
// capability, a mapping, a staging file) registers a cleanup when it is
// made and stops it in Close. A handle collected unclosed releases what it
// held, is counted in Stats().Leaked and logged with its type, so a
// forgotten Message no longer blocks its subscription's credit forever.
// Correctness never depends on it: collection may come late or not at all.
//
// The same registration counts the handles open, for the warning about a
// stalled subscription (stall.go), and with Config.TrackHandles remembers
// where each was made, so that both logs can say which code forgot a Close.

// leak is what a collected handle still held. release must not refer to
// the handle itself, or it would never be collected.
type leak struct {
	handle  string     // the type's name, for the log
	rec     *handleRec // where it was made (Config.TrackHandles), or nil
	release func()
}

// handleWatch is an owning handle's registration: its safety net, and its
// place among the client's open handles. The zero value is a handle made
// already closed, which has nothing to stop.
type handleWatch struct {
	c       *conn
	cleanup runtime.Cleanup
	rec     *handleRec
}

// Stop disarms the safety net of a handle being closed. Each handle calls
// it at most once, under its own closed flag.
func (w *handleWatch) Stop() {
	if w.c == nil {
		return
	}
	w.cleanup.Stop()
	w.c.handles.forget(w.rec)
}

// watch registers h's safety net and counts h open. g is the guard h holds
// a reference on, if any: it ties the handle to a subscription's credit.
func watch[T any](c *conn, h *T, handle string, g *guard, release func()) handleWatch {
	rec := c.handles.add(handle, g)
	return handleWatch{c: c, rec: rec, cleanup: runtime.AddCleanup(h, c.leaked, leak{handle: handle, rec: rec, release: release})}
}

func (c *conn) leaked(l leak) {
	c.handles.forget(l.rec)
	if c.Err() != nil {
		return // the connection has ended: the router released everything
	}
	args := []any{"handle", l.handle, "client", c.cfg.ClientID}
	if site := c.handles.siteOf(l.rec); site != "" {
		args = append(args, "site", site)
	}
	c.cfg.Logger.Warn("flybus: a handle was garbage-collected without Close; released what it held", args...)
	c.leaks.Add(1) // after the log line, so a reader of Stats sees it written
	l.release()
}

// openHandles counts the owning handles open (made and neither closed nor
// collected) and, when tracking, remembers each one's record.
type openHandles struct {
	open  atomic.Int64
	track bool // Config.TrackHandles; set before the client is shared

	mu   sync.Mutex
	recs map[*handleRec]struct{}
}

// handleRec is one tracked handle.
type handleRec struct {
	kind string
	g    *guard // the guard the handle holds a reference on, or nil
	site string // guarded by openHandles.mu
}

// add counts a new handle open and, when tracking, records where it was
// made. A handle made by the reader (a delivery) has no caller outside the
// SDK yet: handedOut names the code it is handed to.
func (o *openHandles) add(kind string, g *guard) *handleRec {
	o.open.Add(1)
	if !o.track {
		return nil
	}
	rec := &handleRec{kind: kind, g: g, site: callerSite()}
	o.mu.Lock()
	o.recs[rec] = struct{}{}
	o.mu.Unlock()
	return rec
}

// forget counts a handle closed or collected.
func (o *openHandles) forget(rec *handleRec) {
	o.open.Add(-1)
	if rec == nil {
		return
	}
	o.mu.Lock()
	delete(o.recs, rec)
	o.mu.Unlock()
}

// handedOut records, when tracking, the code a delivered handle (a message,
// a request, a result) was handed to as the place it was made.
func (o *openHandles) handedOut(rec *handleRec) {
	if rec == nil {
		return
	}
	site := callerSite()
	o.mu.Lock()
	rec.site = site
	o.mu.Unlock()
}

func (o *openHandles) siteOf(rec *handleRec) string {
	if rec == nil {
		return ""
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return rec.site
}

// maxSites bounds the places a stall warning lists.
const maxSites = 5

// sitesHolding describes where the open handles holding s's deliveries
// were made: the places with the most handles first, at most maxSites.
func (o *openHandles) sitesHolding(s *Subscription) string {
	type place struct {
		site string
		n    int
	}
	var places []place
	o.mu.Lock()
	for rec := range o.recs {
		if rec.g == nil || !rec.g.isHeldOn(s) {
			continue
		}
		site := rec.site
		if site == "" {
			site = "an unknown place"
		}
		site = rec.kind + " at " + site
		i := slices.IndexFunc(places, func(p place) bool { return p.site == site })
		if i < 0 {
			places = append(places, place{site: site})
			i = len(places) - 1
		}
		places[i].n++
	}
	o.mu.Unlock()
	slices.SortFunc(places, func(a, b place) int {
		return cmp.Or(cmp.Compare(b.n, a.n), strings.Compare(a.site, b.site))
	})
	var out []string
	for i, p := range places {
		if i == maxSites {
			rest := 0
			for _, p := range places[i:] {
				rest += p.n
			}
			out = append(out, fmt.Sprintf("and %d more handles elsewhere", rest))
			break
		}
		if p.n > 1 {
			out = append(out, fmt.Sprintf("%s (%d handles)", p.site, p.n))
		} else {
			out = append(out, p.site)
		}
	}
	return strings.Join(out, "; ")
}

// sdkPrefix starts the names of this package's functions.
var sdkPrefix = func() string {
	pc, _, _, _ := runtime.Caller(0)
	name := runtime.FuncForPC(pc).Name() // <import path>.<function>
	slash := strings.LastIndexByte(name, '/')
	return name[:slash+strings.IndexByte(name[slash:], '.')+1]
}()

// callerSite names the first frame of the calling stack outside this
// package and the runtime, as "file:line function"; "" when there is none
// (the client's own goroutines).
func callerSite() string {
	var pcs [32]uintptr
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs[:])])
	for {
		f, more := frames.Next()
		if f.Function != "" && !strings.HasPrefix(f.Function, sdkPrefix) && !strings.HasPrefix(f.Function, "runtime.") {
			return fmt.Sprintf("%s:%d %s", f.File, f.Line, f.Function)
		}
		if !more {
			return ""
		}
	}
}

// Stats counts what the client did on the program's behalf.
type Stats struct {
	// Leaked counts handles collected without Close (their owners were
	// released by the safety net). Nonzero means a missing Close.
	Leaked uint64
	// StalledSubscriptions counts the warnings that a subscription's
	// in-flight credits were all held unconsumed for longer than
	// Config.HeldCreditsWarnAfter. Nonzero usually means a missing Close.
	StalledSubscriptions uint64
	// ControlErrors counts fire-and-forget commands (consumes, releases,
	// unregisters, cancels) the router refused.
	ControlErrors uint64
	// ArtifactOpens counts artifact.open round trips (View, ReadAll).
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
	// OpenedAhead counts views that found their read location asked for
	// when the delivery arrived (Config.OpenAhead).
	OpenedAhead uint64
	// Reconnects counts the connections a Dial client made after a loss.
	Reconnects uint64
}

// Stats returns the connection's counters.
func (c *conn) Stats() Stats {
	cached, hits, maps, unmaps := c.slots.cacheStats()
	return Stats{Leaked: c.leaks.Load(), StalledSubscriptions: c.stall.reported.Load(), ControlErrors: c.controlErrors.Load(),
		ArtifactOpens: c.artifactOpens.Load(), Maps: c.maps.Load() + maps, Unmaps: c.unmaps.Load() + unmaps,
		CachedSlots: cached, CachedViews: hits, PreparedWriters: c.ahead.preparedWriters(), AllocatedAhead: c.ahead.served.Load(),
		PreparedReleased: c.ahead.released.Load(), OpenedAhead: c.openedAhead.Load()}
}
