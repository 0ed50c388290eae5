package router_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// Results that never reach their caller. The caller abandons its call while
// it is queued, after it was dispatched, and after its result was admitted;
// a caller disconnects before the reply, and another after its result was
// admitted. The SDK consumes or the router drops every result, the
// endpoint's cached artifact stays valid, a domain retry under a fresh call
// id works, and nothing is executed twice: every request the service sees
// is the attempt the test expects, and a retired call id is refused.
func TestFaultLostReply(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		maps0 := storeMaps(t, h)
		endpoint := h.dial("lr-endpoint")
		svc := mustRegister(t, ctx, endpoint, "fault.cache", client.Queued(4), client.InFlight(1))
		data := frameBytes(40, 100_000)
		cache := produce(t, endpoint, data) // the endpoint's cache entry for request r-1
		type attempt struct {
			RequestID string `json:"requestId"`
			Attempt   int    `json:"attempt"`
		}
		admitted, served := 0, 0
		call := func(c *client.Client, n int) *client.PendingCall {
			t.Helper()
			p := mustCall(t, ctx, c, "fault.cache", svc.Incarnation(), "Render", attempt{"r-1", n})
			admitted++
			return p
		}
		take := func(n int) *client.Request {
			t.Helper()
			req := nextRequest(t, ctx, svc)
			var a attempt
			if err := req.Decode(&a); err != nil || a.Attempt != n {
				t.Fatalf("the service got attempt %d, want %d: a replay or a lost call (%v)", a.Attempt, n, err)
			}
			served++
			return req
		}
		answer := func(req *client.Request, wantRouted bool) {
			t.Helper()
			routed, err := req.Reply(ctx, map[string]string{"requestId": "r-1"}, client.Attach("image", cache))
			if err != nil || routed != wantRouted {
				t.Fatalf("reply: routed=%v (want %v) %v", routed, wantRouted, err)
			}
			req.Close()
		}
		retry := func(c *client.Client, n int, after wire.CallID) {
			t.Helper()
			p := call(c, n)
			if p.ID() <= after {
				t.Fatalf("the retry reused %s after %s", p.ID(), after)
			}
			answer(take(n), true)
			res := mustResult(t, ctx, p)
			img := mustArtifact(t, res, "image")
			mustRead(t, img, data)
			img.Close()
			res.Close()
		}
		onlyTheCache := func(what string) {
			t.Helper()
			settle(t, h, what, func(s router.Stats) bool {
				return s.Calls == 0 && s.ReplyCapabilities == 0 && s.Queued == 0 &&
					s.Owners == 1 && s.ArtifactRoots == 1 && s.Artifacts == 1
			})
		}

		caller := h.dial("lr-caller")
		// 1a. Abandoned while queued behind a request holding the only
		// credit: cancelled before dispatch, never executed.
		blocker := call(caller, 1)
		held := take(1)
		queued := call(caller, 2)
		queued.Close()
		barrier(t, caller) // the cancel is processed before this returns
		if st := h.r.Stats(); st.Calls != 1 || st.Queued != 0 {
			t.Fatalf("a call abandoned in the queue is still there: %+v", st)
		}
		answer(held, true)
		res := mustResult(t, ctx, blocker)
		res.Close()
		// 1b. Abandoned after dispatch, before the reply: the reply goes
		// nowhere.
		dispatched := call(caller, 3)
		req := take(3)
		dispatched.Close()
		barrier(t, caller)
		answer(req, false)
		// 1c. Abandoned after the result was admitted: the SDK consumes the
		// result it will never show.
		replied := call(caller, 4)
		answer(take(4), true)
		replied.Close()
		onlyTheCache("abandoned calls to leave nothing")
		retry(caller, 5, replied.ID())

		// 2. The caller disconnects before the reply: not routed, no
		// caller-result roots.
		early, earlyNC := dialKept(t, h, "lr-gone-early")
		lost := call(early, 6)
		req = take(6)
		cut(early, earlyNC)
		settle(t, h, "the caller to go", func(s router.Stats) bool { return s.Connections == 2 })
		answer(req, false)
		wantResultErr(t, ctx, "a dropped caller's call", lost, wire.ErrRouterLost, wire.DispatchUnknown)
		onlyTheCache("a reply to a dropped caller to leave nothing")
		retry(h.dial("lr-gone-early-again"), 7, 0)

		// 3. The caller disconnects after its result was admitted: the
		// router drops the result with the connection.
		late, lateNC := dialKept(t, h, "lr-gone-late")
		call(late, 8)
		answer(take(8), true)
		cut(late, lateNC)
		onlyTheCache("a dropped caller's result to be released")
		retry(caller, 9, replied.ID())

		if st := h.r.Stats(); st.CallsTotal != uint64(admitted) || served != admitted-1 {
			t.Fatalf("%d calls admitted, %d counted by the router, %d served (one was cancelled before dispatch)",
				admitted, st.CallsTotal, served)
		}
		cache.Close() // eviction
		requireDrained(t, h, maps0)

		// 4. A retired call id is refused at admission and never reaches
		// the service again; a fresh one does.
		sp, cp, _ := servicePeers(t, h, "lr-raw.svc", 4, 4)
		cp.callOK(1, "lr-raw.svc")
		sp.finishCall(cp, sp.request())
		wantErr(t, "a retired call id", cp.callErr(1, "lr-raw.svc"), wire.ErrInvalidEnvelope, wire.NotDispatched)
		cp.callOK(2, "lr-raw.svc")
		if rq2 := sp.request(); rq2.CallID != 2 {
			t.Fatalf("after a refused retired id, the service got %s", rq2.CallID)
		}
	})
}

