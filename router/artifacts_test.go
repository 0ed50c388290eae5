package router_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/bustest"
	"github.com/flybus/flybus/internal/shmtest"
	"github.com/flybus/flybus/mmap"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

const frameSize = 640 * 480 * 4

// readSealed reads a sealed artifact's bytes through a raw client's
// artifact.open and the store's read-only resolution.
func readSealed(t *testing.T, h *harness, r *raw, sealed wire.SealOK) []byte {
	t.Helper()
	var op wire.OpenOK
	rawOK(t, r, wire.OpArtifactOpen, &wire.RefOwner{Ref: sealed.Ref, OwnerID: sealed.OwnerID}, &op)
	rf := openLocation(t, h, store.OpenRead, op.ReadLocation)
	defer rf.Close()
	got := make([]byte, sealed.Ref.ByteLength)
	if _, err := rf.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestAllocateWriteSealRead(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		maps0 := shmtest.Mappings(t, h.root)
		c := h.dial("producer")
		data := frameBytes(3, frameSize)
		a := produce(t, c, data)
		ref := a.Ref()
		if ref.ByteLength != frameSize || ref.Generation != 1 || ref.StoreID != h.r.StoreID() || ref.ContentType != "image/x-rgba" {
			t.Fatalf("ref %+v", ref)
		}
		if s := h.r.Stats(); s.LeaseSeals != 1 || s.CopySeals != 0 || s.SealedArtifacts != 1 {
			t.Fatalf("the seal was not the zero-copy lease path: %+v", s)
		}
		checkBytes(t, ctx, a, data, "the sealed artifact")
		v := mustMap(t, ctx, a)
		if !bytes.Equal(v.Bytes(), data) {
			t.Fatal("view bytes differ")
		}
		fi, err := os.Stat(findSealed(t, h))
		if err != nil || fi.Mode().Perm() != 0o444 {
			t.Fatalf("sealed file mode: %v %v", fi, err)
		}
		a.Close() // the view still holds the owner
		if s := h.r.Stats(); s.Artifacts != 1 {
			t.Fatalf("collected while a view was open: %+v", s)
		}
		v.Close()
		settle(t, h, "collection", bustest.Drained)
		if sealedFiles(t, h) != 0 {
			t.Fatal("the sealed file was not unlinked")
		}
		if m := shmtest.Mappings(t, h.root); m != maps0+h.cachedSlots() {
			t.Fatalf("mappings: %d before, %d after (%d cached slots)", maps0, m, h.cachedSlots())
		}
	})
}

func findSealed(t *testing.T, h *harness) string {
	t.Helper()
	if p := sealedPaths(t, h); len(p) > 0 {
		return p[0]
	}
	t.Fatal("no sealed file")
	return ""
}

func TestSealChecksDigestAndAbandonCleansUp(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		c := h.dial("producer")
		data := frameBytes(9, 4096)
		sum := sha256.Sum256(data)
		w := mustAllocate(t, ctx, c, 4096, "application/octet-stream")
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
		a, err := w.Seal(ctx, client.Digest(hex.EncodeToString(sum[:])))
		if err != nil {
			t.Fatal(err)
		}
		if !a.Ref().Digest.Valid || a.Ref().Digest.V != wire.Digest(sum) {
			t.Fatalf("digest not in the ref: %+v", a.Ref())
		}
		a.Close()
		w2 := mustAllocate(t, ctx, c, 4096, "application/octet-stream")
		if _, err := w2.Write(data); err != nil {
			t.Fatal(err)
		}
		wrong := sha256.Sum256([]byte("other"))
		if _, err := w2.Seal(ctx, client.Digest(hex.EncodeToString(wrong[:]))); code(t, err) != wire.ErrArtifactMismatch {
			t.Fatalf("wrong digest: %v", err)
		}
		mustAllocate(t, ctx, c, 4096, "application/octet-stream").Close() // abandoned unsealed
		settle(t, h, "abandoned artifacts collected", bustest.Drained)
		if s := h.r.Stats(); s.StoreFiles != 0 {
			t.Fatalf("files left: %+v", s)
		}
	})
}

