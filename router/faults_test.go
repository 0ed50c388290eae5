package router_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/leakcheck"
	"github.com/flybus/flybus/internal/shmtest"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

// Fault acceptance tests: bus-v1 section 11 item 4, one test per fault, each
// over both transports under -race. Every test counts what the fault could
// leak or free twice: router roots, owners and artifacts, the store's files,
// this process's mappings of the store, and (through the harness)
// descriptors and goroutines. Bytes a test still maps are compared with what
// was written, after new artifacts have been made, to catch reuse.

// dialKept connects an SDK client and also returns the raw transport under
// it, so that a test can cut the connection the way a crash would.
func dialKept(t *testing.T, h *harness, id string) (*client.Client, net.Conn) {
	t.Helper()
	nc := h.conn("")
	c, err := client.Connect(ctxT(t), nc, client.Config{ClientID: id, StoreRoot: h.root})
	if err != nil {
		t.Fatalf("connect %s: %v", id, err)
	}
	t.Cleanup(func() { c.Close() })
	return h.track(c), nc
}

// cut drops a client's transport without any goodbye and waits until the
// SDK has noticed.
func cut(c *client.Client, nc net.Conn) {
	nc.Close()
	<-c.Done()
}

// storeMaps counts this process's mappings of files under the store root,
// unlinked ones included.
func storeMaps(t *testing.T, h *harness) int {
	t.Helper()
	n, err := leakcheck.Mappings(h.root)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// requireDrained waits until the router holds nothing an application could
// have leaked, then checks the store directory and the mappings.
func requireDrained(t *testing.T, h *harness, maps0 int) {
	t.Helper()
	settle(t, h, "the router to hold nothing", func(s router.Stats) bool {
		return s.Artifacts == 0 && s.ArtifactRoots == 0 && s.Owners == 0 && s.StoreBytes == 0 &&
			s.StoreFiles == 0 && s.Calls == 0 && s.ActiveCalls == 0 && s.ReplyCapabilities == 0 &&
			s.Queued == 0 && s.RetainedBytes == 0 && s.QueuedBytes == 0
	})
	if n := sealedFiles(t, h); n != 0 {
		t.Fatalf("%d sealed files left in the store", n)
	}
	if m, cached := storeMaps(t, h), h.cachedSlots(); m != maps0+cached {
		t.Fatalf("store mappings: %d at the start, %d at the end (%d cached slots)", maps0, m, cached)
	}
}

// mustView maps an artifact and checks its bytes.
func mustView(t *testing.T, a *client.Artifact, want []byte) *client.ArtifactView {
	t.Helper()
	v, err := a.View(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(v.Bytes(), want) {
		t.Fatal("mapped bytes differ from what the producer wrote")
	}
	return v
}

// mustRead reads an artifact through a descriptor and checks its bytes.
func mustRead(t *testing.T, a *client.Artifact, want []byte) {
	t.Helper()
	got, err := a.ReadAll(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("read bytes differ from what the producer wrote")
	}
}

// churn makes and drops n artifacts of size bytes with other contents, so
// that any reuse of a collected file or its pages would show in a mapping
// the test still holds.
func churn(t *testing.T, c *client.Client, size, n int) {
	t.Helper()
	for i := range n {
		a := produce(t, c, bytes.Repeat([]byte{byte(0xa0 + i)}, size))
		a.Close()
	}
	barrier(t, c)
}

// A publisher and a caller vanish right after their publication and calls
// are admitted, and a responder right after its reply is. The deliveries
// they caused still arrive, stay readable and are released when consumed;
// the dropped clients' own holds go at once. The one exception is the
// router's reading of section 8.4 ("cancel queued deliveries"): a dropped
// caller's call that was still waiting for dispatch is cancelled before
// dispatch, so it is never executed and its root goes with the caller.
func TestFaultSenderDropsAfterAdmission(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		maps0 := storeMaps(t, h)
		sub, agent := h.dial("sd-sub"), h.dial("sd-agent")
		mustDeclare(t, sub, "fault.frames", wire.RetainNone)
		s, err := sub.Subscribe(ctx, "fault.frames", client.Bounded().InFlight(4))
		if err != nil {
			t.Fatal(err)
		}
		svc, err := agent.Register(ctx, "fault.agent", client.ServiceConfig{MaxQueued: 4, MaxInFlight: 1})
		if err != nil {
			t.Fatal(err)
		}
		pub, pubNC := dialKept(t, h, "sd-pub")
		caller, callerNC := dialKept(t, h, "sd-caller")
		pubData, callData := frameBytes(11, 70_000), frameBytes(12, 50_000)
		published := produce(t, pub, pubData)
		private := produce(t, pub, frameBytes(13, 4096)) // a hold the publisher never shares
		attached := produce(t, caller, callData)
		queuedArt := produce(t, caller, frameBytes(15, 4096))
		rc, err := pub.Publish(ctx, "fault.frames", tick{N: 1}, client.Attach("frame", published))
		if err != nil || rc.Subscribers != 1 {
			t.Fatalf("publish: %+v %v", rc, err)
		}
		p, err := caller.Call(ctx, "fault.agent", svc.Incarnation(), "Agent.Step", tick{N: 2}, client.Attach("frame", attached))
		if err != nil {
			t.Fatal(err)
		}
		// Written to the service (its only credit is taken), not yet read.
		settle(t, h, "the first call to be dispatched", func(s router.Stats) bool { return s.ReplyCapabilities == 1 })
		pq, err := caller.Call(ctx, "fault.agent", svc.Incarnation(), "Agent.Step", tick{N: 3}, client.Attach("frame", queuedArt))
		if err != nil {
			t.Fatal(err)
		}
		// Both senders drop with every handle still open.
		cut(pub, pubNC)
		cut(caller, callerNC)
		settle(t, h, "the senders' connections to go", func(s router.Stats) bool { return s.Connections == 2 })
		// What the senders held is gone, and so is the undispatched call;
		// left is one root for the subscriber's delivery and one for the
		// dispatched request.
		if st := h.r.Stats(); st.Artifacts != 2 || st.ArtifactRoots != 2 || st.SealedArtifacts != 2 || st.Queued != 0 || st.Calls != 1 {
			t.Fatalf("after the senders dropped: %+v", st)
		}
		waitFor(t, "the released files to go", func() bool { return sealedFiles(t, h) == 2 })
		// The dead clients' handles fail locally, without reaching anyone.
		if _, err := published.ReadAll(ctx); code(t, err) != wire.ErrRouterLost {
			t.Fatalf("a dropped client's artifact: %v", err)
		}
		for _, pc := range []*client.PendingCall{p, pq} {
			if _, err := pc.Result(ctx); code(t, err) != wire.ErrRouterLost || dispatchOf(t, err) != wire.DispatchUnknown {
				t.Fatalf("a dropped caller's pending call: %v", err)
			}
		}
		published.Close()
		private.Close()
		attached.Close()
		queuedArt.Close()

		m, n := next(t, s)
		if n != 1 {
			t.Fatalf("delivered %d", n)
		}
		img, err := m.Artifact("frame")
		if err != nil {
			t.Fatal(err)
		}
		v := mustView(t, img, pubData)
		req, err := svc.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got tick
		if err := req.Decode(&got); err != nil || got.N != 2 || req.Caller.ClientID != "sd-caller" {
			t.Fatalf("request %+v from %+v: %v", got, req.Caller, err)
		}
		fa, err := req.Artifact("frame")
		if err != nil {
			t.Fatal(err)
		}
		mustRead(t, fa, callData)
		// The caller is gone: the answer goes nowhere and roots nothing.
		if routed, err := req.Reply(ctx, nil); err != nil || routed {
			t.Fatalf("reply to a dropped caller: routed=%v %v", routed, err)
		}
		fa.Close()
		req.Close() // the credit returns: the cancelled call must not appear
		v.Close()
		img.Close()
		m.Close()
		probe, err := sub.Call(ctx, "fault.agent", svc.Incarnation(), "Agent.Step", tick{N: 4})
		if err != nil {
			t.Fatal(err)
		}
		req, err = svc.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := req.Decode(&got); err != nil || got.N != 4 {
			t.Fatalf("after the credit returned the service got %+v: the dropped caller's queued call ran (%v)", got, err)
		}
		req.Reply(ctx, nil)
		req.Close()
		if res, err := probe.Result(ctx); err != nil {
			t.Fatal(err)
		} else {
			res.Close()
		}

		// A responder that drops right after its reply is admitted: the
		// result already owns its artifact.
		resp, respNC := dialKept(t, h, "sd-responder")
		render, err := resp.Register(ctx, "fault.render", client.ServiceConfig{})
		if err != nil {
			t.Fatal(err)
		}
		pc, err := sub.Call(ctx, "fault.render", render.Incarnation(), "Render", nil)
		if err != nil {
			t.Fatal(err)
		}
		rq, err := render.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		resData := frameBytes(14, 30_000)
		out := produce(t, resp, resData)
		if routed, err := rq.Reply(ctx, nil, client.Attach("image", out)); err != nil || !routed {
			t.Fatalf("reply: routed=%v %v", routed, err)
		}
		cut(resp, respNC)
		res, err := pc.Result(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ra, err := res.Artifact("image")
		if err != nil {
			t.Fatal(err)
		}
		res.Close()
		churn(t, sub, len(resData), 3)
		mustRead(t, ra, resData)
		ra.Close()
		out.Close()
		rq.Close()
		requireDrained(t, h, maps0)
	})
}

// A consumer dies with a message open and its artifact mapped, once by
// closing its client and once by losing its transport, and a service dies
// mid-read of a request. The router collects; the bytes still mapped do not
// change, even after new artifacts of the same size, until the test unmaps
// them.
func TestFaultConsumerDiesMidRead(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		maps0 := storeMaps(t, h)
		pub := h.dial("cd-pub")
		mustDeclare(t, pub, "fault.mid", wire.RetainNone)
		for i, abrupt := range []bool{false, true} {
			cons, consNC := dialKept(t, h, fmt.Sprintf("cd-cons-%d", i))
			s, err := cons.Subscribe(ctx, "fault.mid", client.Latest())
			if err != nil {
				t.Fatal(err)
			}
			data := frameBytes(byte(20+i), frameSize)
			a := produce(t, pub, data)
			if _, err := pub.Publish(ctx, "fault.mid", tick{N: i}, client.Attach("frame", a)); err != nil {
				t.Fatal(err)
			}
			a.Close()
			m, _ := next(t, s)
			img, err := m.Artifact("frame")
			if err != nil {
				t.Fatal(err)
			}
			v := mustView(t, img, data)
			if n := storeMaps(t, h); n != maps0+1 {
				t.Fatalf("one view, %d mappings over %d", n, maps0)
			}
			if abrupt {
				cut(cons, consNC)
			} else {
				cons.Close()
			}
			settle(t, h, "the consumer's delivery to be collected", func(s router.Stats) bool {
				return s.Artifacts == 0 && s.ArtifactRoots == 0 && s.Owners == 0 && s.StoreFiles == 0
			})
			if sealedFiles(t, h) != 0 {
				t.Fatal("the file outlived its last logical owner")
			}
			churn(t, pub, frameSize, 3)
			// Files mode: the unlinked inode's pages stay with the mapping.
			// Pool mode reuses the slot, and a mapping left open past its
			// artifact's collection sees later generations: the per-slot
			// read grant the mode documents.
			if h.mode == store.ModeFiles && !bytes.Equal(v.Bytes(), data) {
				t.Fatal("mapped bytes changed after collection")
			}
			// A cut connection lost its router; a closed one says so.
			if _, err := img.ReadAll(ctx); abrupt && code(t, err) != wire.ErrRouterLost || !abrupt && !errors.Is(err, client.ErrClosed) {
				t.Fatalf("a dead consumer's artifact: %v", err)
			}
			// Closing on a dead client is inert: no panic, no second release.
			m.Close()
			img.Close()
			v.Close()
			if n := storeMaps(t, h); n != maps0 {
				t.Fatalf("after unmapping: %d mappings, want %d", n, maps0)
			}
		}

		// A service dies while it reads a request's artifact.
		caller := h.dial("cd-caller")
		worker, workerNC := dialKept(t, h, "cd-worker")
		svc, err := worker.Register(ctx, "fault.reader", client.ServiceConfig{})
		if err != nil {
			t.Fatal(err)
		}
		data := frameBytes(30, 200_000)
		a := produce(t, caller, data)
		p, err := caller.Call(ctx, "fault.reader", svc.Incarnation(), "Read", nil, client.Attach("frame", a))
		if err != nil {
			t.Fatal(err)
		}
		a.Close()
		req, err := svc.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fa, err := req.Artifact("frame")
		if err != nil {
			t.Fatal(err)
		}
		v := mustView(t, fa, data)
		cut(worker, workerNC)
		if _, err := p.Result(ctx); code(t, err) != wire.ErrNoService || dispatchOf(t, err) != wire.Dispatched {
			t.Fatalf("call to a service that died mid-read: %v", err)
		}
		settle(t, h, "the request's artifact to be collected", func(s router.Stats) bool {
			return s.Artifacts == 0 && s.StoreFiles == 0 && s.Calls == 0
		})
		churn(t, caller, len(data), 2)
		if h.mode == store.ModeFiles && !bytes.Equal(v.Bytes(), data) { // see the consumer's case above
			t.Fatal("a dead service's mapped bytes changed")
		}
		v.Close()
		fa.Close()
		req.Close()
		requireDrained(t, h, maps0)
	})
}

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
		svc, err := endpoint.Register(ctx, "fault.cache", client.ServiceConfig{MaxQueued: 4, MaxInFlight: 1})
		if err != nil {
			t.Fatal(err)
		}
		data := frameBytes(40, 100_000)
		cache := produce(t, endpoint, data) // the endpoint's cache entry for request r-1
		type attempt struct {
			RequestID string `json:"requestId"`
			Attempt   int    `json:"attempt"`
		}
		admitted, served := 0, 0
		call := func(c *client.Client, n int) *client.PendingCall {
			t.Helper()
			p, err := c.Call(ctx, "fault.cache", svc.Incarnation(), "Render", attempt{"r-1", n})
			if err != nil {
				t.Fatal(err)
			}
			admitted++
			return p
		}
		take := func(n int) *client.Request {
			t.Helper()
			req, err := svc.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
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
			if p.CallID() <= after {
				t.Fatalf("the retry reused %s after %s", p.CallID(), after)
			}
			answer(take(n), true)
			res, err := p.Result(ctx)
			if err != nil {
				t.Fatal(err)
			}
			img, err := res.Artifact("image")
			if err != nil {
				t.Fatal(err)
			}
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
		res, err := blocker.Result(ctx)
		if err != nil {
			t.Fatal(err)
		}
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
		retry(caller, 5, replied.CallID())

		// 2. The caller disconnects before the reply: not routed, no
		// caller-result roots.
		early, earlyNC := dialKept(t, h, "lr-gone-early")
		lost := call(early, 6)
		req = take(6)
		cut(early, earlyNC)
		settle(t, h, "the caller to go", func(s router.Stats) bool { return s.Connections == 2 })
		answer(req, false)
		if _, err := lost.Result(ctx); code(t, err) != wire.ErrRouterLost {
			t.Fatalf("a dropped caller's call: %v", err)
		}
		onlyTheCache("a reply to a dropped caller to leave nothing")
		retry(h.dial("lr-gone-early-again"), 7, 0)

		// 3. The caller disconnects after its result was admitted: the
		// router drops the result with the connection.
		late, lateNC := dialKept(t, h, "lr-gone-late")
		call(late, 8)
		answer(take(8), true)
		cut(late, lateNC)
		onlyTheCache("a dropped caller's result to be released")
		retry(caller, 9, replied.CallID())

		if st := h.r.Stats(); st.CallsTotal != uint64(admitted) || served != admitted-1 {
			t.Fatalf("%d calls admitted, %d counted by the router, %d served (one was cancelled before dispatch)",
				admitted, st.CallsTotal, served)
		}
		cache.Close() // eviction
		requireDrained(t, h, maps0)

		// 4. A retired call id is refused at admission and never reaches
		// the service again; a fresh one does.
		sp := newPeer(t, h, "lr-raw-svc")
		sp.register("fault.raw", 4, 4)
		cp := newPeer(t, h, "lr-raw-caller")
		cp.callOK(1, "fault.raw")
		rq := sp.request()
		if !sp.replyTo(rq, `{}`) {
			t.Fatal("reply not routed")
		}
		sp.consume(rq.DeliveryID)
		cp.consume(cp.result().DeliveryID)
		wantErr(t, "a retired call id", cp.callErr(1, "fault.raw"), wire.ErrInvalidEnvelope, wire.NotDispatched)
		cp.callOK(2, "fault.raw")
		if rq2 := sp.request(); rq2.CallID != 2 {
			t.Fatalf("after a refused retired id, the service got %s", rq2.CallID)
		}
	})
}

