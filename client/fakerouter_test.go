package client

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flybus/flybus/internal/leakcheck"
	"github.com/flybus/flybus/wire"
)

// These tests play the router by hand over net.Pipe, to send the SDK what a
// correct router never would and to watch exactly what the SDK writes.

// fakeRouter is the router end of a pipe, driven from the test goroutine.
type fakeRouter struct {
	t   *testing.T
	nc  net.Conn
	fr  *wire.FrameReader
	dec wire.Decoder
	env wire.Envelope
	bus uint64 // last router envelope serial sent
	// minor, when set, is the version the fake writes its envelopes in
	// (a router of an older minor).
	minor wire.Opt[uint32]
}

// noLeaks fails t if goroutines started during the test outlive it. Call it
// first, so that its cleanup runs last.
func noLeaks(t *testing.T) {
	base := leakcheck.Goroutines()
	t.Cleanup(func() { leakcheck.WaitGoroutines(t, base) })
}

func newFakeRouter(t *testing.T) (*fakeRouter, net.Conn) {
	a, b := net.Pipe()
	_ = a.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { a.Close() })
	return &fakeRouter{t: t, nc: a, fr: wire.NewFrameReader(a)}, b
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// command reads the next command the SDK wrote and checks its op.
func (f *fakeRouter) command(op wire.Op) *wire.Envelope {
	f.t.Helper()
	b, err := f.fr.ReadFrame()
	if err != nil {
		f.t.Fatalf("fake router: reading a %s: %v", op, err)
	}
	if err := f.dec.Decode(b, &f.env); err != nil {
		f.t.Fatalf("fake router: the SDK wrote a bad frame: %v", err)
	}
	if f.env.Kind != wire.KindCommand || f.env.Op != op {
		f.t.Fatalf("fake router: got %s %s, want command %s", f.env.Kind, f.env.Op, op)
	}
	return &f.env
}

// envelope encodes one router envelope with the next bus id, or with id
// when it is nonzero.
func (f *fakeRouter) envelope(id uint64, h wire.Header, body wire.Body, atts []wire.Attachment) string {
	if id == 0 {
		f.bus++
		id = f.bus
	}
	h.ID = id
	if !h.Minor.Valid {
		h.Minor = f.minor
	}
	return string(wire.AppendEnvelope(nil, h, body, atts))
}

// sendJSON writes one frame holding json.
func (f *fakeRouter) sendJSON(json string) {
	f.t.Helper()
	b, err := wire.FinishFrame(append(append([]byte(nil), 0, 0, 0, 0), json...), 4)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := wire.WriteFull(f.nc, b); err != nil {
		f.t.Fatalf("fake router: write: %v", err)
	}
}

func (f *fakeRouter) send(h wire.Header, body wire.Body, atts []wire.Attachment) {
	f.t.Helper()
	f.sendJSON(f.envelope(0, h, body, atts))
}

func (f *fakeRouter) replyOK(msg uint64, op wire.Op, v wire.Body) {
	f.t.Helper()
	f.send(wire.Header{Kind: wire.KindReply, Op: op, ReplyTo: wire.Some(wire.MsgID(msg))}, &wire.ReplyBody{Value: v}, nil)
}

func (f *fakeRouter) notice(op wire.Op, body wire.Body) {
	f.t.Helper()
	f.send(wire.Header{Kind: wire.KindNotice, Op: op}, body, nil)
}

// expectEOF reads until the SDK closes its end.
func (f *fakeRouter) expectEOF() {
	f.t.Helper()
	for {
		_, err := f.fr.ReadFrame()
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			f.t.Fatal("the SDK did not close the connection")
		}
		if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) {
			f.t.Fatalf("fake router: want end of stream, got %v", err)
		}
		return
	}
}

// fakeStoreID is the store the fake router names at hello; a test with a
// store root makes its directory.
const fakeStoreID = wire.StoreID(0xabc)