func TestArtifactQuotas(t *testing.T) {
	forEachTransport(t, openWith(wire.Limits{MaxArtifactBytes: 1 << 20, MaxStoreBytes: 3 << 20}), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		c := h.dial("p")
		if _, err := c.Allocate(ctx, 1<<20+1, "x/y"); code(t, err) != wire.ErrQuotaExceeded {
			t.Fatalf("over maxArtifactBytes: %v", err)
		}
		a := produce(t, c, frameBytes(1, 1<<20))
		b := produce(t, c, frameBytes(2, 1<<20))
		// Two sealed MiB and a third staged leave no room for a seal copy.
		w := mustAllocate(t, ctx, c, 1<<20, "x/y")
		if _, err := c.Allocate(ctx, 1, "x/y"); code(t, err) != wire.ErrQuotaExceeded {
			t.Fatalf("over maxStoreBytes: %v", err)
		}
		if _, err := w.Seal(ctx); code(t, err) != wire.ErrQuotaExceeded {
			t.Fatalf("seal without room for a copy: %v", err)
		}
		a.Close()
		b.Close()
		settle(t, h, "everything released", bustest.Drained)
	})
}

// Fan-out adds owners, never bytes: three subscribers share one file, and
// the last one to let go collects it.
func TestFanOutSharesOneFile(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		prod := h.dial("producer")
		mustDeclare(t, prod, "world.frame", wire.RetainNone)
		var subs []*client.Subscription
		for _, id := range []string{"agent-a", "agent-b", "viewer"} {
			subs = append(subs, mustSubscribe(t, ctx, h.dial(id), "world.frame"))
		}
		data := frameBytes(5, frameSize)
		publishFrame(t, prod, "world.frame", map[string]int{"w": 640}, data) // deliveries own it now
		var msgs []*client.Message
		for _, s := range subs {
			msgs = append(msgs, nextMessage(t, ctx, s))
		}
		if n := sealedFiles(t, h); n != 1 {
			t.Fatalf("%d sealed files for one frame fanned out to three", n)
		}
		// The producer's release is asynchronous; then one root per delivery.
		settle(t, h, "three roots", func(s router.Stats) bool { return s.ArtifactRoots == 3 })
		for i, m := range msgs {
			if !bytes.Equal(viewFrame(t, ctx, m), data) {
				t.Fatalf("consumer %d read different bytes", i)
			}
			if i < len(msgs)-1 && sealedFiles(t, h) != 1 {
				t.Fatal("collected before the last consumer")
			}
		}
		settle(t, h, "the last consumer to collect it", bustest.Drained)
		if sealedFiles(t, h) != 0 {
			t.Fatal("file left after the last consumer")
		}
	})
}

// An artifact extracted from a message, and a view of it, outlive the
// message; the delivery (and its credit) is released only when all are
// closed.
func TestExtractedArtifactOutlivesItsMessage(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		prod, cons, s := h.pubSub("producer", "consumer", "frames", wire.RetainNone, client.Bounded(), client.InFlight(1))
		data := frameBytes(8, 65536)
		publishFrame(t, prod, "frames", nil, data)
		m := nextMessage(t, ctx, s)
		img := mustArtifact(t, m, "frame")
		if _, err := m.Artifact("nope"); !errors.Is(err, client.ErrNoAttachment) {
			t.Fatalf("missing attachment: %v", err)
		}
		m.Close() // the image still holds the delivery
		v := mustMap(t, ctx, img)
		img.Close() // the view still holds it
		barrier(t, cons)
		settle(t, h, "the producer's hold to go", func(s router.Stats) bool { return s.ArtifactRoots == 1 })
		if st := h.r.Stats(); st.Owners != 1 || st.Artifacts != 1 {
			t.Fatalf("released too early: %+v", st)
		}
		if !bytes.Equal(v.Bytes(), data) {
			t.Fatal("view bytes differ")
		}
		v.Close()
		settle(t, h, "the delivery consumed", bustest.Drained)
	})
}

