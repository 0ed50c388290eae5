package client_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/bustest"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

// isClosedHandle fails the test unless err says that this handle was closed.
func isClosedHandle(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, client.ErrHandleClosed) {
		t.Fatalf("%s after its Close: %v, want ErrHandleClosed", what, err)
	}
	if !strings.Contains(err.Error(), "was already closed") {
		t.Fatalf("%s after its Close: %q does not say the handle was already closed", what, err)
	}
	if errors.Is(err, client.ErrClosed) || errors.Is(err, wire.ErrRouterLost) {
		t.Fatalf("%s after its Close: %v also claims the client or router ended", what, err)
	}
}

func mustClone(t *testing.T, a *client.Artifact) *client.Artifact {
	t.Helper()
	c, err := a.Clone()
	return bustest.OrFatal(t, c, err)
}

// waitSettled waits until the router holds nothing, then checks that no
// control command of c was refused: none was a use after release.
func waitSettled(t *testing.T, h *bustest.Harness, what string, c *client.Client) {
	t.Helper()
	bustest.WaitFor(t, what, h.Settled)
	if n := c.Stats().ControlErrors; n != 0 {
		t.Fatalf("%d refused control commands (a use after release)", n)
	}
}

// A handle refuses use after its own Close even while another share of its
// delivery or hold keeps the owner alive on the router.
func TestHandlesRefuseUseAfterTheirOwnClose(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		prod, _, s := h.PubSub("producer", "consumer", "frames", wire.RetainNone, client.Bounded())
		a := bustest.Produce(t, prod, bustest.FrameBytes(5, 4096))
		if _, err := prod.Publish(ctx, "frames", map[string]int{"n": 1}, client.Attach("img", a)); err != nil {
			t.Fatal(err)
		}
		m := bustest.NextMessage(t, ctx, s)
		img := bustest.MustArtifact(t, m, "img")

		// Message: closed while img shares its delivery.
		m.Close()
		_, err := m.Artifact("img")
		isClosedHandle(t, "Message.Artifact", err)
		isClosedHandle(t, "Message.Decode", m.Decode(&struct{}{}))

		// Artifact: closed while a clone shares the delivery.
		clone := mustClone(t, img)
		img.Close()
		_, err = img.View(ctx)
		isClosedHandle(t, "Artifact.View", err)
		_, err = img.ReadAll(ctx)
		isClosedHandle(t, "Artifact.ReadAll", err)
		_, err = img.Retain(ctx)
		isClosedHandle(t, "Artifact.Retain", err)
		_, err = img.Clone()
		isClosedHandle(t, "Artifact.Clone", err)
		_, err = prod.Publish(ctx, "frames", nil, client.Attach("img", img))
		isClosedHandle(t, "Publish with a closed artifact", err)

		// View: closed while the clone keeps the delivery.
		v := bustest.MustMap(t, ctx, clone)
		v.Close()
		if v.Bytes() != nil {
			t.Fatal("a closed view still hands out its bytes")
		}

		// The clone is still good, and the delivery returns with it.
		if _, err := clone.ReadAll(ctx); err != nil {
			t.Fatal(err)
		}
		clone.Close()
		a.Close()

		// Writer: Close and Seal end it with different sentences.
		w, err := prod.Allocate(ctx, 16, "application/octet-stream")
		if err != nil {
			t.Fatal(err)
		}
		w.Close()
		_, err = w.Write([]byte("x"))
		isClosedHandle(t, "ArtifactWriter.Write", err)
		if !errors.Is(err, client.ErrWriterDone) {
			t.Fatalf("closed writer: %v, want ErrWriterDone too", err)
		}
		w2, err := prod.Allocate(ctx, 16, "application/octet-stream")
		if err != nil {
			t.Fatal(err)
		}
		sealed, err := w2.Seal(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sealed.Close()
		if _, err := w2.Write([]byte("x")); !errors.Is(err, client.ErrWriterDone) || errors.Is(err, client.ErrHandleClosed) ||
			!strings.Contains(err.Error(), "sealed") {
			t.Fatalf("sealed writer: %v", err)
		}

		// Subscription.
		s.Close()
		_, err = s.Next(ctx)
		isClosedHandle(t, "Subscription.Next", err)
		if !errors.Is(err, client.ErrSubscriptionClosed) {
			t.Fatalf("Subscription.Next after Close: %v, want ErrSubscriptionClosed too", err)
		}
		if _, ok := s.TryNext(); ok {
			t.Fatal("TryNext after Close returned a message")
		}
		h.Await("everything released", bustest.Drained)
	})
}