func goodHello() wire.HelloOK {
	return wire.HelloOK{RouterID: 0x1234, ConnectionID: 1, SelectedMajor: wire.Major, SelectedMinor: wire.Minor,
		ContractDigest: wire.ContractDigestValue(), Limits: wire.DefaultLimits(), StoreID: fakeStoreID}
}

// connectFake runs Connect against the fake, answering the hello with
// answer(msg). The returned client, if any, is closed at cleanup.
func connectFake(t *testing.T, ctx context.Context, answer func(f *fakeRouter, msg uint64)) (*Client, *fakeRouter, error) {
	t.Helper()
	return connectFakeWith(t, ctx, Config{ClientID: "sdk-test"}, answer)
}

// connectFakeWith is connectFake with the client's configuration.
func connectFakeWith(t *testing.T, ctx context.Context, cfg Config, answer func(f *fakeRouter, msg uint64)) (*Client, *fakeRouter, error) {
	t.Helper()
	f, nc := newFakeRouter(t)
	type result struct {
		c   *Client
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := Connect(ctx, nc, cfg)
		ch <- result{c, err}
	}()
	env := f.command(wire.OpHello)
	var h wire.Hello
	if err := env.DecodeBody(&h); err != nil || h.ClientID != cfg.ClientID {
		t.Fatalf("hello body %+v: %v", h, err)
	}
	answer(f, env.ID)
	r := <-ch
	if r.c != nil {
		t.Cleanup(func() {
			f.nc.Close()
			r.c.Close()
		})
	}
	return r.c, f, r.err
}

func connectGood(t *testing.T) (*Client, *fakeRouter) {
	t.Helper()
	c, f, err := connectFake(t, testCtx(t, 10*time.Second), func(f *fakeRouter, msg uint64) {
		ok := goodHello()
		f.replyOK(msg, wire.OpHello, &ok)
	})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return c, f
}

func busErrorOf(t *testing.T, what string, err error) *wire.BusError {
	t.Helper()
	var be *wire.BusError
	if !errors.As(err, &be) {
		t.Fatalf("%s: want a *wire.BusError, got %v", what, err)
	}
	return be
}

func TestConnectRefusesAnIncompatibleRouter(t *testing.T) {
	d11, _ := wire.ContractDigestFor(1)
	edits := map[string]struct {
		edit func(*fakeRouter, *wire.HelloOK)
		want string // in the error: which check refused
	}{
		"OtherContractDigest": {func(_ *fakeRouter, h *wire.HelloOK) { h.ContractDigest[0] ^= 0xff }, "digest"},
		"SelectedMinor3":      {func(_ *fakeRouter, h *wire.HelloOK) { h.SelectedMinor = 3 }, "selected 1.3"},
		// 1.1 is selected, in a 1.1 envelope, but with 1.2's digest.
		"SelectedMinor1With1.2Digest": {func(f *fakeRouter, h *wire.HelloOK) { h.SelectedMinor, f.minor = 1, wire.Some[uint32](1) }, "digest"},
		// 1.1 is selected, with its digest, in a 1.2 envelope.
		"SelectedMinor1InA1.2Envelope": {func(_ *fakeRouter, h *wire.HelloOK) { h.SelectedMinor, h.ContractDigest = 1, d11 }, "envelope"},
		"SelectedMajor2":               {func(_ *fakeRouter, h *wire.HelloOK) { h.SelectedMajor = 2 }, "selected 2."},
	}
	for name, tc := range edits {
		t.Run(name, func(t *testing.T) {
			noLeaks(t)
			c, f, err := connectFake(t, testCtx(t, 10*time.Second), func(f *fakeRouter, msg uint64) {
				ok := goodHello()
				tc.edit(f, &ok)
				f.replyOK(msg, wire.OpHello, &ok)
			})
			if c != nil {
				t.Fatal("Connect accepted the router")
			}
			if be := busErrorOf(t, "connect", err); be.Code != wire.ErrVersionMismatch || !strings.Contains(be.Message, tc.want) {
				t.Fatalf("connect: %v, want VERSION_MISMATCH naming %q", err, tc.want)
			}
			f.expectEOF()
		})
	}
}

