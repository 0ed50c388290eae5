package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/flybus/flybus/mmap"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

// guard is one router-side owner (a delivery or an explicit hold) shared by
// every local handle made from it: the message or request it came with,
// artifacts extracted from it, their clones and views. The last handle to
// let go releases the owner, once.
type guard struct {
	mu      sync.Mutex
	refs    int
	owner   wire.OwnerID
	release func()
	// opened are the read locations asked for when the delivery arrived
	// (Config.OpenAhead); set by the reader before the guard is shared.
	opened []*openedAhead
}

// openedAhead is one artifact.open sent ahead, answered once done closes.
type openedAhead struct {
	ref  wire.ArtifactRef
	done chan struct{}
	ok   wire.OpenOK
	err  error
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
	return &guard{refs: 1, owner: owner, release: release}
}

// add takes another reference; false when the guard is already released.
func (g *guard) add() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.refs == 0 {
		return false
	}
	g.refs++
	return true
}

func (g *guard) drop() {
	g.mu.Lock()
	g.refs--
	last := g.refs == 0
	g.mu.Unlock()
	if last {
		g.release()
	}
}

func (c *Client) holdGuard(h wire.OwnerID) *guard {
	return newGuard(h, func() {
		c.fireAndForget(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{h}})
	})
}

func (c *Client) deliveryGuard(d wire.DeliveryID, arts attachSet) *guard {
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
func (c *Client) openAhead(g *guard, arts attachSet) {
	sent := false
	for i := range arts {
		ref := arts[i].Ref
		if c.slots.has(ref.ArtifactID) {
			continue
		}
		o := &openedAhead{ref: ref, done: make(chan struct{})}
		g.opened = append(g.opened, o)
		w := &waiter{op: wire.OpArtifactOpen, v: &o.ok, complete: func(err error) {
			o.err = err
			close(o.done)
		}}
		c.artifactOpens.Add(1)
		if err := c.enqueueWith(wire.OpArtifactOpen, &wire.RefOwner{Ref: ref, OwnerID: g.owner}, nil, w, false, nil); err != nil {
			o.err = err
			close(o.done)
			continue
		}
		sent = true
	}
	if sent {
		c.wakeWriter() // the reader never writes: a full socket must not stall it
	}
}

// Artifacts is the client's artifact API.
type Artifacts struct{ c *Client }

// Artifacts returns the artifact API of this connection.
func (c *Client) Artifacts() Artifacts { return Artifacts{c} }

// ErrNoStoreRoot is returned for artifact work on a client that does not
// know the router's store root.
var ErrNoStoreRoot = errors.New("flybus: artifacts need Config.StoreRoot, the directory the router keeps its store under " +
	"(flybus serve --store DIR; a client connected in memory learns it from its router)")

// Allocate reserves a staging file of exactly n bytes (unwritten bytes
// read as zeros) and returns its unique writer.
func (a Artifacts) Allocate(ctx context.Context, n int64, contentType string) (*ArtifactWriter, error) {
	c := a.c
	if c.cfg.StoreRoot == "" {
		return nil, ErrNoStoreRoot
	}
	if n < 0 {
		return nil, fmt.Errorf("flybus: negative artifact size %d", n)
	}
	var ok wire.AllocateOK
	k := aheadKey{n, contentType}
	hit := false
	if c.cfg.AllocateAhead > 0 {
		var err error
		if ok, hit, err = c.allocateAhead(ctx, k); err != nil {
			return nil, err
		}
	}
	if !hit {
		err := c.roundTrip(ctx, wire.OpArtifactAllocate, &wire.Allocate{ByteLength: uint64(n), ContentType: contentType}, &ok,
			func(err error) {
				if err == nil { // granted after the caller gave up: give it back
					c.fireAndForget(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{ok.OwnerID}})
				}
			})
		if err != nil {
			return nil, err
		}
	}
	if c.cfg.AllocateAhead > 0 {
		c.ahead.want(k)
	}
	f, err := store.OpenWrite(c.cfg.StoreRoot, ok.WriteLocation.StoreID.String(), ok.WriteLocation.RelativePath)
	if err != nil {
		c.fireAndForget(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{ok.OwnerID}})
		return nil, c.locationError(ok.WriteLocation, err)
	}
	st := &writerState{f: f}
	w := &ArtifactWriter{c: c, id: ok.ArtifactID, gen: ok.Generation, owner: ok.OwnerID, size: n, contentType: contentType, st: st,
		storeID: ok.WriteLocation.StoreID}
	owner := ok.OwnerID
	w.cleanup = watch(c, w, "ArtifactWriter", func() {
		if st.finish() == nil {
			c.fireAndForget(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{owner}})
		}
	})
	return w, nil
}

