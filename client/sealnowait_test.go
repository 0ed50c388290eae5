package client

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flybus/flybus/wire"
)

// fakeStore makes a store root whose store 0xabc holds a 4-byte staging
// file of each name, and connects a client with cfg to the fake router
// under it.
func fakeStore(t *testing.T, ctx context.Context, cfg Config, names ...string) (*Client, *fakeRouter, wire.StoreID) {
	t.Helper()
	root := t.TempDir()
	storeID := fakeStoreID
	if err := os.MkdirAll(filepath.Join(root, storeID.String()), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(root, storeID.String(), name), make([]byte, 4), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg.ClientID, cfg.StoreRoot = "sdk-test", root
	c, f, err := connectFakeWith(t, ctx, cfg, func(f *fakeRouter, msg uint64) {
		ok := goodHello()
		f.replyOK(msg, wire.OpHello, &ok)
	})
	if err != nil {
		t.Fatal(err)
	}
	return c, f, storeID
}

// pipelineFixture connects a client to the fake router with a store root
// holding one staging file, and answers an allocation of it.
func pipelineFixture(t *testing.T) (*Client, *fakeRouter, *ArtifactWriter) {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	c, f, storeID := fakeStore(t, ctx, Config{}, "stage-1")
	type allocated struct {
		w   *ArtifactWriter
		err error
	}
	ch := make(chan allocated, 1)
	go func() {
		w, err := c.Allocate(ctx, 4, "x/y")
		ch <- allocated{w, err}
	}()
	env := f.command(wire.OpArtifactAllocate)
	f.replyOK(env.ID, wire.OpArtifactAllocate, &wire.AllocateOK{Allocation: wire.Allocation{ArtifactID: 7, Generation: 3, OwnerID: wire.HoldOwner(1)},
		WriteLocation: wire.Location{StoreID: storeID, RelativePath: "stage-1"}})
	a := <-ch
	if a.err != nil {
		t.Fatal(a.err)
	}
	if _, err := a.w.Write([]byte("abcd")); err != nil {
		t.Fatal(err)
	}
	return c, f, a.w
}

// sealAndPublish takes a pipelineFixture's writer, seals it without
// waiting and publishes it on topic "t", on a goroutine of its own (the
// fake router's pipe is synchronous). It returns once the fake router has
// read the seal command.
func sealAndPublish(t *testing.T) (ctx context.Context, f *fakeRouter, seal *wire.Envelope, sealed <-chan *Artifact, published <-chan error) {
	t.Helper()
	c, f, w := pipelineFixture(t)
	ctx = testCtx(t, 10*time.Second)
	sealedCh := make(chan *Artifact, 1)
	publishedCh := make(chan error, 1)
	go func() {
		a, err := w.Seal(ctx, NoWait())
		if err != nil {
			publishedCh <- err
			return
		}
		sealedCh <- a
		_, err = c.Publish(ctx, "t", wire.RawJSON(`{}`), Attach("frame", a))
		publishedCh <- err
	}()
	return ctx, f, f.command(wire.OpArtifactSeal), sealedCh, publishedCh
}

// A NoWait seal is written at once, and a Publish attaching the artifact
// follows it without waiting for the seal's answer: the fake router reads
// both commands before it answers either. The publish carries the
// reference the seal is expected to produce, owned by the writer's id.
func TestSealNoWaitSendsTheCommandBehindItAtOnce(t *testing.T) {
	noLeaks(t)
	ctx, f, seal, sealed, published := sealAndPublish(t)
	sealID := seal.ID
	var sb wire.Seal
	if err := seal.DecodeBody(&sb); err != nil || sb.ArtifactID != 7 || sb.Generation != 3 || sb.OwnerID != wire.HoldOwner(1) {
		t.Fatalf("seal %+v: %v", sb, err)
	}
	pub := f.command(wire.OpPublish)
	if len(pub.Attachments) != 1 {
		t.Fatalf("publish attachments %+v", pub.Attachments)
	}
	want := wire.ArtifactRef{StoreID: 0xabc, ArtifactID: 7, Generation: 3, ByteLength: 4, ContentType: "x/y"}
	if at := pub.Attachments[0]; at.Ref != want || at.OwnerID != wire.HoldOwner(1) {
		t.Fatalf("publish attaches %+v", at)
	}
	f.replyOK(sealID, wire.OpArtifactSeal, &wire.SealOK{Ref: want, OwnerID: wire.HoldOwner(1)})
	f.replyOK(pub.ID, wire.OpPublish, &wire.PublishOK{TopicSequence: 1})
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	a := <-sealed
	defer func() {
		a.Close()
		f.replyOK(f.command(wire.OpArtifactRelease).ID, wire.OpArtifactRelease, &wire.Released{})
	}()
	if ref, err := a.Sealed(ctx); err != nil || ref != want || a.Ref() != want {
		t.Fatalf("sealed %v, ref %+v, Ref %+v", err, ref, a.Ref())
	}
}

// A refused seal makes the command behind it report the seal's error, not
// the router's refusal of the unsealed attachment.
func TestSealNoWaitFailureIsTheCommandsError(t *testing.T) {
	noLeaks(t)
	ctx, f, seal, sealed, published := sealAndPublish(t)
	sealID := seal.ID
	pub := f.command(wire.OpPublish)
	f.send(wire.Header{Kind: wire.KindReply, Op: wire.OpArtifactSeal, ReplyTo: wire.Some(wire.MsgID(sealID))},
		&wire.ReplyBody{Err: wire.NewError(wire.ErrStoreFailure, 0, "disk on fire")}, nil)
	f.send(wire.Header{Kind: wire.KindReply, Op: wire.OpPublish, ReplyTo: wire.Some(wire.MsgID(pub.ID))},
		&wire.ReplyBody{Err: wire.NewError(wire.ErrArtifactUnsealed, 0, "not sealed")}, nil)
	err := <-published
	if !errors.Is(err, wire.ErrStoreFailure) {
		t.Fatalf("publish behind a failed seal: %v", err)
	}
	a := <-sealed
	if _, serr := a.Sealed(ctx); !errors.Is(serr, wire.ErrStoreFailure) {
		t.Fatalf("Sealed: %v", serr)
	}
	// The artifact's Close releases the writer's id, as for any hold.
	a.Close()
	rel := f.command(wire.OpArtifactRelease)
	var rb wire.Release
	if err := rel.DecodeBody(&rb); err != nil || len(rb.OwnerIDs) != 1 || rb.OwnerIDs[0] != wire.HoldOwner(1) {
		t.Fatalf("release %+v: %v", rb, err)
	}
	f.replyOK(rel.ID, wire.OpArtifactRelease, &wire.Released{})
}

// An allocation asked for ahead that the router refuses is not an error
// of its own: the next Allocate of that size makes its own round trip and
// reports what holds then.
func TestAllocateAheadRefusedFallsBack(t *testing.T) {
	noLeaks(t)
	ctx := testCtx(t, 10*time.Second)
	c, f, storeID := fakeStore(t, ctx, Config{AllocateAhead: 1}, "stage-1", "stage-2")
	allocate := func(rel string, owner uint64) <-chan error {
		done := make(chan error, 1)
		go func() {
			w, err := c.Allocate(ctx, 4, "x/y")
			if err == nil {
				var a *Artifact
				if a, err = w.Seal(ctx, NoWait()); err == nil {
					_, err = c.Publish(ctx, "t", wire.RawJSON(`{}`), Attach("frame", a))
					a.Close()
				}
			}
			done <- err
		}()
		env := f.command(wire.OpArtifactAllocate)
		f.replyOK(env.ID, wire.OpArtifactAllocate, &wire.AllocateOK{Allocation: wire.Allocation{ArtifactID: wire.ArtifactID(owner), Generation: 1,
			OwnerID: wire.HoldOwner(wire.HoldID(owner))}, WriteLocation: wire.Location{StoreID: storeID, RelativePath: rel}})
		seal := f.command(wire.OpArtifactSeal)
		sealID := seal.ID
		pub := f.command(wire.OpPublish)
		f.replyOK(sealID, wire.OpArtifactSeal, &wire.SealOK{Ref: pub.Attachments[0].Ref, OwnerID: wire.HoldOwner(wire.HoldID(owner))})
		f.replyOK(pub.ID, wire.OpPublish, &wire.PublishOK{TopicSequence: owner})
		return done
	}
	done := allocate("stage-1", 1)
	// The frame went out: the next allocation is asked for, and refused;
	// the first frame's hold is released (control commands go first, so
	// the two come in either order).
	for range 2 {
		b, err := f.fr.ReadFrame()
		if err == nil {
			err = f.dec.Decode(b, &f.env)
		}
		if err != nil {
			t.Fatal(err)
		}
		switch f.env.Op {
		case wire.OpArtifactAllocate:
			f.send(wire.Header{Kind: wire.KindReply, Op: wire.OpArtifactAllocate, ReplyTo: wire.Some(wire.MsgID(f.env.ID))},
				&wire.ReplyBody{Err: wire.NewError(wire.ErrQuotaExceeded, 0, "the store is full")}, nil)
		case wire.OpArtifactRelease:
			f.replyOK(f.env.ID, wire.OpArtifactRelease, &wire.Released{})
		default:
			t.Fatalf("fake router: got %s", f.env.Op)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The second Allocate makes its own round trip.
	done = allocate("stage-2", 2)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.AllocatedAhead != 0 {
		t.Fatalf("%d allocations served ahead after a refusal", st.AllocatedAhead)
	}
}