// A hello answered with a refusal, or with a reply the SDK cannot accept,
// ends Connect at once; it must not wait for its context.
func TestConnectFailsPromptlyOnABadHelloReply(t *testing.T) {
	answers := map[string]func(f *fakeRouter, msg uint64){
		"Refused": func(f *fakeRouter, msg uint64) {
			f.send(wire.Header{Kind: wire.KindReply, Op: wire.OpHello, ReplyTo: wire.Some(wire.MsgID(msg))},
				&wire.ReplyBody{Err: wire.NewError(wire.ErrNotAuthorized, 0, "not you")}, nil)
		},
		"MalformedValue": func(f *fakeRouter, msg uint64) {
			ok := goodHello()
			env := f.envelope(0, wire.Header{Kind: wire.KindReply, Op: wire.OpHello, ReplyTo: wire.Some(wire.MsgID(msg))}, &wire.ReplyBody{Value: &ok}, nil)
			f.sendJSON(strings.Replace(env, `"selectedMajor":1`, `"selectedMajor":1,"extra":true`, 1))
		},
		"WrongOp": func(f *fakeRouter, msg uint64) {
			f.replyOK(msg, wire.OpServiceRegister, &wire.RegisterOK{ServiceIncarnation: 1})
		},
	}
	for name, answer := range answers {
		t.Run(name, func(t *testing.T) {
			noLeaks(t)
			c, f, err := connectFake(t, testCtx(t, 5*time.Second), answer)
			if c != nil {
				t.Fatal("Connect accepted the router")
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Connect waited for its context (%v) although the connection had already failed: "+
					"the hello waiter was dropped without an answer", err)
			}
			if err == nil {
				t.Fatal("Connect succeeded")
			}
			f.expectEOF()
		})
	}
}

// fakePending is an admitted call plus a command still in flight, the two kinds
// of work a lost connection must settle.
type fakePending struct {
	call     *PendingCall
	inFlight chan error // the in-flight rpc.cancel's outcome
	msg      uint64     // its command serial
	callMsg  uint64     // the admitted call's command serial
}

func (f *fakeRouter) admitCall(ctx context.Context, c *Client) (*PendingCall, uint64) {
	f.t.Helper()
	type result struct {
		p   *PendingCall
		err error
	}
	ch := make(chan result, 1)
	go func() {
		p, err := c.Call(ctx, "fake.svc", "Fake.Method", nil)
		ch <- result{p, err}
	}()
	env := f.command(wire.OpRPCCall)
	msg := env.ID
	f.replyOK(msg, wire.OpRPCCall, &wire.CallOK{Accepted: true, ServiceIncarnation: 1})
	r := <-ch
	if r.err != nil {
		f.t.Fatalf("call: %v", r.err)
	}
	return r.p, msg
}

func (f *fakeRouter) setUpPending(c *Client) *fakePending {
	f.t.Helper()
	p, callMsg := f.admitCall(testCtx(f.t, 10*time.Second), c)
	ch := make(chan error, 1)
	// A bounded context: if the SDK forgets this command, the test fails
	// in seconds instead of hanging.
	ctx := testCtx(f.t, 5*time.Second)
	go func() {
		_, err := p.Cancel(ctx)
		ch <- err
	}()
	env := f.command(wire.OpRPCCancel)
	return &fakePending{call: p, inFlight: ch, msg: env.ID, callMsg: callMsg}
}