// locationError explains a location the client could not open: the router
// went away with its store, or the client looks under the wrong root.
func (c *Client) locationError(loc wire.Location, err error) error {
	if lost := c.Err(); lost != nil {
		return lostError(lost)
	}
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("flybus: artifact file %s/%s is not under StoreRoot %q: is StoreRoot the router's store root "+
			"(its --store directory)? %w", loc.StoreID, loc.RelativePath, c.cfg.StoreRoot, err)
	}
	return err
}

// ArtifactWriter fills one staging file. It is unique: Seal ends its
// writable lifetime, Close abandons it. Write and WriteAt (pwrite) are the
// fastest way to fill; Bytes maps the file for rendering in place.
type ArtifactWriter struct {
	c           *Client
	id          wire.ArtifactID
	gen         uint64 // 1 in a files store; the slot's use in a pool store
	owner       wire.OwnerID
	size        int64
	contentType string
	storeID     wire.StoreID
	st          *writerState
	cleanup     runtime.Cleanup
}

// writerState is what a writer holds open, apart from the writer so that
// its safety net can close it.
type writerState struct {
	mu     sync.Mutex
	f      *os.File
	m      *mmap.Writable
	off    int64
	done   bool
	sealed bool
}

// doneErr says how the writer ended. Called with mu held.
func (st *writerState) doneErr() error {
	if st.sealed {
		return &handleError{msg: "flybus: this artifact writer was already sealed", kinds: []error{ErrWriterDone}}
	}
	return closedHandle("artifact writer", ErrWriterDone)
}

// Size is the allocated length.
func (w *ArtifactWriter) Size() int64 { return w.size }

// Write appends at the writer's offset; writing past the allocated length
// fails with io.ErrShortWrite after writing what fits.
func (w *ArtifactWriter) Write(p []byte) (int, error) {
	st := w.st
	st.mu.Lock()
	defer st.mu.Unlock()
	n, err := w.writeAt(p, st.off)
	st.off += int64(n)
	return n, err
}

// WriteAt writes at off, within the allocated length.
func (w *ArtifactWriter) WriteAt(p []byte, off int64) (int, error) {
	w.st.mu.Lock()
	defer w.st.mu.Unlock()
	return w.writeAt(p, off)
}

// writeAt is called with st.mu held.
func (w *ArtifactWriter) writeAt(p []byte, off int64) (int, error) {
	if w.st.done {
		return 0, w.st.doneErr()
	}
	if off < 0 || off > w.size {
		return 0, fmt.Errorf("flybus: write at %d outside the artifact's %d bytes", off, w.size)
	}
	short := false
	if int64(len(p)) > w.size-off {
		p, short = p[:w.size-off], true
	}
	n, err := w.st.f.WriteAt(p, off)
	if err == nil && short {
		err = io.ErrShortWrite
	}
	return n, err
}

// Bytes maps the staging file writable and returns its bytes, valid until
// Seal or Close. Measured slower than Write on 4 KiB pages; use it to render
// in place.
func (w *ArtifactWriter) Bytes() ([]byte, error) {
	st := w.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done {
		return nil, st.doneErr()
	}
	if st.m == nil {
		m, err := mmap.MapWritable(st.f, w.size)
		if err != nil {
			return nil, err
		}
		st.m = m
	}
	return st.m.Bytes(), nil
}

// finish closes the mapping and the descriptor, so that the router's seal
// can prove no writer remains and move no bytes. sealing marks how the
// writer ended, for the errors of later use.
func (st *writerState) finish() error { return st.end(false) }