// Releases that arrive after their owner is gone. A retired hold id
// releases nothing and is no error; a never-issued id is OWNER_INVALID and
// refuses its whole batch; a delivery consumed after its subscription and
// its topic went is released normally, then 0; a late responder release
// and a late reply find nothing; and a new connection does not inherit a
// dead one's ids.
func TestFaultOldReleaseArrives(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		maps0 := storeMaps(t, h)
		p := newPeer(t, h, "or-raw")
		release := func(ids ...wire.OwnerID) inFrame {
			p.t.Helper()
			return p.do(wire.OpArtifactRelease, &wire.Release{OwnerIDs: ids})
		}
		released := func(what string, f inFrame, want uint64) {
			t.Helper()
			if f.Err != nil || f.Body.(*wire.Released).Released != want {
				t.Fatalf("%s: %v %+v, want released %d", what, f.Err, f.Body, want)
			}
		}
		var holds []wire.OwnerID
		var last wire.HoldID
		for range 3 {
			alloc := p.ok(wire.OpArtifactAllocate, &wire.Allocate{ByteLength: 64, ContentType: "x/y"}).(*wire.AllocateOK)
			sealed := p.ok(wire.OpArtifactSeal, &wire.Seal{Allocation: wire.Allocation{ArtifactID: alloc.ArtifactID, Generation: 1, OwnerID: alloc.OwnerID}}).(*wire.SealOK)
			holds = append(holds, sealed.OwnerID)
			last = wire.HoldID(sealed.OwnerID.N)
		}
		released("a live hold", release(holds[0]), 1)
		released("the same hold again", release(holds[0]), 0)
		never := wire.HoldOwner(last + 7)
		wantErr(t, "a never-issued hold", release(holds[1], never).Err, wire.ErrOwnerInvalid, wire.NotDispatched)
		if st := h.r.Stats(); st.Artifacts != 2 || st.ArtifactRoots != 2 {
			t.Fatalf("a refused batch released part of itself: %+v", st)
		}
		released("a batch of retired and live holds", release(holds[0], holds[1], holds[0]), 1)
		released("a batch of retired holds", release(holds[0], holds[1]), 0)
		wantErr(t, "a delivery id to artifact.release", release(wire.DeliveryOwner(1)).Err, wire.ErrOwnerInvalid, wire.NotDispatched)

		// A delivery consumed after its subscription and topic are gone.
		pub := h.dial("or-pub")
		p.ok(wire.OpTopicDeclare, &wire.Declare{Name: "fault.old", Retained: wire.RetainNone})
		sub := p.ok(wire.OpSubscribe, &wire.Subscribe{Topic: "fault.old", Mode: wire.ModeBounded, MaxQueued: 4, MaxInFlight: 4}).(*wire.SubscribeOK)
		data := produce(t, pub, frameBytes(90, 2048))
		if _, err := pub.Publish(ctxT(t), "fault.old", tick{N: 1}, client.Attach("frame", data)); err != nil {
			t.Fatal(err)
		}
		data.Close()
		msg := p.delivery(wire.OpTopicMessage).Body.(*wire.TopicMessage)
		if !p.ok(wire.OpUnsubscribe, &wire.Unsubscribe{SubscriptionID: sub.SubscriptionID}).(*wire.Removed).Removed {
			t.Fatal("unsubscribe removed nothing")
		}
		if !p.ok(wire.OpTopicDelete, &wire.TopicName{Name: "fault.old"}).(*wire.Deleted).Deleted {
			t.Fatal("topic not deleted")
		}
		barrier(t, pub)
		if st := h.r.Stats(); st.Artifacts != 2 || st.Owners != 2 {
			t.Fatalf("the delivery lost its root with its subscription: %+v", st)
		}
		if n := p.consume(msg.DeliveryID); n != 1 {
			t.Fatalf("consuming an orphaned delivery released %d", n)
		}
		if n := p.consume(msg.DeliveryID); n != 0 {
			t.Fatalf("consuming it again released %d", n)
		}
		wantErr(t, "a never-issued delivery",
			p.do(wire.OpDeliveryConsumed, &wire.Consumed{DeliveryIDs: []wire.DeliveryID{msg.DeliveryID + 5}}).Err,
			wire.ErrOwnerInvalid, wire.NotDispatched)

		// Late responder releases and replies for a call the service gave up.
		p.register("fault.old.svc", 4, 4)
		caller := newPeer(t, h, "or-caller")
		caller.callOK(1, "fault.old.svc")
		rq := p.request()
		if n := p.releaseResponder(rq.CallID, rq.DeliveryID); n != 1 {
			t.Fatalf("responder release: %d", n)
		}
		wantErr(t, "the caller", caller.callFailed().Err(), wire.ErrCallGone, wire.Dispatched)
		if n := p.releaseResponder(rq.CallID, rq.DeliveryID); n != 0 {
			t.Fatalf("a second responder release: %d", n)
		}
		wantErr(t, "a reply after the responder release", p.reply(rq.CallID, rq.DeliveryID, `{}`).Err, wire.ErrCallGone, wire.Dispatched)
		if n := p.consume(rq.DeliveryID); n != 1 {
			t.Fatalf("consuming the request: %d", n)
		}
		if n := p.consume(rq.DeliveryID); n != 0 {
			t.Fatalf("consuming the request again: %d", n)
		}
		released("the last live hold", release(holds[2]), 1)

		// A dead connection's ids mean nothing on a new one.
		p.nc.Close()
		settle(t, h, "the raw client to go", func(s router.Stats) bool { return s.Connections == 2 })
		q := newPeer(t, h, "or-raw-again")
		wantErr(t, "a dead connection's hold on a new one",
			q.do(wire.OpArtifactRelease, &wire.Release{OwnerIDs: []wire.OwnerID{holds[2]}}).Err, wire.ErrOwnerInvalid, wire.NotDispatched)
		wantErr(t, "a dead connection's delivery on a new one",
			q.do(wire.OpDeliveryConsumed, &wire.Consumed{DeliveryIDs: []wire.DeliveryID{msg.DeliveryID}}).Err, wire.ErrOwnerInvalid, wire.NotDispatched)
		if n := pub.Stats().ControlErrors; n != 0 {
			t.Fatalf("%d SDK releases refused", n)
		}
		requireDrained(t, h, maps0)
	})
}