// A consumer forwards a frame it received to a service before releasing
// its own delivery; the service's request owns it independently.
func TestForwardBeforeRelease(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		prod, coord, s := h.pubSub("producer", "coordinator", "frames", wire.RetainNone)
		svc := mustRegister(t, ctx, h.dial("agent"), "agent.fly-a")
		data := frameBytes(4, 100_000)
		publishFrame(t, prod, "frames", nil, data)
		m := nextMessage(t, ctx, s)
		img := mustArtifact(t, m, "frame")
		p := mustCall(t, ctx, coord, "agent.fly-a", 0, "Agent.Step", nil, client.Attach("frame", img))
		img.Close()
		m.Close() // the coordinator's delivery is gone; the request still owns the frame
		req := nextRequest(t, ctx, svc)
		fa := mustArtifact(t, req, "frame")
		checkBytes(t, ctx, fa, data, "forwarded bytes")
		fa.Close()
		if _, err := req.Reply(ctx, nil); err != nil {
			t.Fatal(err)
		}
		req.Close()
		mustResult(t, ctx, p).Close()
		settle(t, h, "everything released", bustest.Drained)
	})
}

// An endpoint cache keeps an artifact-bearing result with an explicit hold:
// a lost result and a domain retry under a fresh call id both get valid
// bytes, and eviction drops the last hold.
func TestEndpointCacheReplaysArtifactResults(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		agent, caller, svc := h.serviceAndCaller("agent", "agent.render")
		data := frameBytes(6, 8192)
		var cache *client.Artifact // by domain request id "r-1"
		serve := func() {
			req, err := svc.Next(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			if cache == nil {
				cache = produce(t, agent, data)
			}
			if _, err := req.Reply(ctx, map[string]string{"requestId": "r-1"}, client.Attach("image", cache)); err != nil {
				t.Error(err)
			}
			req.Close()
		}
		p1 := mustCall(t, ctx, caller, "agent.render", 0, "Render", map[string]string{"requestId": "r-1"})
		serve()
		p1.Close() // the caller gave up: its result is consumed unseen (a lost reply)
		p2 := mustCall(t, ctx, caller, "agent.render", 0, "Render", map[string]string{"requestId": "r-1"})
		serve()
		res := mustResult(t, ctx, p2)
		img := mustArtifact(t, res, "image")
		checkBytes(t, ctx, img, data, "retried result bytes")
		img.Close()
		res.Close()
		cache.Close() // eviction
		settle(t, h, "everything released", bustest.Drained)
	})
}

func TestReleaseWatermarksAndConnectionScopedOwners(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		a, b := h.dial("a"), h.dial("b")
		art := produce(t, a, frameBytes(1, 1024))
		_ = b
		// A raw client owns an allocation of its own, so its owner id is
		// known here; the SDK's are not exported.
		ra := newRaw(t, h.conn(""))
		ra.hello("rawa")
		var alloc wire.AllocateOK
		rawOK(t, ra, wire.OpArtifactAllocate, &wire.Allocate{ByteLength: 16, ContentType: "x/y"}, &alloc)
		// Another connection cannot use ra's owner id.
		rb := newRaw(t, h.conn(""))
		rb.hello("rawb")
		rb.command(wire.OpArtifactRetain, &wire.RefOwner{Ref: art.Ref(), OwnerID: alloc.OwnerID})
		if be := rb.reply(&wire.RetainOK{}); be == nil || be.Code != wire.ErrOwnerInvalid {
			t.Fatalf("foreign owner: %v", be)
		}
		ra.command(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{{N: alloc.OwnerID.N + 5}}})
		if be := ra.reply(&wire.Released{}); be == nil || be.Code != wire.ErrOwnerInvalid {
			t.Fatalf("never-issued id: %v", be)
		}
		var rel wire.Released
		ra.command(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{alloc.OwnerID}})
		if be := ra.reply(&rel); be != nil || rel.Released != 1 {
			t.Fatalf("release: %v %d", be, rel.Released)
		}
		ra.command(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{alloc.OwnerID}})
		if be := ra.reply(&rel); be != nil || rel.Released != 0 {
			t.Fatalf("repeat release: %v %d", be, rel.Released)
		}
		art.Close()
		settle(t, h, "everything released", bustest.Drained)
	})
}