// expectLost checks that the connection ended and every pending thing
// failed with ROUTER_LOST, dispatch unknown.
func expectLost(t *testing.T, c *Client, f *fakeRouter, pw *fakePending) {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("the client did not close the connection")
	}
	if c.Err() == nil {
		t.Fatal("Done is closed but Err is nil")
	}
	f.expectEOF()
	_, err := pw.call.Result(ctx)
	if be := busErrorOf(t, "pending call", err); be.Code != wire.ErrRouterLost || be.Dispatch != wire.DispatchUnknown {
		t.Errorf("pending call ended with %v, want ROUTER_LOST (unknown)", err)
	}
	err = <-pw.inFlight
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the in-flight command was never settled (it ran into its context): the connection's failure forgot its waiter")
	} else if be := busErrorOf(t, "in-flight command", err); be.Code != wire.ErrRouterLost || be.Dispatch != wire.DispatchUnknown {
		t.Errorf("in-flight command ended with %v, want ROUTER_LOST (unknown)", err)
	}
}

// Each frame below breaks one rule of the router's side of the protocol;
// the SDK must close the connection and fail everything pending.
func TestClientClosesOnRouterViolations(t *testing.T) {
	att := []wire.Attachment{{Name: "x", OwnerID: wire.DeliveryOwner(1), Ref: wire.ArtifactRef{
		StoreID: 1, ArtifactID: 1, Generation: 1, ByteLength: 1, ContentType: "application/octet-stream"}}}
	routeRemoved := &wire.RouteRemoved{Name: "fake.svc", ServiceIncarnation: 1, Reason: "test"}
	cases := map[string]func(f *fakeRouter, pw *fakePending){
		"RepeatedBusID": func(f *fakeRouter, pw *fakePending) {
			f.sendJSON(f.envelope(f.bus, wire.Header{Kind: wire.KindNotice, Op: wire.OpRouteRemoved}, routeRemoved, nil))
		},
		"DecreasingBusID": func(f *fakeRouter, pw *fakePending) {
			f.sendJSON(f.envelope(1, wire.Header{Kind: wire.KindNotice, Op: wire.OpRouteRemoved}, routeRemoved, nil))
		},
		"ReplyToUnknownCommand": func(f *fakeRouter, pw *fakePending) {
			f.replyOK(pw.msg+100, wire.OpRPCCancel, &wire.CancelOK{State: wire.CallGoneState})
		},
		"SecondReplyToACommand": func(f *fakeRouter, pw *fakePending) {
			f.replyOK(pw.callMsg, wire.OpRPCCall, &wire.CallOK{Accepted: true, ServiceIncarnation: 1})
		},
		"ReplyOpDiffersFromCommand": func(f *fakeRouter, pw *fakePending) {
			f.replyOK(pw.msg, wire.OpRPCCall, &wire.CallOK{Accepted: true, ServiceIncarnation: 1})
		},
		"MalformedReplyValue": func(f *fakeRouter, pw *fakePending) {
			env := f.envelope(0, wire.Header{Kind: wire.KindReply, Op: wire.OpRPCCancel, ReplyTo: wire.Some(wire.MsgID(pw.msg))},
				&wire.ReplyBody{Value: &wire.CancelOK{State: wire.CallGoneState}}, nil)
			f.sendJSON(strings.Replace(env, `"call-gone"`, `"maybe"`, 1))
		},
		"UnknownFieldInResult": func(f *fakeRouter, pw *fakePending) {
			env := f.envelope(0, wire.Header{Kind: wire.KindDelivery, Op: wire.OpRPCResult}, &wire.Result{DeliveryID: 1,
				CallID: pw.call.ID(), Responder: wire.Identity{ClientID: "svc", ClientIncarnation: "inc-svc"},
				ServiceIncarnation: 1, Outcome: wire.RawJSON(`{}`)}, nil)
			f.sendJSON(strings.Replace(env, `"outcome":{}`, `"outcome":{},"extra":1`, 1))
		},
		"UnknownFieldInRequest": func(f *fakeRouter, pw *fakePending) {
			env := f.envelope(0, wire.Header{Kind: wire.KindDelivery, Op: wire.OpRPCRequest}, &wire.Request{DeliveryID: 1,
				CallID: 1, Caller: wire.Identity{ClientID: "other", ClientIncarnation: "inc-other"}, Target: "fake.svc",
				ServiceIncarnation: 1, Method: "M", Payload: wire.RawJSON(`{}`)}, nil)
			f.sendJSON(strings.Replace(env, `"payload":{}`, `"payload":{},"extra":1`, 1))
		},
		"NoticeWithAttachments": func(f *fakeRouter, pw *fakePending) {
			f.send(wire.Header{Kind: wire.KindNotice, Op: wire.OpCallFailed}, &wire.CallFailed{CallID: pw.call.ID(),
				Code: wire.ErrCallGone, Message: "gone", Dispatch: wire.Dispatched}, att)
		},
		"CommandFromTheRouter": func(f *fakeRouter, pw *fakePending) {
			f.sendJSON(f.envelope(f.bus+100, wire.Header{Kind: wire.KindCommand, Op: wire.OpRPCCancel}, &wire.Cancel{CallID: 1}, nil))
		},
		// An envelope of another minor than the hello was answered in.
		"Minor1After1.2Hello": func(f *fakeRouter, pw *fakePending) {
			env := f.envelope(0, wire.Header{Kind: wire.KindNotice, Op: wire.OpRouteRemoved}, routeRemoved, nil)
			f.sendJSON(strings.Replace(env, `"minor":2`, `"minor":1`, 1))
		},
		"Minor3": func(f *fakeRouter, pw *fakePending) {
			env := f.envelope(0, wire.Header{Kind: wire.KindNotice, Op: wire.OpRouteRemoved}, routeRemoved, nil)
			f.sendJSON(strings.Replace(env, `"minor":2`, `"minor":3`, 1))
		},
		"UnknownNotice": func(f *fakeRouter, pw *fakePending) {
			env := f.envelope(0, wire.Header{Kind: wire.KindNotice, Op: wire.OpRouteRemoved}, routeRemoved, nil)
			f.sendJSON(strings.Replace(env, `"route.removed"`, `"route.renamed"`, 1))
		},
	}
	for name, bad := range cases {
		t.Run(name, func(t *testing.T) {
			noLeaks(t)
			c, f := connectGood(t)
			pw := f.setUpPending(c)
			bad(f, pw)
			expectLost(t, c, f, pw)
		})
	}
}