func (st *writerState) end(sealing bool) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done {
		return st.doneErr()
	}
	st.done, st.sealed = true, sealing
	var errs []error
	if st.m != nil {
		errs = append(errs, st.m.Close())
		st.m = nil
	}
	errs = append(errs, st.f.Close())
	return errors.Join(errs...)
}

// Seal makes the bytes immutable and returns the artifact, held by the
// writer's id (now an explicit hold).
func (w *ArtifactWriter) Seal(ctx context.Context) (*Artifact, error) {
	return w.seal(ctx, wire.Opt[wire.Digest]{})
}

// SealWithDigest seals and has the router check the bytes' SHA-256
// (64 lowercase hex digits): ARTIFACT_MISMATCH if they differ.
func (w *ArtifactWriter) SealWithDigest(ctx context.Context, hexDigest string) (*Artifact, error) {
	d, ok := wire.ParseDigest(hexDigest)
	if !ok {
		return nil, fmt.Errorf("flybus: digest %q is not 64 lowercase hex digits", hexDigest)
	}
	return w.seal(ctx, wire.Some(d))
}

func (w *ArtifactWriter) seal(ctx context.Context, digest wire.Opt[wire.Digest]) (*Artifact, error) {
	if err := w.st.end(true); err != nil {
		return nil, err
	}
	w.cleanup.Stop() // the seal settles the writer's id, whatever its outcome
	c := w.c
	var ok wire.SealOK
	err := c.roundTrip(ctx, wire.OpArtifactSeal, &wire.Seal{ArtifactID: w.id, Generation: w.gen, OwnerID: w.owner, Digest: digest}, &ok,
		func(err error) {
			// The caller gave up: give back whatever the seal left us, the
			// new hold or, after a refusal, the writer's id (a retired id
			// releases nothing).
			if err == nil {
				c.fireAndForget(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{ok.OwnerID}})
			} else if !errors.Is(err, wire.ErrRouterLost) {
				c.fireAndForget(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{w.owner}})
			}
		})
	if err != nil {
		var be *wire.BusError
		if !errors.As(err, &be) || be.Code == wire.ErrRouterLost {
			return nil, err
		}
		// A refused seal leaves the writer's id with the router only when
		// the refusal happened before the seal began; release it (a repeat
		// release of a retired id is a no-op).
		c.fireAndForget(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{w.owner}})
		return nil, err
	}
	return c.newArtifact(ok.Ref, c.holdGuard(ok.OwnerID)), nil
}

// SealNoWait sends the seal and returns the artifact at once, without
// waiting for the router's answer: attach it to a Publish, Call or Reply
// straight away, and the seal and that command cost one round trip
// between them. The router reads a connection's commands in order and
// finishes a seal before the next one, so the command finds the artifact
// sealed; if the seal fails, the command fails with the seal's error and
// nothing is published, called or replied.
//
// Until the seal is answered the artifact's reference is the one the seal
// is expected to produce. Ref, View, ReaderAt, ReadAll and Retain wait for
// the answer; Sealed waits and reports the seal's outcome. Close the
// artifact as one returned by Seal.
func (w *ArtifactWriter) SealNoWait() (*Artifact, error) {
	return w.sealNoWait(wire.Opt[wire.Digest]{})
}

// SealNoWaitWithDigest is SealNoWait with SealWithDigest's check.
func (w *ArtifactWriter) SealNoWaitWithDigest(hexDigest string) (*Artifact, error) {
	d, ok := wire.ParseDigest(hexDigest)
	if !ok {
		return nil, fmt.Errorf("flybus: digest %q is not 64 lowercase hex digits", hexDigest)
	}
	return w.sealNoWait(wire.Some(d))
}

