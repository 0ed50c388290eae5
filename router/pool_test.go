package router_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/bustest"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

var poolFrames = flag.Int("pool.frames", 1000, "frames the pool concurrency test produces (by hand: 100000)")

// rawSealed allocates, fills and seals n bytes through a raw client.
func rawSealed(t *testing.T, h *harness, r *raw, n int, seed byte) wire.SealOK {
	t.Helper()
	alloc := rawAllocate(t, r, uint64(n))
	writeLocation(t, h, alloc.WriteLocation, frameBytes(seed, n))
	var ok wire.SealOK
	rawOK(t, r, wire.OpArtifactSeal, &wire.Seal{Allocation: alloc.Allocation}, &ok)
	return ok
}

// In pool mode a slot's later generation is a new artifact: every
// operation that names a reference of an earlier one (open, retain,
// attachments on publish, call and reply, seal) is ARTIFACT_GONE, exactly
// as for a collected artifact.
func TestPoolStaleGenerationIsGone(t *testing.T) {
	forEachTransportIn(t, open(), []store.Mode{store.ModePool}, func(t *testing.T, h *harness) {
		r := newRaw(t, h.conn(""))
		r.hello("stale")
		first := rawSealed(t, h, r, 4096, 1)
		rawOK(t, r, wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{first.OwnerID}}, &wire.Released{})
		settle(t, h, "the first generation to be collected", func(s router.Stats) bool { return s.FreeSlots == 1 })
		second := rawSealed(t, h, r, 4096, 2)
		if second.Ref.ArtifactID != first.Ref.ArtifactID || second.Ref.Generation != 2 {
			t.Fatalf("second artifact %+v, want generation 2 of %s", second.Ref, first.Ref.ArtifactID)
		}
		stale := first.Ref
		owner := second.OwnerID // a live owner of the slot's current generation
		gone := func(what string) {
			t.Helper()
			if be := r.reply(&wire.RawJSON{}); be == nil || be.Code != wire.ErrArtifactGone {
				t.Fatalf("%s with generation 1 of a slot at 2: %v, want ARTIFACT_GONE", what, be)
			}
		}
		r.command(wire.OpArtifactOpen, &wire.RefOwner{Ref: stale, OwnerID: owner})
		gone("artifact.open")
		r.command(wire.OpArtifactRetain, &wire.RefOwner{Ref: stale, OwnerID: owner})
		gone("artifact.retain")
		rawOK(t, r, wire.OpTopicDeclare, &wire.Declare{Name: "t", Retained: wire.RetainLatest}, &wire.DeclareOK{})
		att := []wire.Attachment{{Name: "f", Ref: stale, OwnerID: owner}}
		r.commandWith(wire.OpPublish, &wire.Publish{Topic: "t", Payload: wire.RawJSON(`{}`)}, att)
		gone("publish")
		rawOK(t, r, wire.OpServiceRegister, &wire.Register{Name: "svc", MaxQueued: 4, MaxInFlight: 4}, &wire.RegisterOK{})
		r.commandWith(wire.OpRPCCall, &wire.Call{CallID: 1, Target: "svc", Method: "M", Payload: wire.RawJSON(`{}`)}, att)
		gone("rpc.call")

		// A reply with a stale attachment: serve a call made by an SDK
		// client, answered by the raw service.
		caller := h.dial("caller")
		p := mustCall(t, ctxT(t), caller, "svc", 0, "M", nil)
		var req wire.Request
		for req.DeliveryID == 0 {
			if err := r.next(); err != nil {
				t.Fatal(err)
			}
			if r.env.Op == wire.OpRPCRequest {
				if err := r.env.DecodeBody(&req); err != nil {
					t.Fatal(err)
				}
			}
		}
		r.commandWith(wire.OpRPCReply, &wire.Reply{ReplyCapability: req.ReplyCapability(), Outcome: wire.RawJSON(`{}`)}, att)
		gone("rpc.reply")
		p.Close()

		// A writer sealing at a generation other than the one it writes.
		alloc := rawAllocate(t, r, 8192)
		r.command(wire.OpArtifactSeal, &wire.Seal{Allocation: wire.Allocation{ArtifactID: alloc.ArtifactID, Generation: alloc.Generation + 1, OwnerID: alloc.OwnerID}})
		gone("artifact.seal")

		// The current generation still works through the same owner.
		cur := second.Ref
		r.command(wire.OpArtifactOpen, &wire.RefOwner{Ref: cur, OwnerID: owner})
		if be := r.reply(&wire.OpenOK{}); be != nil {
			t.Fatalf("open of the current generation: %v", be)
		}
	})
}