// The seal is immune to a writable descriptor kept past it: the kernel
// refuses the lease, the router copies into a fresh inode, and later writes
// through the kept descriptor change nothing a reader sees.
func TestSealWithLiveWriterFallsBackToCopy(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		r := newRaw(t, h.conn(""))
		r.hello("rawp")
		data := frameBytes(2, 8192)
		var alloc wire.AllocateOK
		rawOK(t, r, wire.OpArtifactAllocate, &wire.Allocate{ByteLength: 8192, ContentType: "x/y"}, &alloc)
		f := openLocation(t, h, store.OpenWrite, alloc.WriteLocation)
		defer f.Close()
		if _, err := f.WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		var sealed wire.SealOK
		rawOK(t, r, wire.OpArtifactSeal, &wire.Seal{Allocation: wire.Allocation{ArtifactID: alloc.ArtifactID, Generation: 1, OwnerID: alloc.OwnerID}}, &sealed)
		if s := h.r.Stats(); s.CopySeals != 1 || s.LeaseSeals != 0 {
			t.Fatalf("seal path: %+v", s)
		}
		if _, err := f.WriteAt(bytes.Repeat([]byte{0xff}, 8192), 0); err != nil { // too late: an orphaned inode
			t.Fatal(err)
		}
		if !bytes.Equal(readSealed(t, h, r, sealed), data) {
			t.Fatal("sealed bytes changed through the kept descriptor")
		}
		// Publication of an unsealed artifact fails.
		r.command(wire.OpArtifactAllocate, &wire.Allocate{ByteLength: 16, ContentType: "x/y"})
		var alloc2 wire.AllocateOK
		r.reply(&alloc2)
		r.command(wire.OpTopicDeclare, &wire.Declare{Name: "t", Retained: wire.RetainNone})
		r.reply(&wire.DeclareOK{})
		ref := wire.ArtifactRef{StoreID: h.r.StoreID(), ArtifactID: alloc2.ArtifactID, Generation: 1, ByteLength: 16, ContentType: "x/y"}
		r.id++
		b, _ := wire.AppendFrame(nil, wire.Header{ID: r.id, Kind: wire.KindCommand, Op: wire.OpPublish},
			&wire.Publish{Topic: "t"}, []wire.Attachment{{Name: "a", Ref: ref, OwnerID: alloc2.OwnerID}})
		r.sendBytes(b)
		if be := r.reply(&wire.PublishOK{}); be == nil || be.Code != wire.ErrArtifactUnsealed {
			t.Fatalf("unsealed publication: %v", be)
		}
	})
}

// A writable mapping kept past the seal forces the copy path too, and
// writes through it afterwards do not reach the sealed bytes.
func TestSealWithLiveMappingFallsBackToCopy(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		r := newRaw(t, h.conn(""))
		r.hello("rawm")
		alloc := rawAllocate(t, r, 16384)
		f := openLocation(t, h, store.OpenWrite, alloc.WriteLocation)
		m, err := mmap.MapWritable(f, 16384)
		f.Close() // only the mapping keeps the file open now
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		data := frameBytes(3, 16384)
		copy(m.Bytes(), data)
		var sealed wire.SealOK
		rawOK(t, r, wire.OpArtifactSeal, &wire.Seal{Allocation: wire.Allocation{ArtifactID: alloc.ArtifactID, Generation: 1, OwnerID: alloc.OwnerID}}, &sealed)
		if s := h.r.Stats(); s.CopySeals != 1 || s.LeaseSeals != 0 {
			t.Fatalf("seal path with a live mapping: %+v", s)
		}
		copy(m.Bytes(), bytes.Repeat([]byte{0xee}, 16384)) // too late
		if !bytes.Equal(readSealed(t, h, r, sealed), data) {
			t.Fatal("sealed bytes changed through the kept mapping")
		}
	})
}