func (w *ArtifactWriter) sealNoWait(digest wire.Opt[wire.Digest]) (*Artifact, error) {
	if err := w.st.end(true); err != nil {
		return nil, err
	}
	w.cleanup.Stop() // the artifact's guard owns the writer's id from here
	c := w.c
	ref := wire.ArtifactRef{StoreID: w.storeID, ArtifactID: w.id, Generation: w.gen, ByteLength: uint64(w.size),
		ContentType: w.contentType, Digest: digest}
	s := &sealing{done: make(chan struct{}), ref: ref}
	var ok wire.SealOK
	wt := &waiter{op: wire.OpArtifactSeal, v: &ok, complete: func(err error) {
		// The reader settles the seal before it dispatches the reply of
		// the command behind it. After a refusal the writer's id is
		// released by the artifact's Close, like any hold.
		if err == nil {
			s.ref = ok.Ref
		} else {
			s.err = err
		}
		close(s.done)
	}}
	a := c.newArtifact(ref, c.holdGuard(w.owner))
	a.seal = s
	if err := c.enqueueWith(wire.OpArtifactSeal, &wire.Seal{ArtifactID: w.id, Generation: w.gen, OwnerID: w.owner, Digest: digest},
		nil, wt, false, nil); err != nil {
		a.Close()
		return nil, err
	}
	c.flush()
	return a, nil
}

// sealing is a seal sent by SealNoWait, settled by the reader when its
// answer arrives.
type sealing struct {
	done chan struct{}
	ref  wire.ArtifactRef // expected, then (once done) the sealed reference
	err  error            // set before done closes
}

// Close abandons an unsealed writer: the staging file is collected.
// Idempotent; a no-op after Seal.
func (w *ArtifactWriter) Close() error {
	if err := w.st.finish(); err != nil {
		return nil
	}
	w.cleanup.Stop()
	w.c.fireAndForget(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{w.owner}})
	return nil
}

// Artifact is a read-only handle on an immutable artifact, backed by one
// owner on the router: an explicit hold, or the delivery it arrived with.
// Clone shares that owner; the last handle closed releases it.
type Artifact struct {
	c       *Client
	ref     wire.ArtifactRef // for a seal in flight (seal != nil), the expected one
	seal    *sealing
	g       *guard
	closed  atomic.Bool
	cleanup runtime.Cleanup
}

// newArtifact makes a handle holding one reference on g (taken by the
// caller).
func (c *Client) newArtifact(ref wire.ArtifactRef, g *guard) *Artifact {
	a := &Artifact{c: c, ref: ref, g: g}
	a.cleanup = watch(c, a, "Artifact", g.drop)
	return a
}

// Ref is the artifact's identity. For an artifact of SealNoWait it waits
// for the seal's answer (and is the expected reference if the seal failed).
func (a *Artifact) Ref() wire.ArtifactRef {
	if a.seal == nil {
		return a.ref
	}
	<-a.seal.done
	return a.seal.ref
}

// Sealed waits for the answer to SealNoWait and returns the seal's error,
// if it failed. An artifact sealed any other way is sealed: nil at once.
func (a *Artifact) Sealed(ctx context.Context) error {
	_, err := a.settled(ctx)
	return err
}

// settled returns the artifact's reference once its seal is answered.
func (a *Artifact) settled(ctx context.Context) (wire.ArtifactRef, error) {
	s := a.seal
	if s == nil {
		return a.ref, nil
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		return wire.ArtifactRef{}, ctx.Err()
	}
	if s.err != nil {
		return wire.ArtifactRef{}, sealFailed(s.err)
	}
	return s.ref, nil
}

// sealFailed wraps the error of a seal sent without waiting, keeping its
// code for errors.Is and errors.As.
func sealFailed(err error) error { return fmt.Errorf("flybus: the artifact's seal failed: %w", err) }

