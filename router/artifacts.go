package router

import (
	"github.com/flybus/flybus/wire"
)

// The ownership graph. An artifact is collected when its last root goes.
// Roots are: queue entries and deliveries that carry it (one per entry or
// delivery however often it is named), explicit holds, and a topic's
// retained value. A writer's hold on a staging artifact is not a root of a
// sealed object; releasing it before the seal abandons the artifact.
//
// File I/O never happens under the router lock: the core records effects
// (stage, seal, unlink) that the shell runs after the step, and the results
// of stage and seal come back as new steps.

type artState uint8

const (
	artStaging artState = iota + 1 // allocated; the writer may fill it
	artSealing                     // seal I/O in progress
	artSealed
)

type artifact struct {
	id          wire.ArtifactID // in pool mode the slot, known once staged
	gen         uint64          // 1 in files mode; the slot's use in pool mode
	dead        bool            // abandoned or collected: out of k.artifacts for good
	size        uint64
	contentType string
	state       artState
	relPath     string // staging file, then sealed file
	digest      wire.Opt[wire.Digest]
	roots       int
	writer      *hold // while staging or sealing: own
	copyReserve bool  // store bytes reserved for a seal copy
	// retire: a connection that ended owned it, and its program may still
	// map it, so in pool mode its slot is unlinked when it is collected,
	// never reused for a later generation.
	retire bool
	// own is the writer's hold, kept here so that allocating makes no
	// hold of its own; sealed, it is the producer's explicit hold.
	own hold
}

// hold is an explicit owner (own-<n>): a writer, or a hold on a sealed
// artifact.
type hold struct {
	id     wire.HoldID
	conn   *conn
	art    *artifact
	writer bool
}

// effect is I/O the shell performs outside the lock.
type effect struct {
	kind    effKind
	conn    *conn
	art     *artifact
	replyTo wire.MsgID
	relPath string
	gen     uint64 // effUnlink: the generation that ends (pool mode)
	retire  bool   // effUnlink: unlink the slot instead of reusing it (pool mode)
	size    int64
	digest  *[32]byte
}

// artLoc is where the store put an artifact: its file and, in pool mode,
// its slot and generation.
type artLoc struct {
	relPath string
	slot    uint64
	gen     uint64
}

type effKind uint8

const (
	effStage effKind = iota + 1
	effSeal
	effUnlink // collect: unlink the file, or recycle the slot's generation
)

func (k *core) addEffect(e effect) { k.effects = append(k.effects, e) }

// takeEffects hands the shell the I/O to run.
func (k *core) takeEffects(dst []effect) []effect {
	dst = append(dst, k.effects...)
	clear(k.effects)
	k.effects = k.effects[:0]
	return dst
}

// addRoots and dropRoots count one root per distinct artifact of a queue
// entry or delivery.
func (k *core) addRoots(arts []*artifact) {
	for _, a := range arts {
		a.roots++
	}
}

func (k *core) dropRoots(arts []*artifact) {
	for _, a := range arts {
		a.roots--
		if a.roots == 0 && a.state == artSealed {
			k.collect(a)
		}
	}
}

// collect unregisters an unowned sealed artifact; the unlink happens
// outside the lock. A process that still maps it keeps its pages.
func (k *core) collect(a *artifact) {
	delete(k.artifacts, a.id)
	a.dead = true
	k.storeBytes -= a.size
	k.stats.collected++
	k.addEffect(effect{kind: effUnlink, relPath: a.relPath, gen: a.gen, retire: a.retire})
}

func (k *core) opAllocate(c *conn, env *wire.Envelope, b *wire.Allocate) *wire.BusError {
	if !k.hasStore {
		return wire.NewError(wire.ErrStoreFailure, 0, "this router runs without an artifact store")
	}
	if b.ByteLength > k.limits.MaxArtifactBytes {
		return wire.NewError(wire.ErrQuotaExceeded, 0, "%d bytes exceed maxArtifactBytes", b.ByteLength)
	}
	if k.storeBytes+b.ByteLength > k.limits.MaxStoreBytes {
		return wire.NewError(wire.ErrQuotaExceeded, 0, "the store is full (maxStoreBytes)")
	}
	if !c.hasRoom(1, k.limits.MaxOwnersPerClient-k.limits.ReservedOwnersPerClient) {
		return wire.NewError(wire.ErrQuotaExceeded, 0, "the client holds its maxOwnersPerClient budget")
	}
	if k.slotShare > 0 && len(c.holds) >= k.slotShare {
		return wire.NewError(wire.ErrQuotaExceeded, 0, "the client holds %d artifacts, its share of the store's slot files (each keeps a descriptor open)", len(c.holds))
	}
	a := k.artSlab.new()
	*a = artifact{gen: 1, size: b.ByteLength, contentType: b.ContentType, state: artStaging}
	if !k.pool {
		k.nextArtifact++
		a.id = wire.ArtifactID(k.nextArtifact)
		k.artifacts[a.id] = a
	} // in pool mode the slot the store hands out names it
	a.own = hold{conn: c, art: a, writer: true}
	h := k.addHold(c, &a.own)
	a.writer = h
	k.storeBytes += a.size
	k.addEffect(effect{kind: effStage, conn: c, art: a, replyTo: wire.MsgID(env.ID), size: int64(a.size)})
	return nil
}

