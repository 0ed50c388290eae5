package router_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"strconv"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

// A subscriber that stops reading fills its socket; from then on its own
// writer goroutine takes over its frames, while the publisher's commands
// keep being answered at once. When the subscriber reads again, every
// frame arrives whole and in order, the part a step wrote and the part it
// handed to the writer.
func TestStalledSubscriberIsWrittenByItsOwnWriter(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := context.Background()
		pub, r := h.rawBoundedSubscriber("pub", "stalled", "big")
		l := wire.DefaultLimits()
		// In-flight deliveries of about 60 KB each: more than either
		// transport buffers, so the writes cannot all complete at once.
		n := l.MaxBoundedInFlight
		fill := bytes.Repeat([]byte{'x'}, 60000)
		payload := func(i int) wire.RawJSON {
			return wire.RawJSON(`{"i":` + strconv.Itoa(i) + `,"fill":"` + string(fill) + `"}`)
		}
		before := h.r.Stats()
		for i := range n {
			if _, err := pub.Publish(ctx, "big", payload(i)); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "a handoff to the stalled subscriber's writer", func() bool {
			return h.r.Stats().WriterHandoffs > before.WriterHandoffs
		})
		// The publisher is still served while the subscriber's writer is
		// blocked.
		mustDeclare(t, pub, "other", wire.RetainNone)
		var msg wire.TopicMessage
		for i := range n {
			if err := r.next(); err != nil {
				t.Fatalf("delivery %d: %v", i, err)
			}
			if r.env.Op != wire.OpTopicMessage {
				t.Fatalf("delivery %d is %s", i, r.env.Op)
			}
			if err := r.env.DecodeBody(&msg); err != nil {
				t.Fatal(err)
			}
			if msg.TopicSequence != uint64(i+1) || !bytes.Equal(msg.Payload, payload(i)) {
				t.Fatalf("delivery %d: sequence %d, %d payload bytes", i, msg.TopicSequence, len(msg.Payload))
			}
		}
		if st := h.r.Stats(); st.DirectWrites == before.DirectWrites {
			t.Fatal("no step wrote its frames itself")
		}
	})
}

// rawBoundedSubscriber dials a publisher that declares topic and a raw
// subscriber to it, bounded with the router's largest queue and in-flight
// window: a subscriber that can leave its socket unread.
func (h *harness) rawBoundedSubscriber(pubID, subID, topic string) (*client.Client, *raw) {
	h.t.Helper()
	pub := h.dialWithTopic(pubID, topic, wire.RetainNone)
	r := newRaw(h.t, h.conn(""))
	r.hello(subID)
	l := wire.DefaultLimits()
	rawOK(h.t, r, wire.OpSubscribe, &wire.Subscribe{Topic: topic, Mode: wire.ModeBounded,
		MaxQueued: uint32(l.MaxBoundedQueued), MaxInFlight: uint32(l.MaxBoundedInFlight)}, &wire.SubscribeOK{})
	return pub, r
}

// A seal and the publish that attaches its artifact, written back to back
// in one write: the router reads a connection's commands in order and
// finishes the seal before the next one, so the publish finds the artifact
// sealed (one round trip for both). A seal that fails takes the publish
// with it: nothing is published.
func TestPublishBehindItsSealSeesItSealed(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		r := newRaw(t, h.conn(""))
		r.hello("pipeliner")
		rawOK(t, r, wire.OpTopicDeclare, &wire.Declare{Name: "piped", Retained: wire.RetainLatest}, &wire.DeclareOK{})
		data := bytes.Repeat([]byte{0x5a}, 1<<20)
		for round := range 10 {
			alloc, ref := rawWritten(t, h, r, data)
			digest := ref.Digest.V
			bad := round%3 == 2 // a digest that cannot match: the seal fails
			if bad {
				digest = wire.Digest{}
				ref.Digest = wire.Some(digest)
			}
			r.id++
			b, err := wire.AppendFrame(nil, wire.Header{ID: r.id, Kind: wire.KindCommand, Op: wire.OpArtifactSeal},
				&wire.Seal{Allocation: alloc.Allocation, Digest: wire.Some(digest)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			r.id++
			b, err = wire.AppendFrame(b, wire.Header{ID: r.id, Kind: wire.KindCommand, Op: wire.OpPublish},
				&wire.Publish{Topic: "piped", Payload: wire.RawJSON(`{}`)}, []wire.Attachment{{Name: "frame", Ref: ref, OwnerID: alloc.OwnerID}})
			if err != nil {
				t.Fatal(err)
			}
			before := h.r.Stats().Publications
			r.sendBytes(b)
			var sealed wire.SealOK
			sealErr := r.reply(&sealed)
			var pub wire.PublishOK
			pubErr := r.reply(&pub)
			if bad {
				if sealErr == nil || sealErr.Code != wire.ErrArtifactMismatch {
					t.Fatalf("round %d: seal with a wrong digest: %v", round, sealErr)
				}
				if pubErr == nil {
					t.Fatalf("round %d: the publish behind a failed seal was admitted", round)
				}
				if n := h.r.Stats().Publications; n != before {
					t.Fatalf("round %d: %d publications after a failed seal, want %d", round, n, before)
				}
				continue
			}
			if sealErr != nil || pubErr != nil {
				t.Fatalf("round %d: seal %v, publish %v", round, sealErr, pubErr)
			}
			if sealed.Ref != ref {
				t.Fatalf("round %d: sealed as %+v, published as %+v", round, sealed.Ref, ref)
			}
			rawOK(t, r, wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{sealed.OwnerID}}, &wire.Released{})
		}
	})
}

