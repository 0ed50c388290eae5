package client

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

// guard is one router-side owner (a delivery or an explicit hold) shared by
// every local handle made from it: the message or request it came with,
// artifacts extracted from it, their clones and views. The last handle to
// let go releases the owner, once.
type guard struct {
	refCount
	owner   wire.OwnerID
	release func()
	// heldOn is the subscription whose credit the program holds through
	// this delivery, once its message was handed out (and the subscription
	// is watched for stalls); guarded by mu.
	heldOn *Subscription
	// opened are the read locations asked for when the delivery arrived
	// (Config.OpenAhead); set by the reader before the guard is shared.
	opened []*openedAhead
}

// openedAhead is one artifact.open sent ahead for ref, and its answer
// (the reply is decoded into ok, then res is set).
type openedAhead struct {
	ref wire.ArtifactRef
	ok  wire.OpenOK
	res oneShot[wire.OpenOK]
}

// openedFor returns the open sent ahead for ref, if there is one.
func (g *guard) openedFor(ref wire.ArtifactRef) *openedAhead {
	for _, o := range g.opened {
		if o.ref == ref {
			return o
		}
	}
	return nil
}

func newGuard(owner wire.OwnerID, release func()) *guard {
	return &guard{refCount: refCount{refs: 1}, owner: owner, release: release}
}

func (g *guard) drop() {
	if !g.dropRef() {
		return
	}
	g.release()
	// Fixed from here on: holdOn ties nothing to a guard with no reference.
	g.mu.Lock()
	s := g.heldOn
	g.mu.Unlock()
	if s != nil {
		s.cr.give()
	}
}

// holdOn ties g's delivery to s's credit count; false if it is consumed or
// tied already.
func (g *guard) holdOn(s *Subscription) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.refs == 0 || g.heldOn != nil {
		return false
	}
	g.heldOn = s
	return true
}

// isHeldOn reports whether the program holds s's credit through g.
func (g *guard) isHeldOn(s *Subscription) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.heldOn == s
}

// refCount counts the local handles sharing one thing (a guard's owner, a
// call's right to reply); once the count reaches zero it stays there.
type refCount struct {
	mu   sync.Mutex // also guards what the embedding type says it does
	refs int
}

// add takes another reference; false once the last one has gone.
func (r *refCount) add() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refs == 0 {
		return false
	}
	r.refs++
	return true
}

// dropRef lets one reference go and reports whether it was the last.
func (r *refCount) dropRef() (last bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refs--
	return r.refs == 0
}

func (c *conn) holdGuard(h wire.OwnerID) *guard {
	return newGuard(h, func() {
		c.fireAndForget(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{h}})
	})
}

func (c *conn) deliveryGuard(d wire.DeliveryID, arts attachSet) *guard {
	g := newGuard(wire.DeliveryOwner(d), func() { c.consume(d) })
	if c.cfg.OpenAhead && c.cfg.StoreRoot != "" && len(arts) > 0 {
		c.openAhead(g, arts)
	}
	return g
}

// openAhead asks for the read location of every attachment of a delivery
// as it arrives (the delivery owns them already), so that a View finds it
// answered instead of making the round trip itself. A slot this
// connection keeps mapped needs none.
func (c *conn) openAhead(g *guard, arts attachSet) {
	sent := false
	for i := range arts {
		ref := arts[i].Ref
		if c.slots.has(ref.ArtifactID) {
			continue
		}
		o := &openedAhead{ref: ref, res: oneShot[wire.OpenOK]{done: make(chan struct{})}}
		g.opened = append(g.opened, o)
		c.artifactOpens.Add(1)
		if err := c.post(request{op: wire.OpArtifactOpen, body: &wire.RefOwner{Ref: ref, OwnerID: g.owner}, reply: &o.ok,
			complete: o.res.complete(&o.ok)}, false); err != nil {
			o.res.set(wire.OpenOK{}, err)
			continue
		}
		sent = true
	}
	if sent {
		c.wakeWriter() // the reader never writes: a full socket must not stall it
	}
}

// Artifact is a read-only handle on an immutable artifact, backed by one
// owner on the router: an explicit hold, or the delivery it arrived with.
// Clone shares that owner; the last handle closed releases it.
type Artifact struct {
	c       *conn
	ref     wire.ArtifactRef           // for a seal in flight (seal != nil), the expected one
	seal    *oneShot[wire.ArtifactRef] // a NoWait seal's answer: the sealed reference
	g       *guard
	closed  atomic.Bool
	cleanup handleWatch
}

// newArtifact makes a handle holding one reference on g (taken by the
// caller).
func (c *conn) newArtifact(ref wire.ArtifactRef, g *guard) *Artifact {
	a := &Artifact{c: c, ref: ref, g: g}
	a.cleanup = watch(c, a, "Artifact", g, g.drop)
	return a
}