func TestRPCHandlesRefuseUseAfterTheirOwnClose(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		_, caller, svc := h.ServiceAndCaller("server", "svc")
		p := bustest.MustCall(t, ctx, caller, "svc", 0, "M", map[string]any{"x": []int{1, 2}})
		req := bustest.NextRequest(t, ctx, svc)
		// Request: closed while a Responder keeps the reply capability.
		resp := req.Responder()
		req.Close()
		_, err := req.Reply(ctx, nil)
		isClosedHandle(t, "Request.Reply", err)
		isClosedHandle(t, "Request.Decode", req.Decode(&struct{}{}))
		_, err = req.Artifact("f")
		isClosedHandle(t, "Request.Artifact", err)
		_, err = req.Responder().Reply(ctx, nil)
		isClosedHandle(t, "Responder taken after Request.Close", err)

		// A RawJSON inside a value travels as JSON, not base64.
		if _, err := resp.Reply(ctx, map[string]any{"got": req.Payload}); err != nil {
			t.Fatal(err)
		}
		resp.Close()
		_, err = resp.Reply(ctx, nil)
		isClosedHandle(t, "Responder.Reply", err)

		res := bustest.MustResult(t, ctx, p)
		if string(res.Outcome) != `{"got":{"x":[1,2]}}` {
			t.Fatalf("outcome %s", res.Outcome)
		}
		res.Close()
		isClosedHandle(t, "Result.Decode", res.Decode(&struct{}{}))
		_, err = res.Artifact("f")
		isClosedHandle(t, "Result.Artifact", err)

		// PendingCall.
		p.Close()
		_, err = p.Result(ctx)
		isClosedHandle(t, "PendingCall.Result", err)
		_, err = p.Cancel(ctx)
		isClosedHandle(t, "PendingCall.Cancel", err)

		// Service: its own Close, not the client's.
		svc.Close()
		_, err = svc.Next(ctx)
		isClosedHandle(t, "Service.Next", err)
		h.Await("everything released", bustest.Drained)
	})
}

// After the program's own Client.Close every operation says the client was
// closed; after the router went away they say ROUTER_LOST. Both read as
// sentences.
func TestErrorsNameWhatEnded(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		c := h.Dial("closer")
		s := bustest.DeclareAndSubscribe(t, c, c, "t", wire.RetainNone)
		svc := bustest.MustRegister(t, ctx, c, "svc")
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		ops := map[string]error{}
		_, ops["Call"] = c.Call(ctx, "svc", "M", nil)
		_, ops["Publish"] = c.Publish(ctx, "t", nil)
		_, ops["DeclareTopic"] = c.DeclareTopic(ctx, "u", wire.RetainNone)
		_, ops["Allocate"] = c.Allocate(ctx, 8, "x")
		_, ops["Service.Next"] = svc.Next(ctx)
		_, ops["Subscription.Next"] = s.Next(ctx)
		for op, err := range ops {
			if !errors.Is(err, client.ErrClosed) || errors.Is(err, wire.ErrRouterLost) || errors.Is(err, client.ErrHandleClosed) {
				t.Errorf("%s after Client.Close: %v, want ErrClosed", op, err)
			}
		}
		if !errors.Is(ops["Subscription.Next"], client.ErrSubscriptionClosed) {
			t.Errorf("Subscription.Next after Client.Close: %v, want ErrSubscriptionClosed too", ops["Subscription.Next"])
		}

		lost := h.Dial("lost")
		if err := h.Router().Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		<-lost.Done()
		_, err := lost.DeclareTopic(ctx, "v", wire.RetainNone)
		if !errors.Is(err, wire.ErrRouterLost) || errors.Is(err, client.ErrClosed) {
			t.Fatalf("after the router went away: %v, want ROUTER_LOST", err)
		}
		msg := err.Error()
		if strings.Count(msg, "ROUTER_LOST") != 1 || strings.Contains(msg, "(unknown)") || strings.Contains(msg, "not-dispatched") {
			t.Fatalf("error does not read as a sentence: %q", msg)
		}
	})
}

// Close returns once the router has let go of the client, so the same id
// connects again at once.
func TestCloseReleasesTheClientIDAtOnce(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		for i := range 100 {
			c, err := client.Connect(ctx, h.Conn(""), client.Config{ClientID: "again"})
			if err != nil {
				t.Fatalf("connect %d: %v", i, err)
			}
			bustest.MustDeclare(t, c, "t", wire.RetainNone)
			if err := c.Close(); err != nil {
				t.Fatalf("close %d: %v", i, err)
			}
		}
	})
}

