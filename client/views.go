package client

import (
	"context"
	"sync/atomic"

	"github.com/flybus/flybus/mmap"
	"github.com/flybus/flybus/store"
)

// View maps the artifact read-only. The view keeps the artifact's owner
// alive until it is closed, so its bytes cannot outlive their handle. From
// a pooled store, a slot this connection viewed before is read through its
// cached mapping: no round trip, no mapping (see Config.MapPerView).
func (a *Artifact) View(ctx context.Context) (*ArtifactView, error) {
	ref, err := a.settled(ctx)
	if err != nil {
		return nil, err
	}
	c, size := a.c, int(ref.ByteLength)
	cache := !c.cfg.MapPerView && size > 0
	if err := a.take(); err != nil { // the view's reference, kept until it closes
		return nil, err
	}
	if cache {
		if sm := c.slots.get(ref.ArtifactID, size); sm != nil {
			return a.cachedView(sm, size), nil
		}
	}
	f, loc, err := a.openFile(ctx, ref)
	if err != nil {
		a.g.drop()
		return nil, err
	}
	if cache && store.IsSlotPath(loc.RelativePath) {
		r, err := mmap.MapRegion(f, int64(size))
		f.Close() // the mapping keeps the pages
		if err != nil {
			a.g.drop()
			return nil, err
		}
		return a.cachedView(c.slots.put(ref.ArtifactID, r), size), nil
	}
	c.maps.Add(1)
	m, err := mmap.MapFile(f, int64(size))
	cerr := f.Close() // the mapping keeps the pages; the descriptor is not needed
	if err == nil {
		err = cerr
	}
	if err != nil {
		if m != nil {
			m.Close()
		}
		a.g.drop()
		return nil, err
	}
	v := &ArtifactView{m: m, g: a.g, c: a.c}
	g := a.g
	v.cleanup = watch(a.c, v, "ArtifactView", g, func() { m.Close(); c.unmaps.Add(1); g.drop() })
	return v, nil
}

// cachedView is a view of the first size bytes of a cached slot mapping,
// holding the reference on the owner the caller took.
func (a *Artifact) cachedView(sm *slotMap, size int) *ArtifactView {
	c, g := a.c, a.g
	v := &ArtifactView{sm: sm, data: sm.r.Bytes()[:size:size], g: g, c: c}
	v.cleanup = watch(c, v, "ArtifactView", g, func() { c.slots.release(sm); g.drop() })
	return v
}

// ArtifactView is a read-only mapping of an artifact: a mapping of its
// own, or a slice of a cached slot mapping (pool mode).
type ArtifactView struct {
	m       *mmap.View // its own mapping, or
	sm      *slotMap   // the cached slot mapping data slices
	data    []byte
	c       *Client
	g       *guard
	closed  atomic.Bool
	cleanup handleWatch
}

// Bytes is the artifact's content, valid until Close. Never write to it.
// After Close it is nil.
func (v *ArtifactView) Bytes() []byte {
	if v.sm != nil {
		if v.closed.Load() {
			return nil
		}
		return v.data
	}
	return v.m.Bytes()
}

// Close unmaps (or lets go of the cached slot mapping) and releases the
// view's hold on the artifact's owner.
func (v *ArtifactView) Close() error {
	if v.closed.Swap(true) {
		return nil
	}
	v.cleanup.Stop()
	var err error
	if v.sm != nil {
		v.c.slots.release(v.sm)
	} else {
		err = v.m.Close()
		v.c.unmaps.Add(1)
	}
	v.g.drop()
	return err
}