// A consumer of a pooled store maps each slot once: later generations of
// the slot are views of the cached mapping, with no artifact.open, and in
// the steady state the store opens, allocates and unlinks nothing.
func TestPoolViewsUseOneMappingPerSlot(t *testing.T) {
	forEachTransportIn(t, open(), []store.Mode{store.ModePool}, func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		prod, cons, s := h.pubSub("camera", "viewer", "frames", wire.RetainNone, client.Bounded(), client.InFlight(1))
		const frames, size = 40, 64 << 10
		var base router.Stats
		for i := range frames {
			data := frameBytes(byte(i), size)
			a := produce(t, prod, data)
			if _, err := prod.Publish(ctx, "frames", nil, client.Attach("f", a)); err != nil {
				t.Fatal(err)
			}
			a.Close()
			m := nextMessage(t, ctx, s)
			img := mustArtifact(t, m, "f")
			m.Close()
			v := mustMap(t, ctx, img)
			if !bytes.Equal(v.Bytes(), data) {
				t.Fatalf("frame %d: viewed bytes differ", i)
			}
			v.Close()
			img.Close()
			// Each frame is collected before the next is allocated, so the
			// schedule needs one slot; the first frame made it.
			settle(t, h, "the frame to be collected", bustest.Drained)
			if i == 0 {
				base = h.r.Stats()
			}
		}
		settle(t, h, "every frame collected", bustest.Drained)
		st := h.r.Stats()
		if st.StoreOpens != base.StoreOpens || st.StoreFallocates != base.StoreFallocates || st.StoreUnlinks != base.StoreUnlinks {
			t.Errorf("steady state: %d opens, %d fallocates, %d unlinks in the store over %d frames",
				st.StoreOpens-base.StoreOpens, st.StoreFallocates-base.StoreFallocates, st.StoreUnlinks-base.StoreUnlinks, frames-1)
		}
		if st.LeaseSeals != frames || st.Slots != 1 {
			t.Errorf("%d lease seals, %d slots: %+v", st.LeaseSeals, st.Slots, st)
		}
		cs := cons.Stats()
		if cs.ArtifactOpens != uint64(st.Slots) || cs.Maps != uint64(st.Slots) || cs.CachedViews != uint64(frames-st.Slots) {
			t.Errorf("consumer: %+v, want one open and one mapping per slot (%d slots)", cs, st.Slots)
		}
	})
}