func TestConnectRefusesANilConnection(t *testing.T) {
	_, err := client.Connect(context.Background(), nil, client.Config{ClientID: "x"})
	if err == nil || !strings.Contains(err.Error(), "nil connection") {
		t.Fatalf("Connect(nil): %v", err)
	}
}

// A client refused by a full router learns why (QUOTA_EXCEEDED), whether its
// hello was written before the router closed or failed with a broken pipe.
func TestConnectToAFullRouterSaysWhy(t *testing.T) {
	h := bustest.New(t, bustest.OpenWith(wire.Limits{MaxClients: 1}), true)
	defer h.Router().Shutdown(context.Background())
	first := h.Dial("first")
	for i := range 20 {
		_, err := client.Connect(bustest.Ctx(t), h.Conn(""), client.Config{ClientID: "second"})
		if !errors.Is(err, wire.ErrQuotaExceeded) || !strings.Contains(err.Error(), "maxClients") {
			t.Fatalf("attempt %d: %v, want QUOTA_EXCEEDED naming maxClients", i, err)
		}
	}
	bustest.MustDeclare(t, first, "still.up", wire.RetainNone)
}

// Row 2.6: a clone shares its original's owner. Closing the original keeps
// the clone usable; the owner goes only when both are closed.
func TestCloneSharesTheOwner(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		c := h.Dial("producer")
		data := bustest.FrameBytes(11, 4096)
		a := bustest.Produce(t, c, data)
		cl := mustClone(t, a)
		if client.OwnerOf(cl) != client.OwnerOf(a) || cl.Ref() != a.Ref() {
			t.Fatalf("clone %v %+v, original %v %+v", client.OwnerOf(cl), cl.Ref(), client.OwnerOf(a), a.Ref())
		}
		a.Close()
		bustest.Barrier(t, c) // a release, had one been queued, is handled now
		if st := h.Router().Stats(); st.Owners != 1 || st.ArtifactRoots != 1 || st.Artifacts != 1 {
			t.Fatalf("closing the original released the shared owner: %+v", st)
		}
		bustest.CheckBytes(t, ctx, cl, data, "the clone after the original closed")
		cl.Close()
		waitSettled(t, h, "the owner released after both closed", c)
	})
}

// Row 8.3.2: clones and extractions are local: they write nothing.
func TestLocalClonesSendNothing(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		prod := h.Dial("producer")
		cons, tc := dialTap(h, "consumer", client.Config{})
		bustest.MustDeclare(t, prod, "frames", wire.RetainNone)
		s := bustest.MustSubscribe(t, ctx, cons, "frames", client.Bounded())
		a := bustest.Produce(t, prod, bustest.FrameBytes(19, 1024))
		if _, err := prod.Publish(ctx, "frames", nil, client.Attach("img", a)); err != nil {
			t.Fatal(err)
		}
		a.Close()
		bustest.Barrier(t, prod) // the producer's release is processed before the count is read
		m := bustest.NextMessage(t, ctx, s)
		bustest.Barrier(t, cons)
		before := tc.written()
		owners := h.Router().Stats().Owners
		var handles []*client.Artifact
		for range 2 {
			x := bustest.MustArtifact(t, m, "img")
			y := mustClone(t, x)
			handles = append(handles, x, y, mustClone(t, y))
		}
		bustest.Barrier(t, cons) // flushes anything the clones might have queued
		if ops := tc.opsSince(before); len(ops) != 1 || ops[0] != wire.OpTopicDeclare.String() {
			t.Fatalf("clones and extractions wrote %v, want only the barrier", ops)
		}
		if st := h.Router().Stats(); st.Owners != owners {
			t.Fatalf("owners %d before, %d after local clones", owners, st.Owners)
		}
		for _, x := range handles {
			x.Close()
		}
		m.Close()
		waitSettled(t, h, "everything released", cons)
	})
}

// Row 8.3.4: ownership is per delivery. Keeping one of a message's two
// artifacts keeps the other alive too, until the kept one is closed.
func TestOneArtifactKeepsTheDelivery(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		prod, cons, s := h.PubSub("producer", "consumer", "pairs", wire.RetainNone, client.Bounded())
		left, right := bustest.Produce(t, prod, bustest.FrameBytes(21, 2048)), bustest.Produce(t, prod, bustest.FrameBytes(23, 2048))
		if _, err := prod.Publish(ctx, "pairs", nil, client.Attach("left", left), client.Attach("right", right)); err != nil {
			t.Fatal(err)
		}
		left.Close()
		right.Close()
		bustest.Barrier(t, prod)
		m := bustest.NextMessage(t, ctx, s)
		kept := bustest.MustArtifact(t, m, "left")
		m.Close()
		bustest.Barrier(t, cons)
		if n := h.SealedFiles(t); n != 2 {
			t.Fatalf("%d sealed files while one artifact of the delivery is kept, want 2", n)
		}
		if st := h.Router().Stats(); st.Owners != 1 || st.Artifacts != 2 || st.ArtifactRoots != 2 {
			t.Fatalf("the delivery was released with one artifact kept: %+v", st)
		}
		kept.Close()
		h.Await("both collected", bustest.Drained)
		if n := h.SealedFiles(t); n != 0 {
			t.Fatalf("%d sealed files left", n)
		}
	})
}