func (k *core) newHold(c *conn, a *artifact, writer bool) *hold {
	return k.addHold(c, &hold{conn: c, art: a, writer: writer})
}

// addHold gives h the connection's next hold id.
func (k *core) addHold(c *conn, h *hold) *hold {
	c.holdNext++
	h.id = wire.HoldID(c.holdNext)
	c.holds[h.id] = h
	return h
}

// stagedAt completes an allocation at loc. In pool mode the artifact takes
// its slot's id and generation here.
func (k *core) stagedAt(e effect, loc artLoc, full bool, err error) {
	defer k.settle()
	a, c := e.art, e.conn
	if err != nil {
		k.abandon(a)
		code := wire.ErrStoreFailure
		if full {
			code = wire.ErrQuotaExceeded // a bound of the store's, not a failure
		}
		k.refuseTo(c, wire.OpArtifactAllocate, e.replyTo, wire.NewError(code, 0, "staging: %v", err))
		return
	}
	if a.writer == nil || c.closing {
		// The writer went while the file was prepared: nothing to hand out,
		// but the command still gets its answer.
		k.addEffect(effect{kind: effUnlink, relPath: loc.relPath, gen: loc.gen, retire: c.closing})
		k.refuseTo(c, wire.OpArtifactAllocate, e.replyTo, wire.NewError(wire.ErrArtifactGone, 0, "the artifact was released while it was staged"))
		return
	}
	a.relPath = loc.relPath
	if k.pool {
		a.id, a.gen = wire.ArtifactID(loc.slot), loc.gen
		k.artifacts[a.id] = a
	}
	k.scratch.allocOK = wire.AllocateOK{Allocation: wire.Allocation{ArtifactID: a.id, Generation: a.gen,
		OwnerID: wire.HoldOwner(a.writer.id)}, WriteLocation: wire.Location{StoreID: k.storeID, RelativePath: a.relPath}}
	k.replyTo(c, wire.OpArtifactAllocate, e.replyTo, &k.scratch.allocOK)
}

// abandon drops an unsealed artifact and its reservation; its staging file
// (once it has one) is unlinked, or its slot recycled, outside the lock.
func (k *core) abandon(a *artifact) {
	if a.dead {
		return
	}
	a.dead = true
	if k.artifacts[a.id] == a {
		delete(k.artifacts, a.id)
	}
	k.storeBytes -= a.size
	if a.copyReserve {
		k.storeBytes -= a.size
		a.copyReserve = false
	}
	if a.writer != nil {
		delete(a.writer.conn.holds, a.writer.id)
		a.writer = nil
	}
	if a.relPath != "" && a.state == artStaging {
		k.addEffect(effect{kind: effUnlink, relPath: a.relPath, gen: a.gen, retire: a.retire})
	}
}

func (k *core) opSeal(c *conn, env *wire.Envelope, b *wire.Seal) *wire.BusError {
	if b.OwnerID.Delivery {
		return wire.NewError(wire.ErrOwnerInvalid, 0, "only the writer's own id seals")
	}
	h := c.holds[wire.HoldID(b.OwnerID.N)]
	if h == nil || !h.writer || h.art.id != b.ArtifactID {
		if b.OwnerID.N > c.holdNext {
			return wire.NewError(wire.ErrOwnerInvalid, 0, "%s was never issued here", b.OwnerID)
		}
		return wire.NewError(wire.ErrOwnerInvalid, 0, "%s is not the writer of %s", b.OwnerID, b.ArtifactID)
	}
	a := h.art
	if b.Generation != a.gen {
		if k.pool {
			return wire.NewError(wire.ErrArtifactGone, 0, "generation %d of %s is gone (its writer writes generation %d)", b.Generation, a.id, a.gen)
		}
		return wire.NewError(wire.ErrArtifactMismatch, 0, "generation is always 1")
	}
	if a.state != artStaging || a.relPath == "" {
		return wire.NewError(wire.ErrArtifactUnsealed, 0, "%s is already being sealed", a.id)
	}
	// A copy seal needs room for both files while it runs.
	if k.storeBytes+a.size > k.limits.MaxStoreBytes {
		return wire.NewError(wire.ErrQuotaExceeded, 0, "no store room for a seal copy")
	}
	k.storeBytes += a.size
	a.copyReserve = true
	a.state = artSealing
	a.digest = b.Digest
	e := effect{kind: effSeal, conn: c, art: a, replyTo: wire.MsgID(env.ID), relPath: a.relPath, size: int64(a.size)}
	if b.Digest.Valid {
		d := [32]byte(b.Digest.V)
		e.digest = &d
	}
	k.addEffect(e)
	return nil
}