// A latest subscriber holds its only credit while four artifact-bearing
// publications arrive: the first is delivered, the second and third are
// replaced in the queue and collected in the publishing step, the fourth
// waits. The topic retains its latest value too, which holds its own root.
func TestFaultQueuedFrameReplaced(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		maps0 := storeMaps(t, h)
		pub, viewer := h.dial("qr-pub"), h.dial("qr-viewer")
		mustDeclare(t, pub, "fault.latest", wire.RetainLatest)
		s, err := viewer.Subscribe(ctx, "fault.latest", client.Latest().InFlight(1))
		if err != nil {
			t.Fatal(err)
		}
		var datas [5][]byte
		publish := func(n int) client.PublishReceipt {
			t.Helper()
			datas[n] = frameBytes(byte(50+n), 40_000+n)
			a := produce(t, pub, datas[n])
			rc, err := pub.Publish(ctx, "fault.latest", tick{N: n}, client.Attach("frame", a))
			if err != nil {
				t.Fatal(err)
			}
			a.Close()
			barrier(t, pub) // the producer's own hold is gone before the next step
			return rc
		}
		publish(1)
		first, n := next(t, s) // the only credit is now in use
		if n != 1 {
			t.Fatalf("first delivery %d", n)
		}
		collected := h.r.Stats().Collected
		for n := 2; n <= 4; n++ {
			rc := publish(n)
			wantReplaced := uint64(0)
			if n > 2 {
				wantReplaced = 1
			}
			if rc.Replaced != wantReplaced || rc.Subscribers != 1 {
				t.Fatalf("publication %d: %+v", n, rc)
			}
			// The replaced entry's roots went in the publishing step.
			st := h.r.Stats()
			if st.Artifacts != 2 || st.Collected != collected+uint64(n-2) {
				t.Fatalf("after publication %d: %d artifacts, %d collected (was %d)", n, st.Artifacts, st.Collected, collected)
			}
		}
		// Delivered 1 (its delivery), queued 4 (queue entry and retained).
		if st := h.r.Stats(); st.ArtifactRoots != 3 || st.Owners != 1 || st.Queued != 1 {
			t.Fatalf("roots after replacement: %+v", st)
		}
		waitFor(t, "the replaced files to go", func() bool { return sealedFiles(t, h) == 2 })
		img1, err := first.Artifact("frame")
		if err != nil {
			t.Fatal(err)
		}
		mustRead(t, img1, datas[1])
		img1.Close()
		first.Close()
		last, n := next(t, s)
		if n != 4 || last.Replaced != 2 || last.TopicSequence != 4 {
			t.Fatalf("after the credit returned: n=%d replaced=%d seq=%d", n, last.Replaced, last.TopicSequence)
		}
		img4, err := last.Artifact("frame")
		if err != nil {
			t.Fatal(err)
		}
		mustRead(t, img4, datas[4])
		img4.Close()
		last.Close()
		barrier(t, viewer)
		if st := h.r.Stats(); st.Artifacts != 1 || st.ArtifactRoots != 1 || st.Owners != 0 {
			t.Fatalf("only the retained value should remain: %+v", st)
		}
		if cleared, err := pub.ClearTopic(ctx, "fault.latest"); err != nil || !cleared {
			t.Fatalf("clear: %v %v", cleared, err)
		}
		requireDrained(t, h, maps0)
	})
}