// Row 8.2.8: a publication whose context has already expired keeps its
// attachment's owner until the late reply arrives. The publish is held
// behind a blocked write; the artifact handle is closed meanwhile. Had the
// guard been dropped with the context, its release would travel on the
// control lane ahead of the publication, which would then be refused.
func TestExpiredPublishKeepsTheGuard(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		prod, tc := dialTap(h, "producer", client.Config{})
		cons := h.Dial("consumer")
		bustest.MustDeclare(t, prod, "frames", wire.RetainNone)
		s := bustest.MustSubscribe(t, ctx, cons, "frames", client.Bounded())
		data := bustest.FrameBytes(17, 4096)
		a := bustest.Produce(t, prod, data)

		held := blockWriter(t, prod, tc)
		expired, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := prod.Publish(expired, "frames", nil, client.Attach("img", a)); !errors.Is(err, context.Canceled) {
			t.Fatalf("publish with an expired context: %v", err)
		}
		a.Close() // the publication still holds the owner
		tc.release()
		if err := <-held; err != nil {
			t.Fatal(err)
		}

		m, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("the late publication was not admitted: %v", err)
		}
		img := bustest.MustArtifact(t, m, "img")
		bustest.CheckBytes(t, ctx, img, data, "the published artifact")
		img.Close()
		m.Close()
		bustest.Barrier(t, prod) // the late reply has been handled
		waitSettled(t, h, "everything released", prod)
		ops := tc.opsSince(0)
		for i, op := range ops {
			if op == wire.OpPublish.String() {
				for _, later := range ops[:i] {
					if later == wire.OpArtifactRelease.String() {
						t.Fatalf("a release was written before the publication: %v", ops)
					}
				}
			}
		}
	})
}

// Row 8.3.16: the SDK's control lane overflowing closes the connection
// rather than drop a release.
func TestClientControlLaneOverflowCloses(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		c, tc := dialTap(h, "producer", client.WithControlLane(client.Config{}, 4))
		var arts []*client.Artifact
		for i := range 5 {
			arts = append(arts, bustest.Produce(t, c, bustest.FrameBytes(byte(i), 64)))
		}
		held := blockWriter(t, c, tc)
		for i, a := range arts[:4] {
			a.Close()
			if err := c.Err(); err != nil {
				t.Fatalf("closed after %d releases, capacity 4: %v", i+1, err)
			}
		}
		arts[4].Close() // the fifth pending release overflows the lane
		select {
		case <-c.Done():
		case <-ctx.Done():
			t.Fatal("the connection survived a control lane overflow")
		}
		if err := c.Err(); err == nil || !strings.Contains(err.Error(), "overflow") {
			t.Fatalf("Err after overflow: %v", err)
		}
		if err := <-held; bustest.Code(t, err) != wire.ErrRouterLost {
			t.Fatalf("the held command: %v", err)
		}
		h.Await("the router to release the connection's owners", bustest.Drained)
	})
}

// A client tracking its handles maps every view in pool mode too, so a
// read after Close faults instead of showing a later generation.
func TestTrackHandlesMapsPerView(t *testing.T) {
	bustest.ForEachTransportIn(t, bustest.Open(), []store.Mode{store.ModePool}, func(t *testing.T, h *bustest.Harness) {
		ctx := bustest.Ctx(t)
		c := h.DialWith("pv", client.Config{TrackHandles: true})
		data := bustest.FrameBytes(7, 8192)
		a := bustest.Produce(t, c, data)
		for range 3 {
			v := bustest.MustMap(t, ctx, a)
			if !bytes.Equal(v.Bytes(), data) {
				t.Fatal("bytes differ")
			}
			v.Close()
		}
		a.Close()
		if st := c.Stats(); st.Maps != 3 || st.Unmaps != 3 || st.CachedSlots != 0 || st.ArtifactOpens != 3 {
			t.Fatalf("map per view: %+v", st)
		}
	})
}