// A writer released while its seal runs: the artifact is never published,
// the seal is answered, and nothing is left behind. Which of the two
// commands the seal's I/O races is up to the scheduler, so both orders
// are accepted, each checked for consistency.
func TestWriterReleasedDuringSeal(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		r := newRaw(t, h.conn(""))
		r.hello("raws")
		for range 5 {
			alloc := rawAllocate(t, r, 1<<20)
			// Seal and release written back to back in one write.
			var b []byte
			r.id++
			b, _ = wire.AppendFrame(b, wire.Header{ID: r.id, Kind: wire.KindCommand, Op: wire.OpArtifactSeal},
				&wire.Seal{Allocation: wire.Allocation{ArtifactID: alloc.ArtifactID, Generation: 1, OwnerID: alloc.OwnerID}, Digest: wire.Some(wire.Digest{})}, nil)
			r.id++
			b, _ = wire.AppendFrame(b, wire.Header{ID: r.id, Kind: wire.KindCommand, Op: wire.OpArtifactRelease},
				&wire.Release{OwnerIDs: []wire.OwnerID{alloc.OwnerID}}, nil)
			r.sendBytes(b)
			var rel wire.Released
			var sealErr *wire.BusError
			for range 2 {
				if err := r.next(); err != nil {
					t.Fatal(err)
				}
				switch r.env.Op {
				case wire.OpArtifactRelease:
					if be, err := r.env.DecodeReply(&rel); err != nil || be != nil {
						t.Fatalf("release: %v %v", be, err)
					}
				case wire.OpArtifactSeal:
					var ok wire.SealOK
					be, err := r.env.DecodeReply(&ok)
					if err != nil {
						t.Fatal(err)
					}
					sealErr = be
				}
			}
			// The zero digest never matches: a seal that ran to the end
			// reports ARTIFACT_MISMATCH; one overtaken by the release
			// reports ARTIFACT_GONE. Neither publishes anything.
			if sealErr == nil || (sealErr.Code != wire.ErrArtifactGone && sealErr.Code != wire.ErrArtifactMismatch) {
				t.Fatalf("seal after release: %v", sealErr)
			}
			waitFor(t, "nothing left", func() bool { s := h.r.Stats(); return s.Artifacts == 0 && s.StoreBytes == 0 })
		}
		if n := sealedFiles(t, h); n != 0 {
			t.Fatalf("%d sealed files left", n)
		}
	})
}

// A consumer's disconnect releases its logical ownership; bytes it still
// has mapped do not change, and the file goes once nobody owns it.
func TestDisconnectReleasesOwnershipWithoutTouchingMappedBytes(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		prod := h.dial("producer")
		consNC := h.conn("")
		cons, err := client.Connect(ctx, consNC, client.Config{ClientID: "consumer", StoreRoot: h.root})
		if err != nil {
			t.Fatal(err)
		}
		s := declareAndSubscribe(t, prod, cons, "frames", wire.RetainNone)
		data := frameBytes(7, frameSize)
		publishFrame(t, prod, "frames", nil, data)
		m := nextMessage(t, ctx, s)
		img := mustArtifact(t, m, "frame")
		v := mustMap(t, ctx, img)
		cons.Close() // the connection goes with the view still mapped
		settle(t, h, "the router to collect", bustest.Drained)
		if sealedFiles(t, h) != 0 {
			t.Fatal("file not unlinked after the last logical owner left")
		}
		if !bytes.Equal(v.Bytes(), data) {
			t.Fatal("mapped bytes changed after collection")
		}
		v.Close()
		img.Close()
		m.Close()
	})
}