// A subscription ends while one of its messages and an artifact taken from
// it are in use: by unsubscribing (its queued message is discarded and
// collected) and by router shutdown. What is in use stays readable and
// releases cleanly.
func TestFaultSubscriptionClosedWithDeliveriesInUse(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		maps0 := storeMaps(t, h)
		pub, cons := h.dial("sc-pub"), h.dial("sc-cons")
		mustDeclare(t, pub, "fault.sub", wire.RetainNone)
		s, err := cons.Subscribe(ctx, "fault.sub", client.Bounded().InFlight(1))
		if err != nil {
			t.Fatal(err)
		}
		d1, d2 := frameBytes(60, 80_000), frameBytes(61, 80_000)
		for i, d := range [][]byte{d1, d2} {
			a := produce(t, pub, d)
			if _, err := pub.Publish(ctx, "fault.sub", tick{N: i + 1}, client.Attach("frame", a)); err != nil {
				t.Fatal(err)
			}
			a.Close()
		}
		barrier(t, pub)
		m, _ := next(t, s)
		img, err := m.Artifact("frame")
		if err != nil {
			t.Fatal(err)
		}
		v := mustView(t, img, d1)
		settle(t, h, "the second message to wait for a credit", func(s router.Stats) bool { return s.Queued == 1 })
		s.Close()
		barrier(t, cons)
		// The queue went with the subscription; the delivery did not.
		if st := h.r.Stats(); st.Subscriptions != 0 || st.Queued != 0 || st.Artifacts != 1 || st.ArtifactRoots != 1 || st.Owners != 1 {
			t.Fatalf("after unsubscribe: %+v", st)
		}
		if _, err := s.Next(ctx); !errors.Is(err, client.ErrHandleClosed) {
			t.Fatalf("Next after Close: %v", err)
		}
		var got tick
		if err := m.Decode(&got); err != nil || got.N != 1 {
			t.Fatalf("message after unsubscribe: %v %+v", err, got)
		}
		mustRead(t, img, d1)
		churn(t, pub, len(d1), 2)
		if !bytes.Equal(v.Bytes(), d1) {
			t.Fatal("mapped bytes changed after unsubscribe")
		}
		v.Close()
		img.Close()
		m.Close() // a consume for a subscription that no longer exists
		barrier(t, cons)
		if n := cons.ControlErrors(); n != 0 {
			t.Fatalf("%d consumes or releases refused", n)
		}
		requireDrained(t, h, maps0)

		// Router shutdown with a message and a mapped artifact open.
		s2, err := cons.Subscribe(ctx, "fault.sub", client.Latest())
		if err != nil {
			t.Fatal(err)
		}
		a := produce(t, pub, d2)
		if _, err := pub.Publish(ctx, "fault.sub", tick{N: 3}, client.Attach("frame", a)); err != nil {
			t.Fatal(err)
		}
		a.Close()
		m2, _ := next(t, s2)
		img2, err := m2.Artifact("frame")
		if err != nil {
			t.Fatal(err)
		}
		v2 := mustView(t, img2, d2)
		storeDir := h.r.StoreDir()
		if err := h.r.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s2.Next(ctx); !errors.Is(err, client.ErrSubscriptionClosed) || s2.ClosedReason() != "router-shutdown" {
			t.Fatalf("subscription after shutdown: %v %q", err, s2.ClosedReason())
		}
		<-cons.Done()
		if st := h.r.Stats(); st.Connections != 0 || st.Artifacts != 0 || st.ArtifactRoots != 0 || st.Owners != 0 {
			t.Fatalf("after shutdown: %+v", st)
		}
		if _, err := os.Stat(storeDir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("shutdown left its store directory: %v", err)
		}
		if err := m2.Decode(&got); err != nil || got.N != 3 {
			t.Fatalf("message after shutdown: %v %+v", err, got)
		}
		if !bytes.Equal(v2.Bytes(), d2) {
			t.Fatal("mapped bytes changed after shutdown")
		}
		if _, err := img2.ReadAll(ctx); code(t, err) != wire.ErrRouterLost {
			t.Fatalf("opening after shutdown: %v", err)
		}
		v2.Close()
		img2.Close()
		m2.Close()
		if n := storeMaps(t, h); n != maps0 {
			t.Fatalf("mappings after shutdown: %d, want %d", n, maps0)
		}
	})
}