// giveUpOps are the SDK operations whose grant can arrive after the caller
// has given up. Each returns what it created, to be closed when the grant
// came back in time.
func giveUpOps(c *client.Client, src *client.Artifact) []struct {
	name string
	run  func(ctx context.Context, i int) (io.Closer, error)
} {
	return []struct {
		name string
		run  func(ctx context.Context, i int) (io.Closer, error)
	}{
		{"Allocate", func(ctx context.Context, _ int) (io.Closer, error) {
			return c.Allocate(ctx, 4096, "x/y")
		}},
		{"Seal", func(ctx context.Context, _ int) (io.Closer, error) {
			w, err := c.Allocate(context.Background(), 4096, "x/y")
			if err != nil {
				return nil, err
			}
			if _, err := w.Write(frameBytes(7, 4096)); err != nil {
				return nil, err
			}
			a, err := w.Seal(ctx)
			if err != nil {
				w.Close()
				return nil, err
			}
			return a, nil
		}},
		{"Retain", func(ctx context.Context, _ int) (io.Closer, error) {
			return src.Retain(ctx)
		}},
		{"Subscribe", func(ctx context.Context, _ int) (io.Closer, error) {
			return c.Subscribe(ctx, "fault.gaveup")
		}},
		{"Register", func(ctx context.Context, i int) (io.Closer, error) {
			return c.Register(ctx, fmt.Sprintf("fault.gaveup.svc-%d", i))
		}},
	}
}