func TestRouterRestartInvalidatesOldHandles(t *testing.T) {
	root := shmtest.Dir(t, "flybus-test-")
	r1 := openRouterOn(t, root)
	c, err := client.Connect(ctxT(t), inMemory(t, r1), client.Config{ClientID: "p", StoreRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	a := produce(t, c, frameBytes(1, 100))
	oldRef := a.Ref()
	if err := r1.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ReadAll(ctxT(t)); code(t, err) != wire.ErrRouterLost {
		t.Fatalf("old handle after restart: %v", err)
	}
	a.Close()
	r2 := openRouterOn(t, root)
	defer r2.Shutdown(context.Background())
	// An old reference presented to the new router names a store
	// incarnation that is gone.
	nc2 := inMemory(t, r2)
	r := newRaw(t, nc2)
	r.hello("raw")
	r.command(wire.OpArtifactOpen, &wire.RefOwner{Ref: oldRef, OwnerID: wire.HoldOwner(1)})
	if be := r.reply(&wire.OpenOK{}); be == nil || be.Code != wire.ErrArtifactGone {
		t.Fatalf("old ref on a new router: %v", be)
	}
	if ents, err := os.ReadDir(root); err != nil || len(ents) != 1 {
		t.Fatalf("store root holds %d directories (%v), want only the new store", len(ents), err)
	}
}

// Row 12.4: ARTIFACT_MISMATCH refuses an attachment whose reference
// disagrees with the artifact it names.
func TestMismatchedRefIsRefused(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		r := newRaw(t, h.conn(""))
		r.hello("rawp")
		rawOK(t, r, wire.OpTopicDeclare, &wire.Declare{Name: "t", Retained: wire.RetainNone}, &wire.DeclareOK{})
		var alloc wire.AllocateOK
		rawOK(t, r, wire.OpArtifactAllocate, &wire.Allocate{ByteLength: 16, ContentType: "x/y"}, &alloc)
		r.command(wire.OpArtifactSeal, &wire.Seal{Allocation: wire.Allocation{ArtifactID: alloc.ArtifactID, Generation: 1, OwnerID: alloc.OwnerID}})
		var sealed wire.SealOK
		if be := r.reply(&sealed); be != nil {
			t.Fatal(be)
		}
		publish := func(ref wire.ArtifactRef) *wire.BusError {
			t.Helper()
			r.id++
			b, err := wire.AppendFrame(nil, wire.Header{ID: r.id, Kind: wire.KindCommand, Op: wire.OpPublish},
				&wire.Publish{Topic: "t"}, []wire.Attachment{{Name: "a", Ref: ref, OwnerID: sealed.OwnerID}})
			if err != nil {
				t.Fatal(err)
			}
			r.sendBytes(b)
			return r.reply(&wire.PublishOK{})
		}
		longer := sealed.Ref
		longer.ByteLength++
		if be := publish(longer); be == nil || be.Code != wire.ErrArtifactMismatch {
			t.Fatalf("wrong byteLength: %v", be)
		}
		other := sealed.Ref
		other.ContentType = "x/z"
		if be := publish(other); be == nil || be.Code != wire.ErrArtifactMismatch {
			t.Fatalf("wrong contentType: %v", be)
		}
		if be := publish(sealed.Ref); be != nil {
			t.Fatalf("the matching reference: %v", be)
		}
		if st := h.r.Stats(); st.Publications != 1 {
			t.Fatalf("publications %d, want only the matching one", st.Publications)
		}
		var rel wire.Released
		r.command(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{sealed.OwnerID}})
		if be := r.reply(&rel); be != nil || rel.Released != 1 {
			t.Fatalf("release: %v %d", be, rel.Released)
		}
		settle(t, h, "everything released", bustest.Drained)
	})
}