// Commands that arrive together are answered together: while the router
// has more whole frames of a connection buffered it steps them before it
// writes, so the replies to a batch leave in one write, and the reply to
// the batch's last command still leaves at once.
func TestRepliesToABatchShareAWrite(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		r := newRaw(t, h.conn(""))
		r.hello("batcher")
		const n = 6
		var b []byte
		for i := range n {
			r.id++
			var err error
			b, err = wire.AppendFrame(b, wire.Header{ID: r.id, Kind: wire.KindCommand, Op: wire.OpTopicDeclare},
				&wire.Declare{Name: "batch." + strconv.Itoa(i), Retained: wire.RetainNone}, nil)
			if err != nil {
				t.Fatal(err)
			}
		}
		before := detailsOf(t, h.r.Details().Clients, byClient, "batcher")
		r.sendBytes(b)
		for i := range n {
			if err := r.reply(&wire.DeclareOK{}); err != nil {
				t.Fatalf("declare %d: %v", i, err)
			}
		}
		after := detailsOf(t, h.r.Details().Clients, byClient, "batcher")
		if got := after.FramesWritten - before.FramesWritten; got != n {
			t.Fatalf("%d frames written for %d commands", got, n)
		}
		if got := after.Writes - before.Writes; got != 1 {
			t.Fatalf("the %d replies took %d writes, want 1", n, got)
		}
		// One more command alone is answered alone, without waiting for
		// company.
		rawOK(t, r, wire.OpTopicDeclare, &wire.Declare{Name: "batch.last", Retained: wire.RetainNone}, &wire.DeclareOK{})
		if got := detailsOf(t, h.r.Details().Clients, byClient, "batcher").Writes - after.Writes; got != 1 {
			t.Fatalf("a lone reply took %d writes", got)
		}
	})
}

// A seal may hash or copy for a long time, so it ends the batch before it:
// the reply to a declare in front of a seal leaves before the seal runs,
// and the seal's and the publish's replies behind it share the next write.
// (In memory the writer goroutine writes, whenever it runs: only the
// replies are checked there.)
func TestASealEndsTheBatchBeforeIt(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		r := newRaw(t, h.conn(""))
		r.hello("sealer")
		rawOK(t, r, wire.OpTopicDeclare, &wire.Declare{Name: "sealed", Retained: wire.RetainNone}, &wire.DeclareOK{})
		data := bytes.Repeat([]byte{0x3c}, 1<<16)
		alloc, ref := rawWritten(t, h, r, data)
		digest := ref.Digest.V
		var b []byte
		add := func(op wire.Op, body wire.Body, atts []wire.Attachment) {
			r.id++
			var err error
			if b, err = wire.AppendFrame(b, wire.Header{ID: r.id, Kind: wire.KindCommand, Op: op}, body, atts); err != nil {
				t.Fatal(err)
			}
		}
		add(wire.OpTopicDeclare, &wire.Declare{Name: "other", Retained: wire.RetainNone}, nil)
		add(wire.OpArtifactSeal, &wire.Seal{Allocation: alloc.Allocation, Digest: wire.Some(digest)}, nil)
		add(wire.OpPublish, &wire.Publish{Topic: "sealed", Payload: wire.RawJSON(`{}`)},
			[]wire.Attachment{{Name: "frame", Ref: ref, OwnerID: alloc.OwnerID}})
		before := detailsOf(t, h.r.Details().Clients, byClient, "sealer")
		r.sendBytes(b)
		if err := r.reply(&wire.DeclareOK{}); err != nil {
			t.Fatal(err)
		}
		var sealed wire.SealOK
		if err := r.reply(&sealed); err != nil {
			t.Fatal(err)
		}
		if err := r.reply(&wire.PublishOK{}); err != nil {
			t.Fatal(err)
		}
		rawOK(t, r, wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{sealed.OwnerID}}, &wire.Released{})
		if !h.Unix() {
			return
		}
		after := detailsOf(t, h.r.Details().Clients, byClient, "sealer")
		// Three writes: the declare's reply, the seal's and the publish's,
		// the release's.
		if got := after.Writes - before.Writes; got != 3 {
			t.Fatalf("%d writes, want 3: declare | seal, publish | release", got)
		}
	})
}

// rawWritten allocates len(data) bytes on r, writes data into them, and
// returns the allocation and the reference its seal with the digest of
// data will have.
func rawWritten(t *testing.T, h *harness, r *raw, data []byte) (wire.AllocateOK, wire.ArtifactRef) {
	t.Helper()
	alloc := rawAllocate(t, r, uint64(len(data)))
	f := openLocation(t, h, store.OpenWrite, alloc.WriteLocation)
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return alloc, wire.ArtifactRef{StoreID: alloc.WriteLocation.StoreID, ArtifactID: alloc.ArtifactID, Generation: alloc.Generation,
		ByteLength: uint64(len(data)), ContentType: "x/y", Digest: wire.Some(wire.Digest(sha256.Sum256(data)))}
}