// OwnerID is the owner this handle uses on the router.
func (a *Artifact) OwnerID() wire.OwnerID { return a.g.owner }

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
	err = c.roundTrip(ctx, wire.OpArtifactRetain, &wire.RefOwner{Ref: ref, OwnerID: a.g.owner}, &ok, func(err error) {
		if err == nil {
			c.fireAndForget(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{ok.OwnerID}})
		}
	})
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
		select {
		case <-o.done:
		case <-ctx.Done():
			return nil, wire.Location{}, ctx.Err()
		}
		if o.err == nil {
			ok = o.ok
			a.c.openedAhead.Add(1)
		}
	}
	if ok.ReadLocation.RelativePath == "" {
		a.c.artifactOpens.Add(1)
		if err := a.c.roundTrip(ctx, wire.OpArtifactOpen, &wire.RefOwner{Ref: ref, OwnerID: a.g.owner}, &ok, nil); err != nil {
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
	v.cleanup = watch(a.c, v, "ArtifactView", func() { m.Close(); c.unmaps.Add(1); g.drop() })
	return v, nil
}

// cachedView is a view of the first size bytes of a cached slot mapping,
// holding the reference on the owner the caller took.
func (a *Artifact) cachedView(sm *slotMap, size int) *ArtifactView {
	c, g := a.c, a.g
	v := &ArtifactView{sm: sm, data: sm.r.Bytes()[:size:size], g: g, c: c}
	v.cleanup = watch(c, v, "ArtifactView", func() { c.slots.release(sm); g.drop() })
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
	cleanup runtime.Cleanup
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

// ArtifactReader reads an artifact through a descriptor (io.ReaderAt).
type ArtifactReader struct {
	f       *os.File
	size    int64
	g       *guard
	closed  atomic.Bool
	cleanup runtime.Cleanup
}

// ReaderAt opens the artifact for positioned reads; close it when done.
func (a *Artifact) ReaderAt(ctx context.Context) (*ArtifactReader, error) {
	f, _, err := a.openHeld(ctx)
	if err != nil {
		return nil, err
	}
	r := &ArtifactReader{f: f, size: int64(a.ref.ByteLength), g: a.g}
	g := a.g
	r.cleanup = watch(a.c, r, "ArtifactReader", func() { f.Close(); g.drop() })
	return r, nil
}

// ReadAt implements io.ReaderAt.
func (r *ArtifactReader) ReadAt(p []byte, off int64) (int, error) {
	if r.closed.Load() {
		return 0, closedHandle("artifact reader")
	}
	return r.f.ReadAt(p, off)
}

// Size is the artifact's length.
func (r *ArtifactReader) Size() int64 { return r.size }

// Close closes the descriptor and releases the reader's hold.
func (r *ArtifactReader) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	r.cleanup.Stop()
	err := r.f.Close()
	r.g.drop()
	return err
}

// ReadAll copies the artifact's bytes.
func (a *Artifact) ReadAll(ctx context.Context) ([]byte, error) {
	r, err := a.ReaderAt(ctx)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	// The length comes from the router; the file says how much there is.
	// Sizing the copy from an unchecked length would let a bad reference
	// crash the program (a length past what make accepts) or exhaust it.
	fi, err := r.f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() != r.size {
		return nil, fmt.Errorf("flybus: %s's file holds %d bytes, its reference says %d", a.ref.ArtifactID, fi.Size(), r.size)
	}
	buf := make([]byte, r.size)
	if _, err := r.ReadAt(buf, 0); err != nil && !(errors.Is(err, io.EOF) && r.size == 0) {
		return nil, err
	}
	return buf, nil
}

// Attachment names an artifact an envelope carries.
type Attachment struct {
	Name     string
	Artifact *Artifact
}

// Attach pairs a name with an artifact for Publish, Call and Reply.
func Attach(name string, a *Artifact) Attachment { return Attachment{Name: name, Artifact: a} }

// wireAttachments takes a reference on every artifact's owner for the
// duration of an admission, so no source guard is dropped while the
// operation might still be admitted. The returned func gives them back.
func wireAttachments(atts []Attachment) ([]wire.Attachment, func(), error) {
	out := make([]wire.Attachment, 0, len(atts))
	var held []*guard
	undo := func() {
		for _, g := range held {
			g.drop()
		}
	}
	for _, a := range atts {
		if a.Artifact == nil {
			undo()
			return nil, nil, fmt.Errorf("flybus: attachment %q has no artifact", a.Name)
		}
		if err := a.Artifact.take(); err != nil {
			undo()
			return nil, nil, fmt.Errorf("flybus: attachment %q: %w", a.Name, err)
		}
		held = append(held, a.Artifact.g)
		ref := a.Artifact.ref
		if s := a.Artifact.seal; s != nil {
			select {
			case <-s.done:
				if s.err != nil {
					undo()
					return nil, nil, fmt.Errorf("flybus: attachment %q: %w", a.Name, sealFailed(s.err))
				}
				ref = s.ref
			default: // in flight: the expected reference (see sendAttached)
			}
		}
		out = append(out, wire.Attachment{Name: a.Name, Ref: ref, OwnerID: a.Artifact.g.owner})
	}
	return out, undo, nil
}

// sendAttached runs send with the attachments in wire form, their owners
// held for the admission; undo, passed to send for its orphan handler,
// gives them back. A refusal caused by an attachment's seal sent without
// waiting reports the seal's error. If such a seal put its artifact
// elsewhere than expected (a pooled store copies when a writer kept the
// slot open), the command is sent once more with the sealed references.
func sendAttached[T any](c *Client, atts []Attachment, send func(watts []wire.Attachment, undo func()) (T, error)) (T, error) {
	for retried := false; ; retried = true {
		watts, undo, err := wireAttachments(atts)
		if err != nil {
			var zero T
			return zero, err
		}
		v, err := send(watts, undo)
		if isCtxErr(err) {
			return v, err // the orphan handler gives the owners back
		}
		undo() // admitted or refused: the router holds its own roots now
		if err == nil {
			if c != nil {
				c.prepareWanted() // the frame is out: its successor's allocation is off its way
			}
			return v, nil
		}
		retry, err := sealOutcome(atts, watts, err)
		if !retry || retried {
			return v, err
		}
	}
}

// sealOutcome explains a refusal of a command that attached artifacts of
// SealNoWait: the router answers a seal before the command behind it, so
// by now every such seal is settled.
func sealOutcome(atts []Attachment, sent []wire.Attachment, err error) (retry bool, _ error) {
	var be *wire.BusError
	if !errors.As(err, &be) || be.Code == wire.ErrRouterLost {
		return false, err
	}
	for i, a := range atts {
		s := a.Artifact.seal
		if s == nil {
			continue
		}
		select {
		case <-s.done:
		default:
			continue // not sent ahead of this command after all
		}
		if s.err != nil {
			return false, fmt.Errorf("flybus: attachment %q: %w", a.Name, sealFailed(s.err))
		}
		retry = retry || s.ref != sent[i].Ref
	}
	if retry {
		return true, nil
	}
	return false, err
}

// attachSet is a delivery's attachments in envelope order (at most 32, so
// lookups scan).
type attachSet []wire.Attachment

func (s attachSet) ref(name string) (wire.ArtifactRef, bool) {
	for _, a := range s {
		if a.Name == name {
			return a.Ref, true
		}
	}
	return wire.ArtifactRef{}, false
}

func (s attachSet) names() []string {
	out := make([]string, len(s))
	for i, a := range s {
		out[i] = a.Name
	}
	return out
}

// deliveryArtifacts checks a delivery's attachments (each must be owned by
// the delivery itself) and keeps a copy.
func deliveryArtifacts(d wire.DeliveryID, atts []wire.Attachment) (attachSet, error) {
	if len(atts) == 0 {
		return nil, nil
	}
	for _, a := range atts {
		if a.OwnerID != wire.DeliveryOwner(d) {
			return nil, fmt.Errorf("delivery %s carries an attachment owned by %s", d, a.OwnerID)
		}
	}
	return append(attachSet(nil), atts...), nil
}

// artifactFrom extracts a named artifact sharing a delivery's guard, for
// the handle d (what names it in errors), refused once d is closed.
func (c *Client) artifactFrom(d *delivered, refs attachSet, name string) (*Artifact, error) {
	if err := d.live(); err != nil {
		return nil, err
	}
	ref, ok := refs.ref(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q (it carries %q)", ErrNoAttachment, name, refs.names())
	}
	if !d.g.add() {
		return nil, closedHandle(d.what)
	}
	return c.newArtifact(ref, d.g), nil
}

// delivered is the share of a delivery held by the message, request or
// result it arrived as: closed once, released by the safety net if the
// program forgets.
type delivered struct {
	what    string // "message", "request", "result"
	g       *guard
	closed  atomic.Bool
	cleanup runtime.Cleanup
}

// live reports an error once the handle is closed.
func (d *delivered) live() error {
	if d.closed.Load() {
		return closedHandle(d.what)
	}
	return nil
}

// close drops the share once; false if it was already closed.
func (d *delivered) close() bool {
	if d.closed.Swap(true) {
		return false
	}
	d.cleanup.Stop()
	d.g.drop()
	return true
}
