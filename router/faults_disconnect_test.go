package router_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/shmtest"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// Fault acceptance tests, one test per fault the acceptance list names, each
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
	return shmtest.Mappings(t, h.root)
}

// wantStoreMaps checks that this process holds want mappings of files under
// the store root.
func wantStoreMaps(t *testing.T, h *harness, what string, want int) {
	t.Helper()
	if n := storeMaps(t, h); n != want {
		t.Fatalf("%s: %d mappings of the store, want %d", what, n, want)
	}
}

// dialWithTopic dials id and declares topic on it.
func (h *harness) dialWithTopic(id, topic string, r wire.Retention) *client.Client {
	h.t.Helper()
	c := h.dial(id)
	mustDeclare(h.t, c, topic, r)
	return c
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
	v := mustMap(t, ctxT(t), a)
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
		s := mustSubscribe(t, ctx, sub, "fault.frames", client.Bounded(), client.InFlight(4))
		svc := mustRegister(t, ctx, agent, "fault.agent", client.Queued(4), client.InFlight(1))
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
		p := mustCall(t, ctx, caller, "fault.agent", svc.Incarnation(), "Agent.Step", tick{N: 2}, client.Attach("frame", attached))
		// Written to the service (its only credit is taken), not yet read.
		settle(t, h, "the first call to be dispatched", func(s router.Stats) bool { return s.ReplyCapabilities == 1 })
		pq := mustCall(t, ctx, caller, "fault.agent", svc.Incarnation(), "Agent.Step", tick{N: 3}, client.Attach("frame", queuedArt))
		// Both senders drop with every handle still open.
		cut(pub, pubNC)
		cut(caller, callerNC)
		// Queued too: what the drops queued on the survivors' control lanes
		// (the service hears its dispatched call's caller went) is written
		// by their writers a moment later; a call left queued never goes.
		settle(t, h, "the senders' connections to go", func(s router.Stats) bool { return s.Connections == 2 && s.Queued == 0 })
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
			wantResultErr(t, ctx, "a dropped caller's pending call", pc, wire.ErrRouterLost, wire.DispatchUnknown)
		}
		published.Close()
		private.Close()
		attached.Close()
		queuedArt.Close()

		m, n := next(t, s)
		if n != 1 {
			t.Fatalf("delivered %d", n)
		}
		img := mustArtifact(t, m, "frame")
		v := mustView(t, img, pubData)
		req := nextRequest(t, ctx, svc)
		var got tick
		if err := req.Decode(&got); err != nil || got.N != 2 || req.Caller.ClientID != "sd-caller" {
			t.Fatalf("request %+v from %+v: %v", got, req.Caller, err)
		}
		fa := mustArtifact(t, req, "frame")
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
		probe := mustCall(t, ctx, sub, "fault.agent", svc.Incarnation(), "Agent.Step", tick{N: 4})
		req = nextRequest(t, ctx, svc)
		if err := req.Decode(&got); err != nil || got.N != 4 {
			t.Fatalf("after the credit returned the service got %+v: the dropped caller's queued call ran (%v)", got, err)
		}
		answerCall(t, ctx, req, probe, nil)

		// A responder that drops right after its reply is admitted: the
		// result already owns its artifact.
		resp, respNC := dialKept(t, h, "sd-responder")
		render := mustRegister(t, ctx, resp, "fault.render")
		pc := mustCall(t, ctx, sub, "fault.render", render.Incarnation(), "Render", nil)
		rq := nextRequest(t, ctx, render)
		resData := frameBytes(14, 30_000)
		out := produce(t, resp, resData)
		if routed, err := rq.Reply(ctx, nil, client.Attach("image", out)); err != nil || !routed {
			t.Fatalf("reply: routed=%v %v", routed, err)
		}
		cut(resp, respNC)
		res := mustResult(t, ctx, pc)
		ra := mustArtifact(t, res, "image")
		res.Close()
		churn(t, sub, len(resData), 3)
		mustRead(t, ra, resData)
		ra.Close()
		out.Close()
		rq.Close()
		requireDrained(t, h, maps0)
	})
}

