package router

import "github.com/flybus/flybus/wire"

// What every operation shares: answering a command (at once, or after its
// I/O, by message id), checking the artifacts an envelope attaches, and
// sizing the delivery admission would create. The op files call down into
// these.

// reply queues {ok:true, value} answering env.
func (k *core) reply(c *conn, env *wire.Envelope, v wire.Body) {
	k.replyTo(c, env.Op, wire.MsgID(env.ID), v)
}

// refuse queues {ok:false, error} answering env.
func (k *core) refuse(c *conn, env *wire.Envelope, e *wire.BusError) {
	k.refuseTo(c, env.Op, wire.MsgID(env.ID), e)
}

// notice queues a notice body on c's control lane.
func (k *core) notice(c *conn, op wire.Op, b wire.Body) {
	k.buf = b.AppendJSON(k.buf[:0])
	k.pushControl(c, wire.KindNotice, op, wire.Opt[wire.MsgID]{}, k.buf, false)
}

// replyTo and refuseTo answer a command whose reply was deferred past I/O.
func (k *core) replyTo(c *conn, op wire.Op, id wire.MsgID, v wire.Body) {
	rb := wire.ReplyBody{Value: v}
	k.buf = rb.AppendJSON(k.buf[:0])
	k.pushControl(c, wire.KindReply, op, wire.Some(id), k.buf, false)
}

func (k *core) refuseTo(c *conn, op wire.Op, id wire.MsgID, e *wire.BusError) {
	if int(e.Code) < len(k.stats.refusals) {
		k.stats.refusals[e.Code]++
	}
	rb := wire.ReplyBody{Err: e}
	k.buf = rb.AppendJSON(k.buf[:0])
	k.pushControl(c, wire.KindReply, op, wire.Some(id), k.buf, false)
}

// checkAttachments validates an envelope's attachments all or nothing and
// returns the distinct artifacts they name. Every reference must name a
// live sealed artifact of this store exactly, through an owner this
// connection holds on that same artifact.
func (k *core) checkAttachments(c *conn, atts []wire.Attachment) ([]*artifact, *wire.BusError) {
	if len(atts) == 0 {
		return nil, nil
	}
	// Collected in scratch, valid until the next call: a caller that keeps
	// the list copies it (k.artLists).
	arts := k.scratch.arts[:0]
	for i := range atts {
		a, err := k.checkOwnedRef(c, &atts[i].Ref, atts[i].OwnerID)
		if err != nil {
			k.scratch.arts = arts[:0]
			return nil, err
		}
		dup := false
		for _, x := range arts {
			dup = dup || x == a
		}
		if !dup {
			arts = append(arts, a)
		}
	}
	k.scratch.arts = arts[:0]
	return arts, nil
}

// checkOwnedRef resolves ref through owner, which must be c's and must root
// the same artifact.
func (k *core) checkOwnedRef(c *conn, ref *wire.ArtifactRef, owner wire.OwnerID) (*artifact, *wire.BusError) {
	if ref.StoreID != k.storeID {
		return nil, wire.NewError(wire.ErrArtifactGone, 0, "%s belongs to another store incarnation", ref.ArtifactID)
	}
	a := k.artifacts[ref.ArtifactID]
	if a == nil {
		return nil, wire.NewError(wire.ErrArtifactGone, 0, "%s is gone", ref.ArtifactID)
	}
	if a.state != artSealed {
		return nil, wire.NewError(wire.ErrArtifactUnsealed, 0, "%s is not sealed", ref.ArtifactID)
	}
	if k.pool && ref.Generation != a.gen {
		// The slot holds another generation now (or not yet): that
		// artifact is as gone as a collected one.
		return nil, wire.NewError(wire.ErrArtifactGone, 0, "generation %d of %s is gone (the slot is at generation %d)",
			ref.Generation, ref.ArtifactID, a.gen)
	}
	if ref.Generation != a.gen || ref.ByteLength != a.size || ref.ContentType != a.contentType || ref.Digest != a.digest {
		return nil, wire.NewError(wire.ErrArtifactMismatch, 0, "the reference disagrees with %s", ref.ArtifactID)
	}
	if !k.ownerRoots(c, owner, a) {
		return nil, wire.NewError(wire.ErrOwnerInvalid, 0, "%s is not an owner of %s on this connection", owner, ref.ArtifactID)
	}
	return a, nil
}

// ownerRoots reports whether owner is live on c and roots a.
func (k *core) ownerRoots(c *conn, owner wire.OwnerID, a *artifact) bool {
	if !owner.Delivery {
		h := c.holds[wire.HoldID(owner.N)]
		return h != nil && !h.writer && h.art == a
	}
	ref, ok := c.dlvs[wire.DeliveryID(owner.N)]
	if !ok {
		return false
	}
	for _, x := range ref.arts {
		if x == a {
			return true
		}
	}
	return false
}

// deliverySize encodes a delivery with the longest router-added ids and
// returns its length: what the router would have to send must fit too.
func (k *core) deliverySize(op wire.Op, body wire.Body, atts []wire.Attachment) int {
	if len(atts) > 0 {
		long := k.scratch.atts[:0]
		for _, a := range atts {
			a.OwnerID = wire.OwnerID{Delivery: true, N: maxSerial}
			long = append(long, a)
		}
		k.scratch.atts, atts = long, long
	}
	k.buf = wire.AppendEnvelope(k.buf[:0], wire.Header{ID: maxSerial, Kind: wire.KindDelivery, Op: op}, body, atts)
	clear(k.scratch.atts)
	return len(k.buf)
}

// deniedCall is denied for a call grant, which may name methods too: a
// target some pattern admits is refused for its method.
func deniedCall(patterns []Pattern, target, method string) *wire.BusError {
	if matchCall(patterns, target, method) {
		return nil
	}
	if matchAny(patterns, target) {
		return wire.NewError(wire.ErrNotAuthorized, 0, "no call grant for method %s of %s", method, target)
	}
	return denied(patterns, "call", target)
}

// denied is the NOT_AUTHORIZED refusal of a name none of a grant's
// patterns match; nil when one does.
func denied(patterns []Pattern, grant, name string) *wire.BusError {
	if matchAny(patterns, name) {
		return nil
	}
	return wire.NewError(wire.ErrNotAuthorized, 0, "no %s grant for %s", grant, name)
}
