package client

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flybus/flybus/mmap"
	"github.com/flybus/flybus/wire"
)

func region(t *testing.T, size int) *mmap.Region {
	t.Helper()
	p := filepath.Join(t.TempDir(), "slot")
	if err := os.WriteFile(p, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := mmap.MapRegion(f, int64(size))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The cache keeps at most slotCacheMax slots, dropping the least recently
// viewed one nobody views, and never one a view still uses.
func TestSlotCacheBound(t *testing.T) {
	var sc slotCache
	defer sc.close()
	first := sc.put(1, region(t, 4096))
	for id := wire.ArtifactID(2); id <= slotCacheMax+1; id++ {
		sc.release(sc.put(id, region(t, 4096)))
	}
	if cached, _, maps, unmaps := sc.cacheStats(); cached != slotCacheMax || maps != slotCacheMax+1 || unmaps != 1 {
		t.Fatalf("cached %d, maps %d, unmaps %d", cached, maps, unmaps)
	}
	if sc.get(1, 4096) == nil {
		t.Fatal("the slot a view still uses was evicted")
	}
	if sc.get(2, 4096) != nil {
		t.Fatal("the least recently viewed slot stayed")
	}
	sc.release(first)
	sc.release(first)
}

// A slot not viewed for slotCacheIdle is unmapped; one being viewed waits
// for its last view.
func TestSlotCacheIdleAndClose(t *testing.T) {
	var sc slotCache
	idle := sc.put(1, region(t, 4096))
	sc.release(idle)
	busy := sc.put(2, region(t, 4096))
	sc.mu.Lock()
	for _, e := range sc.entries {
		e.lastUsed = time.Now().Add(-2 * slotCacheIdle)
	}
	sc.mu.Unlock()
	sc.sweep()
	if cached, _, _, unmaps := sc.cacheStats(); cached != 0 || unmaps != 1 {
		t.Fatalf("after the sweep: %d cached, %d unmapped", cached, unmaps)
	}
	if idle.r.Bytes() != nil {
		t.Fatal("the idle slot is still mapped")
	}
	if busy.r.Bytes() == nil {
		t.Fatal("a slot being viewed was unmapped")
	}
	sc.release(busy)
	if busy.r.Bytes() != nil {
		t.Fatal("the last view's release did not unmap an evicted slot")
	}
	sc.close()
	late := sc.put(3, region(t, 4096))
	sc.release(late)
	if late.r.Bytes() != nil {
		t.Fatal("a slot mapped after close stayed mapped")
	}
}