// The proof the pool rests on, under load: producers publish frames of a
// few sizes with their digest, three consumers check every byte of every
// frame they view against the digest of the generation they were
// delivered, one of them keeps retained values and holds for a while, and
// the slots are reused throughout.
func TestPoolEveryByteMatchesItsGeneration(t *testing.T) {
	forEachTransportIn(t, open(), []store.Mode{store.ModePool}, func(t *testing.T, h *harness) {
		n := *poolFrames
		if h.unix {
			n /= 2 // the same proof; the socket costs more per frame
		}
		// A deadline for the whole run, scaled to its length.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second+time.Duration(n)*20*time.Millisecond)
		defer cancel()
		admin := h.dial("admin")
		mustDeclare(t, admin, "pool.frames", wire.RetainLatest)
		sizes := []int{4096, 64 << 10, 300 << 10}
		type meta struct {
			Digest string
			Size   int
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		consumers := 3
		ready := make(chan struct{}, consumers)
		for ci := range consumers {
			cons := h.dial(fmt.Sprintf("consumer-%d", ci))
			cfg := []client.SubscribeOption{client.Bounded(), client.Queued(8), client.InFlight(4)}
			if ci == 2 {
				cfg = []client.SubscribeOption{client.Replay()}
			}
			s := mustSubscribe(t, ctx, cons, "pool.frames", cfg...)
			wg.Add(1)
			go func() {
				defer wg.Done()
				ready <- struct{}{}
				var kept []*client.Artifact
				var keptMeta []meta
				check := func(a *client.Artifact, m meta) error {
					v, err := a.View(ctx)
					if err != nil {
						return err
					}
					sum := sha256.Sum256(v.Bytes())
					v.Close()
					if len(v.Bytes()) != 0 || hex.EncodeToString(sum[:]) != m.Digest {
						return fmt.Errorf("consumer %d: %s generation %d does not match its digest", ci, a.Ref().ArtifactID, a.Ref().Generation)
					}
					return nil
				}
				for {
					msg, err := s.Next(ctx)
					if err != nil {
						errs <- err
						return
					}
					var m meta
					if err := msg.Decode(&m); err != nil {
						errs <- err
						return
					}
					if m.Digest == "" { // the producer is done
						msg.Close()
						for i, a := range kept {
							if err := check(a, keptMeta[i]); err != nil {
								errs <- err
							}
							a.Close()
						}
						return
					}
					a, err := msg.Artifact("f")
					msg.Close()
					if err != nil {
						errs <- err
						return
					}
					if err := check(a, m); err != nil {
						errs <- err
						return
					}
					// Consumer 1 holds a few artifacts across many later
					// generations and checks them again when it lets go.
					if ci == 1 && len(kept) < 4 && m.Size == sizes[0] {
						held, err := a.Retain(ctx)
						if err != nil {
							errs <- err
							return
						}
						kept, keptMeta = append(kept, held), append(keptMeta, m)
					}
					a.Close()
				}
			}()
		}
		for range consumers {
			<-ready
		}
		prod := h.dial("producer")
		rng := rand.New(rand.NewPCG(uint64(n), 7))
		for i := range n {
			size := sizes[rng.IntN(len(sizes))]
			data := frameBytes(byte(i), size)
			sum := sha256.Sum256(data)
			d := hex.EncodeToString(sum[:])
			w, err := prod.Allocate(ctx, int64(size), "x/frame")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write(data); err != nil {
				t.Fatal(err)
			}
			a, err := w.Seal(ctx, client.Digest(d))
			if err != nil {
				t.Fatal(err)
			}
			publishAll(t, prod, meta{Digest: d, Size: size}, client.Attach("f", a))
			a.Close()
		}
		publishAll(t, prod, meta{}) // tells every consumer it has seen the last frame
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		st := h.r.Stats()
		t.Logf("%d frames: %d slots, %d lease seals, %d copy seals, %d store opens", n, st.Slots, st.LeaseSeals, st.CopySeals, st.StoreOpens)
		if st.Slots >= int64(n)/4 {
			t.Errorf("%d slots for %d frames: slots are not reused", st.Slots, n)
		}
	})
}

// publishAll publishes to pool.frames, retrying while a bounded consumer
// is full (admission is all or nothing, so every subscriber gets it once).
func publishAll(t *testing.T, prod *client.Client, payload any, atts ...client.Attachment) {
	t.Helper()
	for {
		_, err := prod.Publish(ctxT(t), "pool.frames", payload, atts...)
		if err == nil {
			return
		}
		if code(t, err) != wire.ErrBackpressure {
			t.Fatal(err)
		}
		barrier(t, prod)
	}
}