// sealedAt completes a seal that put the artifact at loc. A writer released
// or disconnected meanwhile means the artifact is never published. In pool
// mode a copying seal moves the artifact to another slot; the store keeps
// the one it left quarantined, so no effect names it.
func (k *core) sealedAt(e effect, loc artLoc, mismatch bool, err error) {
	defer k.settle()
	a, c := e.art, e.conn
	if a.copyReserve {
		k.storeBytes -= a.size
		a.copyReserve = false
	}
	if err != nil {
		// The store removed the staging file and any partial copy.
		k.abandonSealedFailure(a)
		code := wire.ErrStoreFailure
		if mismatch {
			code = wire.ErrArtifactMismatch
		}
		k.refuseTo(c, wire.OpArtifactSeal, e.replyTo, wire.NewError(code, 0, "seal: %v", err))
		return
	}
	a.relPath = loc.relPath
	if k.pool && wire.ArtifactID(loc.slot) != a.id {
		if k.artifacts[a.id] == a {
			delete(k.artifacts, a.id)
		}
		a.id, a.gen = wire.ArtifactID(loc.slot), loc.gen
		if !a.dead {
			k.artifacts[a.id] = a
		}
	}
	if a.writer == nil || c.closing {
		// Released or disconnected mid-seal: never published.
		a.state = artSealed
		k.abandonSealedFailure(a)
		k.addEffect(effect{kind: effUnlink, relPath: loc.relPath, gen: loc.gen, retire: c.closing})
		k.refuseTo(c, wire.OpArtifactSeal, e.replyTo, wire.NewError(wire.ErrArtifactGone, 0, "%s was released during its seal", a.id))
		return
	}
	a.state = artSealed
	h := a.writer
	h.writer, a.writer = false, nil
	a.roots = 1 // the writer's id, now an explicit hold
	k.stats.seals++
	k.scratch.sealOK = wire.SealOK{Ref: k.refOf(a), OwnerID: wire.HoldOwner(h.id)}
	k.replyTo(c, wire.OpArtifactSeal, e.replyTo, &k.scratch.sealOK)
}

// abandonSealedFailure forgets an artifact whose seal failed or whose
// writer left during the seal.
func (k *core) abandonSealedFailure(a *artifact) {
	if !a.dead {
		a.dead = true
		if k.artifacts[a.id] == a {
			delete(k.artifacts, a.id)
		}
		k.storeBytes -= a.size
	}
	if a.writer != nil {
		delete(a.writer.conn.holds, a.writer.id)
		a.writer = nil
	}
}

func (k *core) refOf(a *artifact) wire.ArtifactRef {
	return wire.ArtifactRef{StoreID: k.storeID, ArtifactID: a.id, Generation: a.gen, ByteLength: a.size,
		ContentType: a.contentType, Digest: a.digest}
}

func (k *core) opOpen(c *conn, env *wire.Envelope, b *wire.RefOwner) *wire.BusError {
	a, err := k.checkOwnedRef(c, &b.Ref, b.OwnerID)
	if err != nil {
		return err
	}
	k.reply(c, env, &wire.OpenOK{ReadLocation: wire.Location{StoreID: k.storeID, RelativePath: a.relPath}})
	return nil
}

func (k *core) opRetain(c *conn, env *wire.Envelope, b *wire.RefOwner) *wire.BusError {
	a, err := k.checkOwnedRef(c, &b.Ref, b.OwnerID)
	if err != nil {
		return err
	}
	if !c.hasRoom(1, k.limits.MaxOwnersPerClient-k.limits.ReservedOwnersPerClient) {
		return wire.NewError(wire.ErrQuotaExceeded, 0, "the client holds its maxOwnersPerClient budget")
	}
	h := k.newHold(c, a, false)
	a.roots++
	k.reply(c, env, &wire.RetainOK{OwnerID: wire.HoldOwner(h.id)})
	return nil
}

func (k *core) opRelease(c *conn, env *wire.Envelope, b *wire.Release) *wire.BusError {
	for _, o := range b.OwnerIDs {
		if o.Delivery {
			return wire.NewError(wire.ErrOwnerInvalid, 0, "%s is a delivery: consume it with delivery.consumed", o)
		}
		if o.N == 0 || o.N > c.holdNext {
			return wire.NewError(wire.ErrOwnerInvalid, 0, "%s was never issued here", o)
		}
	}
	var n uint64
	for _, o := range b.OwnerIDs {
		if h := c.holds[wire.HoldID(o.N)]; h != nil {
			k.releaseHold(h)
			n++
		}
	}
	k.scratch.released = wire.Released{Released: n}
	k.reply(c, env, &k.scratch.released)
	return nil
}

// releaseHold drops one explicit owner: a writer abandons its artifact (a
// seal in flight finds it gone), a hold drops its root.
func (k *core) releaseHold(h *hold) {
	delete(h.conn.holds, h.id)
	h.conn = nil // out of every table: let a closed connection go
	a := h.art
	if h.writer {
		a.writer = nil
		if a.state == artStaging {
			k.abandon(a)
		}
		return
	}
	k.dropRoots([]*artifact{a})
}