// Grants that arrive after the caller gave up: Allocate, Seal, Retain,
// Subscribe and Register with an already-cancelled context and with
// deadlines around one round trip. Whatever the router granted, the SDK
// gives back; a seal the router refuses after the caller gave up must not
// strand its writer either. The router's counts return to zero.
func TestFaultGrantsAfterTheCallerGaveUp(t *testing.T) {
	l := wire.DefaultLimits()
	l.MaxArtifactBytes = 1 << 20
	l.MaxStoreBytes = 3 << 20
	forEachTransport(t, router.Config{Policy: router.OpenPolicy(), Limits: l}, func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		maps0 := storeMaps(t, h)
		idle := func(s router.Stats) bool {
			return s.Owners == 0 && s.Artifacts == 0 && s.StoreBytes == 0 && s.StoreFiles == 0 &&
				s.Subscriptions == 0 && s.Services == 0 && s.Calls == 0
		}

		// A seal refused (no room for its copy) after its caller gave up.
		c := h.dial("gu-refused")
		a, b := produce(t, c, frameBytes(1, 1<<20)), produce(t, c, frameBytes(2, 1<<20))
		w, err := c.Allocate(ctx, 1<<20, "x/y")
		if err != nil {
			t.Fatal(err)
		}
		gone, cancel := context.WithCancel(ctx)
		cancel()
		// Usually the caller has given up before the refusal arrives; if
		// it was already there, Seal reports it. Either way nothing stays.
		if _, err := w.Seal(gone); !errors.Is(err, context.Canceled) && !errors.Is(err, wire.ErrQuotaExceeded) {
			t.Fatalf("seal with a cancelled context: %v", err)
		}
		w.Close()
		a.Close()
		b.Close()
		barrier(t, c) // the refusal has arrived and been handled
		barrier(t, c) // and whatever the SDK queued because of it has landed
		if st := h.r.Stats(); !idle(st) {
			t.Errorf("a seal refused after its caller gave up stranded its writer: %d owners, %d artifacts, "+
				"%d store bytes, %d files (the SDK's late-seal handler releases the writer only on success)",
				st.Owners, st.Artifacts, st.StoreBytes, st.StoreFiles)
		}
		c.Close() // whatever leaked goes with the connection
		settle(t, h, "the refused client to go", func(s router.Stats) bool { return idle(s) && s.Connections == 0 })

		// A publish receipt answered after the caller gave up. Publish
		// returns its receipt fields even with the context's error, and the
		// reader decodes the late reply into that same value: under -race
		// this is reported. Nothing may order the two accesses, so until
		// the reply is handled the test touches neither the client nor the
		// router (whose lock leads to the in-memory pipe): it watches the
		// store directory, where the attachment's file goes once the
		// orphan handler has let go of the last hold on it.
		c = h.dialWithTopic("gu-receipts", "fault.receipts", wire.RetainNone)
		dir := h.r.StoreDir()
		for range 3 {
			a := produce(t, c, frameBytes(4, 1000))
			gone, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := c.Publish(gone, "fault.receipts", tick{N: 1}, client.Attach("frame", a)); err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("publish with a cancelled context: %v", err)
			}
			a.Close()
			waitFor(t, "the late publish reply to be handled", func() bool {
				ents, err := os.ReadDir(dir)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range ents {
					if strings.HasPrefix(e.Name(), "sealed-") || strings.HasPrefix(e.Name(), "copy-") {
						return false
					}
				}
				return true
			})
		}
		c.Close()

		// Grants racing the caller's deadline.
		c = h.dialWithTopic("gu-racing", "fault.gaveup", wire.RetainNone)
		src := produce(t, c, frameBytes(3, 4096))
		start := time.Now()
		for range 16 {
			barrier(t, c)
		}
		rtt := time.Since(start) / 16
		granted, gaveUp := map[string]int{}, map[string]int{}
		for _, op := range giveUpOps(c, src) {
			for i := range 200 {
				if i%32 == 31 {
					// The SDK gives back a grant its caller gave up on when
					// the late reply arrives. A caller that gives up at once
					// can issue the next command before that, so on a busy
					// machine the grants in flight could pile up past a
					// per-client quota (128 subscriptions); a round trip
					// now and then lets the give-backs land first.
					barrier(t, c)
				}
				var opCtx context.Context
				var cancel context.CancelFunc
				if i < 10 {
					opCtx, cancel = context.WithCancel(ctx)
					cancel()
				} else {
					opCtx, cancel = context.WithTimeout(ctx, time.Duration(i%20)*rtt/8)
				}
				got, err := op.run(opCtx, i)
				cancel()
				switch {
				case err == nil:
					granted[op.name]++
					got.Close()
				case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
					gaveUp[op.name]++
				default:
					t.Fatalf("%s %d: %v", op.name, i, err)
				}
			}
		}
		src.Close()
		t.Logf("round trip %v; granted in time %v; gave up %v", rtt, granted, gaveUp)
		// Seal replies come after store I/O, so a late one may follow any
		// barrier: wait for the SDK's release to land instead.
		settle(t, h, "every late grant to be given back", idle)
		if n := c.Stats().ControlErrors; n != 0 {
			t.Errorf("%d SDK releases or unregisters refused", n)
		}
		requireDrained(t, h, maps0)
	})
}