// A router restart in process, over each transport: every old handle fails
// with ROUTER_LOST on its dead connection, an old reference presented to the
// new router is ARTIFACT_GONE, nothing of the old routes or topics
// survives, and the new router owns the only store directory under the root.
func TestFaultRouterRestart(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		maps0 := storeMaps(t, h)
		c := h.dial("rs-old")
		mustDeclare(t, c, "fault.restart", wire.RetainLatest)
		data := frameBytes(70, 64_000)
		a := produce(t, c, data)
		if _, err := c.Publish(ctx, "fault.restart", tick{N: 1}, client.Attach("frame", a)); err != nil {
			t.Fatal(err)
		}
		s, err := c.Subscribe(ctx, "fault.restart", client.Latest().Replay(true))
		if err != nil {
			t.Fatal(err)
		}
		m, _ := next(t, s)
		v := mustView(t, a, data)
		svc, err := c.Register(ctx, "fault.restart.svc", client.ServiceConfig{})
		if err != nil {
			t.Fatal(err)
		}
		oldRef := a.Ref()
		if err := h.r.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		<-c.Done()
		checks := []struct {
			what string
			err  error
		}{
			{"read", func() error { _, err := a.ReadAll(ctx); return err }()},
			{"retain", func() error { _, err := a.Retain(ctx); return err }()},
			{"publish", func() error { _, err := c.Publish(ctx, "fault.restart", nil); return err }()},
			{"call", func() error { _, err := c.Call(ctx, "fault.restart.svc", svc.Incarnation(), "M", nil); return err }()},
			{"allocate", func() error { _, err := c.Artifacts().Allocate(ctx, 10, "x/y"); return err }()},
			{"subscribe", func() error { _, err := c.Subscribe(ctx, "fault.restart", client.Latest()); return err }()},
		}
		for _, ch := range checks {
			if code(t, ch.err) != wire.ErrRouterLost {
				t.Fatalf("%s on the dead connection: %v", ch.what, ch.err)
			}
		}
		if !bytes.Equal(v.Bytes(), data) {
			t.Fatal("mapped bytes changed across the restart")
		}
		v.Close()
		m.Close()
		a.Close()
		svc.Close()

		r2, err := router.New(router.Config{Policy: router.OpenPolicy(), StoreRoot: h.root})
		if err != nil {
			t.Fatal(err)
		}
		defer r2.Shutdown(context.Background())
		if r2.StoreID() == oldRef.StoreID || r2.RouterID() == h.r.RouterID() {
			t.Fatal("the new router reused the old incarnation")
		}
		var nc net.Conn
		if h.unix {
			sock := filepath.Join(h.dir, "restarted.sock")
			if _, err := r2.ListenUnix(sock); err != nil {
				t.Fatal(err)
			}
			if nc, err = net.Dial("unix", sock); err != nil {
				t.Fatal(err)
			}
		} else if nc, err = r2.ConnectInMemory(); err != nil {
			t.Fatal(err)
		}
		rp := newRaw(t, nc)
		rp.hello("rs-new")
		rp.command(wire.OpArtifactOpen, &wire.RefOwner{Ref: oldRef, OwnerID: wire.HoldOwner(1)})
		if be := rp.reply(&wire.OpenOK{}); be == nil || be.Code != wire.ErrArtifactGone {
			t.Fatalf("an old reference on the new router: %v", be)
		}
		rp.command(wire.OpSubscribe, &wire.Subscribe{Topic: "fault.restart", Mode: wire.ModeLatest, MaxQueued: 1, MaxInFlight: 1})
		if be := rp.reply(&wire.SubscribeOK{}); be == nil || be.Code != wire.ErrNoTopic {
			t.Fatalf("the old topic on the new router: %v", be)
		}
		rp.command(wire.OpRPCCall, callBody(1, "fault.restart.svc", "{}"))
		if be := rp.reply(&wire.CallOK{}); be == nil || be.Code != wire.ErrNoService {
			t.Fatalf("the old service on the new router: %v", be)
		}
		ents, err := os.ReadDir(h.root)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 1 || ents[0].Name() != r2.StoreID().String() {
			t.Fatalf("store root after the restart: %v", ents)
		}
		if n := storeMaps(t, h); n != maps0 {
			t.Fatalf("mappings: %d, want %d", n, maps0)
		}
	})
}