// A consumer dies with a message open and its artifact mapped: by closing
// its client, by losing its transport, and by being closed by the router
// for a protocol violation; and a service dies mid-read of a request. The
// router collects; the bytes still mapped do not change, even after new
// artifacts of the same size (in pool mode, what would reuse the slot),
// until the test unmaps them.
func TestFaultConsumerDiesMidRead(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		maps0 := storeMaps(t, h)
		pub := h.dialWithTopic("cd-pub", "fault.mid", wire.RetainNone)
		for i, end := range []string{"close", "cut", "violation"} {
			abrupt := end != "close"
			cons, consNC := dialKept(t, h, fmt.Sprintf("cd-cons-%d", i))
			s := mustSubscribe(t, ctx, cons, "fault.mid")
			data := frameBytes(byte(20+i), frameSize)
			a := produce(t, pub, data)
			if _, err := pub.Publish(ctx, "fault.mid", tick{N: i}, client.Attach("frame", a)); err != nil {
				t.Fatal(err)
			}
			a.Close()
			m, _ := next(t, s)
			img := mustArtifact(t, m, "frame")
			v := mustView(t, img, data)
			wantStoreMaps(t, h, "one view", maps0+1)
			switch end {
			case "close":
				cons.Close()
			case "cut":
				cut(cons, consNC)
			case "violation":
				// A frame longer than the wire allows: the router closes
				// the connection (the client is idle, so nothing interleaves).
				if _, err := consNC.Write([]byte{0xff, 0xff, 0xff, 0xff}); err != nil {
					t.Fatal(err)
				}
				<-cons.Done()
			}
			settle(t, h, "the consumer's delivery to be collected", func(s router.Stats) bool {
				return s.Artifacts == 0 && s.ArtifactRoots == 0 && s.Owners == 0 && s.StoreFiles == 0
			})
			if sealedFiles(t, h) != 0 {
				t.Fatal("the file outlived its last logical owner")
			}
			churn(t, pub, frameSize, 3)
			// Files mode unlinks the file; pool mode retires the slot a dead
			// connection owned instead of reusing it. Either way the
			// unlinked inode's pages stay with the mapping.
			if !bytes.Equal(v.Bytes(), data) {
				t.Fatalf("mapped bytes changed after collection (%s)", end)
			}
			// A cut connection lost its router; a closed one says so.
			if _, err := img.ReadAll(ctx); abrupt && code(t, err) != wire.ErrRouterLost || !abrupt && !errors.Is(err, client.ErrClosed) {
				t.Fatalf("a dead consumer's artifact: %v", err)
			}
			// Closing on a dead client is inert: no panic, no second release.
			m.Close()
			img.Close()
			v.Close()
			wantStoreMaps(t, h, "after unmapping", maps0)
		}

		// A service dies while it reads a request's artifact.
		caller := h.dial("cd-caller")
		worker, workerNC := dialKept(t, h, "cd-worker")
		svc := mustRegister(t, ctx, worker, "fault.reader")
		data := frameBytes(30, 200_000)
		a := produce(t, caller, data)
		p := mustCall(t, ctx, caller, "fault.reader", svc.Incarnation(), "Read", nil, client.Attach("frame", a))
		a.Close()
		req := nextRequest(t, ctx, svc)
		fa := mustArtifact(t, req, "frame")
		v := mustView(t, fa, data)
		cut(worker, workerNC)
		wantResultErr(t, ctx, "call to a service that died mid-read", p, wire.ErrNoService, wire.Dispatched)
		settle(t, h, "the request's artifact to be collected", func(s router.Stats) bool {
			return s.Artifacts == 0 && s.StoreFiles == 0 && s.Calls == 0
		})
		churn(t, caller, len(data), 2)
		if !bytes.Equal(v.Bytes(), data) { // see the consumer's case above
			t.Fatal("a dead service's mapped bytes changed")
		}
		v.Close()
		fa.Close()
		req.Close()
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
		admin := h.dialWithTopic("lm-admin", "fault.lost", wire.RetainNone)
		svc := mustRegister(t, ctx, admin, "fault.lost.svc")
		ops := []struct {
			op  wire.Op
			run func(c *client.Client) error
		}{
			{wire.OpServiceRegister, func(c *client.Client) error {
				_, err := c.Register(ctx, "fault.lost.mine")
				return err
			}},
			{wire.OpSubscribe, func(c *client.Client) error {
				_, err := c.Subscribe(ctx, "fault.lost")
				return err
			}},
			{wire.OpArtifactAllocate, func(c *client.Client) error {
				_, err := c.Allocate(ctx, 4096, "x/y")
				return err
			}},
			{wire.OpRPCCall, func(c *client.Client) error {
				_, err := c.Call(ctx, "fault.lost.svc", "M", nil, client.Pin(svc.Incarnation()))
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
