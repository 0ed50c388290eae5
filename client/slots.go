package client

import (
	"sync"
	"time"

	"github.com/flybus/flybus/mmap"
	"github.com/flybus/flybus/wire"
)

// A router whose store runs in pool mode reuses slot files across
// generations, and its artifact ids name the slots. A consumer then keeps
// one read-only mapping per slot it has viewed, for the life of the
// connection: a View of a later generation of that slot is a slice of the
// cached mapping, with no artifact.open round trip, no mmap and no fault
// on pages already mapped. What keeps a generation from being reused under
// a view is the view's share of its delivery or hold, exactly as in files
// mode; what the cache gives up is that a slice kept past Close may show a
// later generation instead of faulting (Config.TrackHandles maps per view).
//
// Mappings go when the connection closes, when more than slotCacheMax
// slots are cached (least recently viewed first), and when a slot has not
// been viewed for slotCacheIdle: the router unlinks idle slots, and a
// consumer's mapping must not pin their pages for ever.
const (
	slotCacheMax  = 64
	slotCacheIdle = 30 * time.Second
)

type slotCache struct {
	mu      sync.Mutex
	entries map[wire.ArtifactID]*slotMap
	timer   *time.Timer
	closed  bool
	// counters for Stats: views served from the cache, slots mapped and
	// unmapped
	hits, maps, unmaps uint64
}

type slotMap struct {
	id       wire.ArtifactID
	r        *mmap.Region
	views    int
	lastUsed time.Time
	evicted  bool // out of the table: unmapped when its last view closes
}

// has reports whether slot id is mapped now.
func (sc *slotCache) has(id wire.ArtifactID) bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.entries[id] != nil
}

// get returns slot id's mapping with a view counted on it, if it is cached
// and holds at least size bytes.
func (sc *slotCache) get(id wire.ArtifactID, size int) *slotMap {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sm := sc.entries[id]
	if sm == nil || len(sm.r.Bytes()) < size {
		return nil
	}
	sm.views++
	sm.lastUsed = time.Now()
	sc.hits++
	return sm
}

// put caches a fresh mapping of slot id with one view counted on it. If
// another goroutine cached the slot meanwhile, r is unmapped and that one
// used.
func (sc *slotCache) put(id wire.ArtifactID, r *mmap.Region) *slotMap {
	sc.mu.Lock()
	sc.maps++
	if sc.closed {
		sc.mu.Unlock()
		return &slotMap{id: id, r: r, views: 1, evicted: true}
	}
	if old := sc.entries[id]; old != nil && len(old.r.Bytes()) >= len(r.Bytes()) {
		old.views++
		old.lastUsed = time.Now()
		sc.unmaps++
		sc.mu.Unlock()
		r.Close()
		return old
	}
	sm := &slotMap{id: id, r: r, views: 1, lastUsed: time.Now()}
	var drop []*slotMap
	if old := sc.entries[id]; old != nil {
		drop = append(drop, sc.evictLocked(old)...)
	}
	if sc.entries == nil {
		sc.entries = map[wire.ArtifactID]*slotMap{}
	}
	sc.entries[id] = sm
	for len(sc.entries) > slotCacheMax {
		var lru *slotMap
		for _, e := range sc.entries {
			if e.views == 0 && (lru == nil || e.lastUsed.Before(lru.lastUsed)) {
				lru = e
			}
		}
		if lru == nil {
			break // every cached slot is being viewed
		}
		drop = append(drop, sc.evictLocked(lru)...)
	}
	if sc.timer == nil {
		sc.timer = time.AfterFunc(slotCacheIdle, sc.sweep)
	}
	sc.mu.Unlock()
	unmapAll(drop)
	return sm
}

// evictLocked takes sm out of the table; it returns sm if nobody views it,
// for the caller to unmap outside the lock.
func (sc *slotCache) evictLocked(sm *slotMap) []*slotMap {
	delete(sc.entries, sm.id)
	sm.evicted = true
	if sm.views == 0 {
		sc.unmaps++
		return []*slotMap{sm}
	}
	return nil
}

// release ends one view of sm.
func (sc *slotCache) release(sm *slotMap) {
	sc.mu.Lock()
	sm.views--
	last := sm.views == 0 && sm.evicted
	if last {
		sc.unmaps++
	}
	sc.mu.Unlock()
	if last {
		sm.r.Close()
	}
}

// sweep unmaps slots not viewed for slotCacheIdle.
func (sc *slotCache) sweep() {
	sc.mu.Lock()
	now := time.Now()
	var drop []*slotMap
	for _, e := range sc.entries {
		if now.Sub(e.lastUsed) >= slotCacheIdle {
			drop = append(drop, sc.evictLocked(e)...)
		}
	}
	sc.timer = nil
	if len(sc.entries) > 0 && !sc.closed {
		sc.timer = time.AfterFunc(slotCacheIdle, sc.sweep)
	}
	sc.mu.Unlock()
	unmapAll(drop)
}

// close unmaps every slot nobody views; the others go with their last view.
func (sc *slotCache) close() {
	sc.mu.Lock()
	sc.closed = true
	if sc.timer != nil {
		sc.timer.Stop()
		sc.timer = nil
	}
	var drop []*slotMap
	for _, e := range sc.entries {
		drop = append(drop, sc.evictLocked(e)...)
	}
	sc.mu.Unlock()
	unmapAll(drop)
}

func unmapAll(sms []*slotMap) {
	for _, sm := range sms {
		sm.r.Close()
	}
}

// cacheStats reads the cache's counters.
func (sc *slotCache) cacheStats() (cached int, hits, maps, unmaps uint64) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return len(sc.entries), sc.hits, sc.maps, sc.unmaps
}