// flybusBinary builds the router executable into dir.
func flybusBinary(t *testing.T, dir string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build flybus: %v", err)
	}
	bin := filepath.Join(dir, "flybus")
	out, err := exec.Command(goTool, "build", "-o", bin, "github.com/flybus/flybus/cmd/flybus").CombinedOutput()
	if err != nil {
		t.Fatalf("go build flybus: %v\n%s", err, out)
	}
	return bin
}

// serveChild starts `flybus serve --open --store root --listen sock`, waits
// for its ready line and returns the process and its store id. The process
// is killed at cleanup if the test has not reaped it.
func serveChild(t *testing.T, bin, root, sock string) (*exec.Cmd, string) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "serve", "--open", "--store", root, "--listen", sock)
	cmd.Stdout, cmd.Stderr = pw, &stderr
	err = cmd.Start()
	pw.Close() // the child has its own copy
	if err != nil {
		pr.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		pr.Close()
		if t.Failed() {
			t.Logf("flybus serve stderr:\n%s", stderr.String())
		}
	})
	lines := make(chan string, 1)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		if sc.Scan() {
			lines <- sc.Text()
		}
		for sc.Scan() { // never let the child block on stdout
		}
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(20 * time.Second):
		t.Fatal("flybus serve printed no ready line")
	}
	var ready struct {
		Ready   bool   `json:"ready"`
		StoreID string `json:"storeId"`
	}
	if err := json.Unmarshal([]byte(line), &ready); err != nil || !ready.Ready || ready.StoreID == "" {
		t.Fatalf("ready line %q: %v", line, err)
	}
	return cmd, ready.StoreID
}

