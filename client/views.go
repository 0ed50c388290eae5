package client

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync/atomic"

	"github.com/flybus/flybus/mmap"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

// View maps the artifact read-only. The view keeps the artifact's owner
// alive until it is closed, so its bytes cannot outlive their handle. From
// a pooled store, a slot this connection viewed before is read through its
// cached mapping: no round trip, no mapping (with Config.TrackHandles, a mapping per view). With
// Config.VerifyReads set, the view is checked as Verify does and not
// returned if the check fails.
func (a *Artifact) View(ctx context.Context) (*ArtifactView, error) {
	v, err := a.view(ctx)
	if err != nil || !a.c.cfg.VerifyReads {
		return v, err
	}
	if err := v.Verify(); err != nil {
		v.Close()
		return nil, err
	}
	return v, nil
}

func (a *Artifact) view(ctx context.Context) (*ArtifactView, error) {
	ref, err := a.settled(ctx)
	if err != nil {
		return nil, err
	}
	c, size := a.c, int(ref.ByteLength)
	cache := !c.cfg.TrackHandles && size > 0
	if err := a.take(); err != nil { // the view's reference, kept until it closes
		return nil, err
	}
	if cache {
		if sm := c.slots.get(ref.ArtifactID, size); sm != nil {
			return a.cachedView(ref, sm, size), nil
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
		return a.cachedView(ref, c.slots.put(ref.ArtifactID, r), size), nil
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
	v := &ArtifactView{ref: ref, m: m, g: a.g, c: a.c}
	g := a.g
	v.cleanup = watch(a.c, v, "ArtifactView", g, func() { m.Close(); c.unmaps.Add(1); g.drop() })
	return v, nil
}

// cachedView is a view of the first size bytes of a cached slot mapping,
// holding the reference on the owner the caller took.
func (a *Artifact) cachedView(ref wire.ArtifactRef, sm *slotMap, size int) *ArtifactView {
	c, g := a.c, a.g
	v := &ArtifactView{ref: ref, sm: sm, data: sm.r.Bytes()[:size:size], g: g, c: c}
	v.cleanup = watch(c, v, "ArtifactView", g, func() { c.slots.release(sm); g.drop() })
	return v
}

// ArtifactView is a read-only mapping of an artifact: a mapping of its
// own, or a slice of a cached slot mapping (pool mode).
type ArtifactView struct {
	ref     wire.ArtifactRef
	m       *mmap.View // its own mapping, or
	sm      *slotMap   // the cached slot mapping data slices
	data    []byte
	c       *conn
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

// Verify hashes the view's bytes with SHA-256 and compares the sum with
// the digest the artifact was sealed with (its Ref().Digest). It returns
// an error matching ErrDigestMismatch if they differ, and one matching
// ErrNoDigest if the artifact was sealed without a digest, so there is
// nothing to compare with.
//
// The seal proves that nothing which had the file open can write it
// afterwards, but a program running as the router's user, or root, can
// still make a sealed file writable and change it. Verify detects that as
// of the moment it runs; the bytes may change again after it returns (a
// copy from ReadAll with Config.VerifyReads cannot). It hashes every byte,
// about 0.75 ms for a 1.2 MB frame on a CPU with SHA instructions: for
// tests, hosts where not every program of that user is trusted, and
// debugging. See docs/integrity.md. Do not call it concurrently with
// Close.
func (v *ArtifactView) Verify() error {
	if v.closed.Load() {
		return closedHandle("artifact view")
	}
	return verifyBytes(v.ref, v.Bytes())
}

// verifyBytes checks b, the bytes of the artifact ref, against its digest.
func verifyBytes(ref wire.ArtifactRef, b []byte) error {
	if !ref.Digest.Valid {
		return &handleError{msg: fmt.Sprintf("flybus: %s (generation %d) was sealed without a digest: there is nothing to verify its bytes against",
			ref.ArtifactID, ref.Generation), kinds: []error{ErrNoDigest}}
	}
	got := wire.Digest(sha256.Sum256(b))
	if want := ref.Digest.V; got != want {
		return &handleError{msg: fmt.Sprintf("flybus: the bytes of %s (generation %d) changed after its seal: they hash to sha256 %s, it was sealed with %s",
			ref.ArtifactID, ref.Generation, got, want), kinds: []error{ErrDigestMismatch}}
	}
	return nil
}