// connection.closing is the router's last word: pending work fails with
// ROUTER_LOST, whatever code the notice carried.
func TestConnectionClosingFailsPendingCalls(t *testing.T) {
	noLeaks(t)
	c, f := connectGood(t)
	pw := f.setUpPending(c)
	f.notice(wire.OpConnectionClosing, &wire.ConnectionClosing{Code: wire.ErrBackpressure, Message: "control lane exhausted"})
	expectLost(t, c, f, pw)
	if be := busErrorOf(t, "Err", c.Err()); be.Code != wire.ErrRouterLost {
		t.Fatalf("Err %v, want ROUTER_LOST", c.Err())
	}
}

// Closing 100 requests at once yields delivery.consumed commands of at most
// 64 ids that name every delivery exactly once.
func TestConsumesAreBatched(t *testing.T) {
	noLeaks(t)
	c, f := connectGood(t)
	ctx := testCtx(t, 10*time.Second)
	type result struct {
		s   *Service
		err error
	}
	ch := make(chan result, 1)
	go func() {
		s, err := c.Register(ctx, "batch.svc")
		ch <- result{s, err}
	}()
	f.replyOK(f.command(wire.OpServiceRegister).ID, wire.OpServiceRegister, &wire.RegisterOK{ServiceIncarnation: 1})
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	const n = 100
	for i := uint64(1); i <= n; i++ {
		f.send(wire.Header{Kind: wire.KindDelivery, Op: wire.OpRPCRequest}, &wire.Request{DeliveryID: wire.DeliveryID(i),
			CallID: wire.CallID(i), Caller: wire.Identity{ClientID: "caller", ClientIncarnation: "inc-caller"},
			Target: "batch.svc", ServiceIncarnation: 1, Method: "M", Payload: wire.RawJSON(`{}`)}, nil)
	}
	reqs := make([]*Request, 0, n)
	for range n {
		req, err := r.s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, req)
	}
	// The fake reads nothing while they close: the SDK's writer is stuck on
	// its first write and the rest must queue and batch.
	for _, req := range reqs {
		req.Close()
	}
	consumed := map[wire.DeliveryID]int{}
	var batches []int
	releases := 0
	for len(consumed) < n || releases < n {
		b, err := f.fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %d consumed ids in %v and %d releases: %v", len(consumed), batches, releases, err)
		}
		if err := f.dec.Decode(b, &f.env); err != nil {
			t.Fatal(err)
		}
		switch f.env.Op {
		case wire.OpDeliveryConsumed:
			var body wire.Consumed
			if err := f.env.DecodeBody(&body); err != nil {
				t.Fatal(err)
			}
			batches = append(batches, len(body.DeliveryIDs))
			for _, d := range body.DeliveryIDs {
				consumed[d]++
			}
			f.replyOK(f.env.ID, wire.OpDeliveryConsumed, &wire.Released{Released: uint64(len(body.DeliveryIDs))})
		case wire.OpRPCResponderRelease:
			releases++
			f.replyOK(f.env.ID, wire.OpRPCResponderRelease, &wire.Released{Released: 1})
		default:
			t.Fatalf("unexpected command %s", f.env.Op)
		}
	}
	t.Logf("delivery.consumed batches: %v", batches)
	biggest := 0
	for _, b := range batches {
		if b > wire.MaxBatch {
			t.Fatalf("a delivery.consumed carried %d ids (batches %v)", b, batches)
		}
		biggest = max(biggest, b)
	}
	if biggest < 2 {
		t.Fatalf("no batching: %v", batches)
	}
	for i := uint64(1); i <= n; i++ {
		if consumed[wire.DeliveryID(i)] != 1 {
			t.Fatalf("dlv-%d consumed %d times", i, consumed[wire.DeliveryID(i)])
		}
	}
	if len(consumed) != n {
		t.Fatalf("%d distinct ids consumed, want %d", len(consumed), n)
	}
	// Everything was answered: Close drains and ends the connection.
	done := make(chan struct{})
	go func() { c.Close(); close(done) }()
	f.expectEOF()
	<-done
	if !errors.Is(c.Err(), ErrClosed) {
		t.Fatalf("after Close: %v", c.Err())
	}
}