// Ref is the artifact's identity. It never waits: for an artifact sealed
// with NoWait whose seal is not answered yet it is the reference the seal
// is expected to produce, which the answer may change (a pool-mode seal
// that had to copy moves the artifact to another slot); Sealed returns
// the final one.
func (a *Artifact) Ref() wire.ArtifactRef {
	if a.seal != nil {
		if ref, err, ok := a.seal.get(); ok && err == nil {
			return ref
		}
	}
	return a.ref
}

// Sealed waits for the answer to a NoWait seal and returns the artifact's
// final reference, or the seal's error. An artifact sealed any other way is
// sealed: its reference at once.
func (a *Artifact) Sealed(ctx context.Context) (wire.ArtifactRef, error) {
	return a.settled(ctx)
}

// settled returns the artifact's reference once its seal is answered.
func (a *Artifact) settled(ctx context.Context) (wire.ArtifactRef, error) {
	if a.seal == nil {
		return a.ref, nil
	}
	ref, err := a.seal.wait(ctx)
	if err == nil {
		return ref, nil
	}
	if _, serr, answered := a.seal.get(); answered && serr != nil {
		return wire.ArtifactRef{}, sealFailed(serr)
	}
	return wire.ArtifactRef{}, err // ctx ended first
}

// sealFailed wraps the error of a seal sent without waiting, keeping its
// code for errors.Is and errors.As.
func sealFailed(err error) error { return fmt.Errorf("flybus: the artifact's seal failed: %w", err) }

// take adds a reference on the artifact's owner for work this handle
// starts; it fails once this handle is closed.
func (a *Artifact) take() error {
	if a.closed.Load() || !a.g.add() {
		return closedHandle("artifact")
	}
	return nil
}

// Clone returns another handle on the same owner.
func (a *Artifact) Clone() (*Artifact, error) {
	if err := a.take(); err != nil {
		return nil, err
	}
	b := a.c.newArtifact(a.ref, a.g)
	b.seal = a.seal
	return b, nil
}

// Close releases this handle. Idempotent.
func (a *Artifact) Close() error {
	if !a.closed.Swap(true) {
		a.cleanup.Stop()
		a.g.drop()
	}
	return nil
}

// Retain creates an independent explicit hold, which outlives this handle
// and the message it came from. Retain before closing the handle.
func (a *Artifact) Retain(ctx context.Context) (*Artifact, error) {
	var ok wire.RetainOK
	c := a.c
	ref, err := a.settled(ctx)
	if err != nil {
		return nil, err
	}
	if err := a.take(); err != nil {
		return nil, err
	}
	defer a.g.drop()
	err = c.do(ctx, request{op: wire.OpArtifactRetain, body: &wire.RefOwner{Ref: ref, OwnerID: a.g.owner}, reply: &ok, orphan: func(err error) {
		if err == nil {
			c.fireAndForget(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{ok.OwnerID}})
		}
	}})
	if err != nil {
		return nil, err
	}
	return c.newArtifact(ref, c.holdGuard(ok.OwnerID)), nil
}

// openFile resolves a read location through artifact.open and opens it.
func (a *Artifact) openFile(ctx context.Context, ref wire.ArtifactRef) (*os.File, wire.Location, error) {
	if a.c.cfg.StoreRoot == "" {
		return nil, wire.Location{}, ErrNoStoreRoot
	}
	var ok wire.OpenOK
	if o := a.g.openedFor(ref); o != nil {
		opened, err := o.res.wait(ctx)
		if _, _, answered := o.res.get(); !answered {
			return nil, wire.Location{}, err // ctx ended first
		}
		if err == nil {
			ok = opened
			a.c.openedAhead.Add(1)
		}
	}
	if ok.ReadLocation.RelativePath == "" {
		a.c.artifactOpens.Add(1)
		if err := a.c.do(ctx, request{op: wire.OpArtifactOpen, body: &wire.RefOwner{Ref: ref, OwnerID: a.g.owner}, reply: &ok}); err != nil {
			return nil, wire.Location{}, err
		}
	}
	f, err := store.OpenRead(a.c.cfg.StoreRoot, ok.ReadLocation.StoreID.String(), ok.ReadLocation.RelativePath)
	if err != nil {
		return nil, ok.ReadLocation, a.c.locationError(ok.ReadLocation, err)
	}
	return f, ok.ReadLocation, nil
}

// openHeld opens the artifact's file with a reference on its owner taken
// for the caller; on failure the reference is given back.
func (a *Artifact) openHeld(ctx context.Context) (*os.File, wire.Location, error) {
	ref, err := a.settled(ctx)
	if err != nil {
		return nil, wire.Location{}, err
	}
	if err := a.take(); err != nil {
		return nil, wire.Location{}, err
	}
	f, loc, err := a.openFile(ctx, ref)
	if err != nil {
		a.g.drop()
		return nil, loc, err
	}
	return f, loc, nil
}