// A crashed router process: `flybus serve` is killed with SIGKILL while a
// client holds and maps an artifact. The client's handles fail with
// ROUTER_LOST, the dead store directory stays until the next router.New on
// the same root removes it (its lock is free), a live router's directory
// next to it is never touched, bytes still mapped from the dead store do
// not change, and the dead router's references are ARTIFACT_GONE.
func TestFaultRouterCrashLeavesAnOrphanStore(t *testing.T) {
	base := leakcheck.Goroutines()
	fdBase, _ := leakcheck.FDs()
	// Registered first, so it runs after every other cleanup.
	t.Cleanup(func() {
		leakcheck.WaitGoroutines(t, base)
		waitFor(t, "descriptors to close", func() bool { n, _ := leakcheck.FDs(); return n <= fdBase })
	})
	tmp := t.TempDir()
	bin := flybusBinary(t, tmp)
	root := shmtest.Dir(t, "flybus-test-")
	maps0, _ := leakcheck.Mappings(root)
	ctx := ctxT(t)

	// A live in-process router on the same root, with an artifact of its own.
	live, err := router.New(router.Config{Policy: router.OpenPolicy(), StoreRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Shutdown(context.Background())
	liveNC, err := live.ConnectInMemory()
	if err != nil {
		t.Fatal(err)
	}
	liveC, err := client.Connect(ctx, liveNC, client.Config{ClientID: "crash-live", StoreRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	defer liveC.Close()
	liveData := frameBytes(80, 50_000)
	liveArt := produce(t, liveC, liveData)

	sock := filepath.Join(tmp, "crash.sock")
	child, deadStore := serveChild(t, bin, root, sock)
	c, err := client.ConnectUnix(ctx, sock, client.Config{ClientID: "crash-victim", StoreRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	data := frameBytes(81, frameSize)
	a := produce(t, c, data)
	if a.Ref().StoreID.String() != deadStore {
		t.Fatalf("artifact of store %s, the child's is %s", a.Ref().StoreID, deadStore)
	}
	v := mustView(t, a, data)
	deadDir := filepath.Join(root, deadStore)

	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = child.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("flybus serve did not die by SIGKILL: %v", err)
	}
	<-c.Done()
	if _, err := a.ReadAll(ctx); code(t, err) != wire.ErrRouterLost {
		t.Fatalf("an artifact of the crashed router: %v", err)
	}
	if _, err := c.Artifacts().Allocate(ctx, 1, "x/y"); code(t, err) != wire.ErrRouterLost {
		t.Fatalf("allocate on the dead connection: %v", err)
	}
	if _, err := os.Stat(deadDir); err != nil {
		t.Fatalf("the crashed router's store should still be there: %v", err)
	}

	next, err := router.New(router.Config{Policy: router.OpenPolicy(), StoreRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Shutdown(context.Background())
	if _, err := os.Stat(deadDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the crashed router's store was not removed: %v", err)
	}
	if _, err := os.Stat(live.StoreDir()); err != nil {
		t.Fatalf("the live router's store was touched: %v", err)
	}
	mustRead(t, liveArt, liveData)
	if !bytes.Equal(v.Bytes(), data) {
		t.Fatal("bytes mapped from the crashed router's store changed when it was removed")
	}
	if ents, _ := os.ReadDir(root); len(ents) != 2 {
		t.Fatalf("store root holds %d entries, want the live and the new store", len(ents))
	}
	nc, err := next.ConnectInMemory()
	if err != nil {
		t.Fatal(err)
	}
	rp := newRaw(t, nc)
	rp.hello("crash-after")
	rp.command(wire.OpArtifactOpen, &wire.RefOwner{Ref: a.Ref(), OwnerID: wire.HoldOwner(1)})
	if be := rp.reply(&wire.OpenOK{}); be == nil || be.Code != wire.ErrArtifactGone {
		t.Fatalf("a crashed router's reference on the new router: %v", be)
	}
	v.Close()
	a.Close()
	c.Close()
	liveArt.Close()
	liveC.Close()
	nc.Close()
	for _, r := range []*router.Router{live, next} {
		if err := r.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Fatalf("store root not empty after both routers stopped: %v", ents)
	}
	if m, _ := leakcheck.Mappings(root); m != maps0 {
		t.Fatalf("mappings: %d, want %d", m, maps0)
	}
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
			sealed := p.ok(wire.OpArtifactSeal, &wire.Seal{ArtifactID: alloc.ArtifactID, Generation: 1, OwnerID: alloc.OwnerID}).(*wire.SealOK)
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
		if n := pub.ControlErrors(); n != 0 {
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
			return c.Artifacts().Allocate(ctx, 4096, "x/y")
		}},
		{"Seal", func(ctx context.Context, _ int) (io.Closer, error) {
			w, err := c.Artifacts().Allocate(context.Background(), 4096, "x/y")
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
			return c.Subscribe(ctx, "fault.gaveup", client.Latest())
		}},
		{"Register", func(ctx context.Context, i int) (io.Closer, error) {
			return c.Register(ctx, fmt.Sprintf("fault.gaveup.svc-%d", i), client.ServiceConfig{})
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
		w, err := c.Artifacts().Allocate(ctx, 1<<20, "x/y")
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
		c = h.dial("gu-receipts")
		mustDeclare(t, c, "fault.receipts", wire.RetainNone)
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
		c = h.dial("gu-racing")
		mustDeclare(t, c, "fault.gaveup", wire.RetainNone)
		src := produce(t, c, frameBytes(3, 4096))
		start := time.Now()
		for range 16 {
			barrier(t, c)
		}
		rtt := time.Since(start) / 16
		granted, gaveUp := map[string]int{}, map[string]int{}
		for _, op := range giveUpOps(c, src) {
			for i := range 200 {
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
		if n := c.ControlErrors(); n != 0 {
			t.Errorf("%d SDK releases or unregisters refused", n)
		}
		requireDrained(t, h, maps0)
	})
}

// dropOnWrite is a client transport that vanishes the moment the client
// writes a frame containing marker: the frame never reaches the router,
// and the client's reader, not the writer, finds the connection gone.
type dropOnWrite struct {
	net.Conn
	marker []byte
	once   sync.Once
}

func (d *dropOnWrite) Write(b []byte) (int, error) {
	if bytes.Contains(b, d.marker) {
		d.once.Do(func() { d.Conn.Close() })
		return len(b), nil
	}
	return d.Conn.Write(b)
}

// The connection is lost while a command is in flight: the operation fails
// with ROUTER_LOST (dispatch unknown), the SDK's own bookkeeping survives
// its reader tearing down concurrently (under -race), and the router keeps
// nothing of the dead connection.
func TestFaultConnectionLostMidCommand(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		maps0 := storeMaps(t, h)
		admin := h.dial("lm-admin")
		mustDeclare(t, admin, "fault.lost", wire.RetainNone)
		svc, err := admin.Register(ctx, "fault.lost.svc", client.ServiceConfig{})
		if err != nil {
			t.Fatal(err)
		}
		ops := []struct {
			op  wire.Op
			run func(c *client.Client) error
		}{
			{wire.OpServiceRegister, func(c *client.Client) error {
				_, err := c.Register(ctx, "fault.lost.mine", client.ServiceConfig{})
				return err
			}},
			{wire.OpSubscribe, func(c *client.Client) error {
				_, err := c.Subscribe(ctx, "fault.lost", client.Latest())
				return err
			}},
			{wire.OpArtifactAllocate, func(c *client.Client) error {
				_, err := c.Artifacts().Allocate(ctx, 4096, "x/y")
				return err
			}},
			{wire.OpRPCCall, func(c *client.Client) error {
				_, err := c.Call(ctx, "fault.lost.svc", svc.Incarnation(), "M", nil)
				return err
			}},
			{wire.OpPublish, func(c *client.Client) error {
				_, err := c.Publish(ctx, "fault.lost", tick{N: 1})
				return err
			}},
		}
		for i, o := range ops {
			nc := &dropOnWrite{Conn: h.conn(""), marker: []byte(`"op":"` + o.op.String() + `"`)}
			c, err := client.Connect(ctx, nc, client.Config{ClientID: fmt.Sprintf("lm-client-%d", i), StoreRoot: h.root})
			if err != nil {
				t.Fatal(err)
			}
			err = o.run(c)
			if code(t, err) != wire.ErrRouterLost || dispatchOf(t, err) != wire.DispatchUnknown {
				t.Fatalf("%s when the connection is lost mid-command: %v", o.op, err)
			}
			<-c.Done()
			c.Close()
			settle(t, h, "the dead connection to go", func(s router.Stats) bool { return s.Connections == 1 })
		}
		svc.Close()
		barrier(t, admin)
		if st := h.r.Stats(); st.Services != 0 || st.Subscriptions != 0 || st.Calls != 0 || st.Publications != 0 {
			t.Fatalf("a dropped command reached the router: %+v", st)
		}
		requireDrained(t, h, maps0)
	})
}