// A router that speaks 1.1 answers the hello in 1.1 with 1.1's digest: the
// client speaks 1.1 to it (its envelopes say minor 1) and asks nothing of
// 1.2, so consumes wait for their answers as 1.1 has them.
func TestConnectSpeaksAnOlderRouter(t *testing.T) {
	noLeaks(t)
	d11, _ := wire.ContractDigestFor(1)
	c, f, err := connectFake(t, testCtx(t, 10*time.Second), func(f *fakeRouter, msg uint64) {
		ok := goodHello()
		ok.SelectedMinor, ok.ContractDigest, ok.Extensions = 1, d11, []string{wire.ExtAwaitTopic, wire.ExtPresence}
		f.minor = wire.Some[uint32](1)
		f.replyOK(msg, wire.OpHello, &ok)
	})
	if err != nil {
		t.Fatalf("connect to a 1.1 router: %v", err)
	}
	if c.Info().SelectedMinor != 1 {
		t.Fatalf("info %+v", c.Info())
	}
	go func() { _, _ = c.DeclareTopic(testCtx(t, 10*time.Second), "t", wire.RetainNone) }()
	env := f.command(wire.OpTopicDeclare)
	if env.Minor != 1 {
		t.Fatalf("a command to a 1.1 router is written in minor %d", env.Minor)
	}
	if c.cur.quietConsume {
		t.Fatal("quiet consumes on a 1.1 router")
	}
}
