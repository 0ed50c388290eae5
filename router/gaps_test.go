package router_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/wire"
)

// tapConn sits between an SDK client and its transport. It records the op
// of every frame the client writes, and can hold one Write until the test
// lets it go, so that the client's write token stays taken and everything
// else the client queues waits behind it.
type tapConn struct {
	net.Conn

	mu      sync.Mutex
	pending []byte   // written bytes not yet forming a whole frame
	ops     []string // op of every whole frame written, in order
	armed   bool
	entered chan struct{} // closed when the held Write has started
	gate    chan struct{} // closed to let the held Write through
	opened  bool
}

func newTap(nc net.Conn) *tapConn { return &tapConn{Conn: nc} }

// hold makes the next Write wait for release; the returned channel is
// closed once that Write has started.
func (c *tapConn) hold() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = true
	c.entered = make(chan struct{})
	c.gate = make(chan struct{})
	c.opened = false
	return c.entered
}

// release lets a held Write through. Idempotent.
func (c *tapConn) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = false
	if c.gate != nil && !c.opened {
		c.opened = true
		close(c.gate)
	}
}

func (c *tapConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	var gate chan struct{}
	if c.armed {
		c.armed = false
		gate = c.gate
		close(c.entered)
	}
	c.mu.Unlock()
	if gate != nil {
		<-gate
	}
	n, err := c.Conn.Write(p)
	c.record(p[:n])
	return n, err
}

func (c *tapConn) record(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending = append(c.pending, p...)
	for len(c.pending) >= 4 {
		n := int(binary.LittleEndian.Uint32(c.pending))
		if len(c.pending) < 4+n {
			break
		}
		c.ops = append(c.ops, opOf(c.pending[4:4+n]))
		c.pending = c.pending[4+n:]
	}
}

// Close lets a held Write go first, so the client's writer can stop.
func (c *tapConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// written returns how many whole frames the client has written.
func (c *tapConn) written() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ops)
}

// opsSince returns the ops of the frames written after the first n.
func (c *tapConn) opsSince(n int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.ops[n:]...)
}

// opOf reads the envelope's op: the first "op" key of the frame's JSON.
func opOf(frame []byte) string {
	const key = `"op":"`
	i := bytes.Index(frame, []byte(key))
	if i < 0 {
		return "?"
	}
	rest := frame[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return "?"
	}
	return string(rest[:j])
}

// dialTap connects an SDK client through a tapConn.
func (h *harness) dialTap(id string, cfg client.Config) (*client.Client, *tapConn) {
	h.t.Helper()
	tc := newTap(h.conn(""))
	cfg.ClientID, cfg.StoreRoot = id, h.root
	c, err := client.Connect(ctxT(h.t), tc, cfg)
	if err != nil {
		h.t.Fatalf("connect %s: %v", id, err)
	}
	h.t.Cleanup(func() { tc.release(); c.Close() })
	return c, tc
}

// blockWriter takes c's write token with a round trip whose Write is held
// by tc, and returns once that Write has started. The returned channel
// yields the round trip's outcome after tc.release.
func blockWriter(t *testing.T, c *client.Client, tc *tapConn) <-chan error {
	t.Helper()
	entered := tc.hold()
	done := make(chan error, 1)
	go func() {
		_, err := c.DeclareTopic(context.Background(), "test.held", wire.RetainNone)
		done <- err
	}()
	select {
	case <-entered:
	case <-ctxT(t).Done():
		t.Fatal("the held write never started")
	}
	return done
}

// Row 2.6: a clone shares its original's owner. Closing the original keeps
// the clone usable; the owner goes only when both are closed.
func TestGapCloneSharesTheOwner(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		c := h.dial("producer")
		data := frameBytes(11, 4096)
		a := produce(t, c, data)
		cl, err := a.Clone()
		if err != nil {
			t.Fatal(err)
		}
		if cl.OwnerID() != a.OwnerID() || cl.Ref() != a.Ref() {
			t.Fatalf("clone %v %+v, original %v %+v", cl.OwnerID(), cl.Ref(), a.OwnerID(), a.Ref())
		}
		a.Close()
		barrier(t, c) // a release, had one been queued, is handled now
		if st := h.r.Stats(); st.Owners != 1 || st.ArtifactRoots != 1 || st.Artifacts != 1 {
			t.Fatalf("closing the original released the shared owner: %+v", st)
		}
		got, err := cl.ReadAll(ctx)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("the clone after the original closed: %v", err)
		}
		cl.Close()
		waitFor(t, "the owner released after both closed", settled(h))
		if n := c.ControlErrors(); n != 0 {
			t.Fatalf("%d refused control commands", n)
		}
	})
}

// Row 5.42: the reply to an op the router does not know carries op
// "unknown" on the wire, and the connection stays up.
func TestGapUnknownOpReplySpelling(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		r := newRaw(t, h.conn(""))
		r.hello("raw")
		r.id++
		id := "msg-" + wire.FormatU64(r.id)
		r.sendBytes(frameOf(`{"protocol":"flybus","major":1,"minor":0,"id":"` + id + `","replyTo":null,"kind":"command","op":"no.such.op","body":{},"attachments":[]}`))
		f, err := r.fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		text := string(f)
		for _, want := range []string{`"op":"unknown"`, `"kind":"reply"`, `"replyTo":"` + id + `"`, `"INVALID_ENVELOPE"`} {
			if !strings.Contains(text, want) {
				t.Fatalf("reply %s lacks %s", text, want)
			}
		}
		if strings.Contains(text, `"op":"no.such.op"`) {
			t.Fatalf("reply echoes the unknown op: %s", text)
		}
		// Still up: a valid command works.
		r.command(wire.OpTopicDeclare, &wire.Declare{Name: "t", Retained: wire.RetainNone})
		if be := r.reply(&wire.DeclareOK{}); be != nil {
			t.Fatal(be)
		}
	})
}

// Row 7.4: a latest subscription's maxQueued is exactly 1.
func TestGapLatestMaxQueuedIsOne(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		c := h.dial("sub")
		mustDeclare(t, c, "frames", wire.RetainNone)
		if _, err := c.Subscribe(ctx, "frames", client.Latest().Queued(2)); code(t, err) != wire.ErrInvalidEnvelope {
			t.Fatalf("latest with maxQueued 2: %v", err)
		}
		if h.r.Stats().Subscriptions != 0 {
			t.Fatal("a refused subscription was created")
		}
		s, err := c.Subscribe(ctx, "frames", client.Latest())
		if err != nil {
			t.Fatalf("latest with maxQueued 1: %v", err)
		}
		s.Close()
	})
}

// Row 7.19: clearing a topic releases its retained root only; a delivery
// of the retained value already made stays readable until it is closed.
func TestGapClearKeepsDeliveredArtifacts(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		prod, cons := h.dial("producer"), h.dial("consumer")
		mustDeclare(t, prod, "snap", wire.RetainLatest)
		s, err := cons.Subscribe(ctx, "snap", client.Bounded())
		if err != nil {
			t.Fatal(err)
		}
		data := frameBytes(13, 8192)
		a := produce(t, prod, data)
		if _, err := prod.Publish(ctx, "snap", nil, client.Attach("img", a)); err != nil {
			t.Fatal(err)
		}
		a.Close()
		barrier(t, prod)
		m, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		img, err := m.Artifact("img")
		if err != nil {
			t.Fatal(err)
		}
		m.Close()
		if st := h.r.Stats(); st.ArtifactRoots != 2 || st.RetainedBytes == 0 {
			t.Fatalf("want the retained root and the delivery's: %+v", st)
		}
		if cleared, err := prod.ClearTopic(ctx, "snap"); err != nil || !cleared {
			t.Fatalf("clear: %v %v", cleared, err)
		}
		if st := h.r.Stats(); st.ArtifactRoots != 1 || st.Artifacts != 1 || st.RetainedBytes != 0 {
			t.Fatalf("after clear: %+v", st)
		}
		got, err := img.ReadAll(ctx)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("the delivered artifact after clear: %v", err)
		}
		if sealedFiles(t, h) != 1 {
			t.Fatal("collected while a delivery still held it")
		}
		img.Close()
		waitFor(t, "collection after the delivery closed", settled(h))
		if sealedFiles(t, h) != 0 {
			t.Fatal("the sealed file was not unlinked")
		}
	})
}

// Row 8.2.8: a publication whose context has already expired keeps its
// attachment's owner until the late reply arrives. The publish is held
// behind a blocked write; the artifact handle is closed meanwhile. Had the
// guard been dropped with the context, its release would travel on the
// control lane ahead of the publication, which would then be refused.
func TestGapExpiredPublishKeepsTheGuard(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		prod, tc := h.dialTap("producer", client.Config{})
		cons := h.dial("consumer")
		mustDeclare(t, prod, "frames", wire.RetainNone)
		s, err := cons.Subscribe(ctx, "frames", client.Bounded())
		if err != nil {
			t.Fatal(err)
		}
		data := frameBytes(17, 4096)
		a := produce(t, prod, data)

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
		img, err := m.Artifact("img")
		if err != nil {
			t.Fatal(err)
		}
		got, err := img.ReadAll(ctx)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("the published artifact: %v", err)
		}
		img.Close()
		m.Close()
		barrier(t, prod) // the late reply has been handled
		waitFor(t, "everything released", settled(h))
		if n := prod.ControlErrors(); n != 0 {
			t.Fatalf("%d refused control commands (a use after release)", n)
		}
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

// Row 8.3.2: clones and extractions are local: they write nothing.
func TestGapLocalClonesSendNothing(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		prod := h.dial("producer")
		cons, tc := h.dialTap("consumer", client.Config{})
		mustDeclare(t, prod, "frames", wire.RetainNone)
		s, err := cons.Subscribe(ctx, "frames", client.Bounded())
		if err != nil {
			t.Fatal(err)
		}
		a := produce(t, prod, frameBytes(19, 1024))
		if _, err := prod.Publish(ctx, "frames", nil, client.Attach("img", a)); err != nil {
			t.Fatal(err)
		}
		a.Close()
		barrier(t, prod) // the producer's release is processed before the count is read
		m, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		barrier(t, cons)
		before := tc.written()
		owners := h.r.Stats().Owners
		var handles []*client.Artifact
		for range 2 {
			x, err := m.Artifact("img")
			if err != nil {
				t.Fatal(err)
			}
			y, err := x.Clone()
			if err != nil {
				t.Fatal(err)
			}
			z, err := y.Clone()
			if err != nil {
				t.Fatal(err)
			}
			handles = append(handles, x, y, z)
		}
		barrier(t, cons) // flushes anything the clones might have queued
		if ops := tc.opsSince(before); len(ops) != 1 || ops[0] != wire.OpTopicDeclare.String() {
			t.Fatalf("clones and extractions wrote %v, want only the barrier", ops)
		}
		if st := h.r.Stats(); st.Owners != owners {
			t.Fatalf("owners %d before, %d after local clones", owners, st.Owners)
		}
		for _, x := range handles {
			x.Close()
		}
		m.Close()
		waitFor(t, "everything released", settled(h))
		if n := cons.ControlErrors(); n != 0 {
			t.Fatalf("%d refused control commands", n)
		}
	})
}

// Row 8.3.4: ownership is per delivery. Keeping one of a message's two
// artifacts keeps the other alive too, until the kept one is closed.
func TestGapOneArtifactKeepsTheDelivery(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		prod, cons := h.dial("producer"), h.dial("consumer")
		mustDeclare(t, prod, "pairs", wire.RetainNone)
		s, err := cons.Subscribe(ctx, "pairs", client.Bounded())
		if err != nil {
			t.Fatal(err)
		}
		left, right := produce(t, prod, frameBytes(21, 2048)), produce(t, prod, frameBytes(23, 2048))
		if _, err := prod.Publish(ctx, "pairs", nil, client.Attach("left", left), client.Attach("right", right)); err != nil {
			t.Fatal(err)
		}
		left.Close()
		right.Close()
		barrier(t, prod)
		m, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		kept, err := m.Artifact("left")
		if err != nil {
			t.Fatal(err)
		}
		m.Close()
		barrier(t, cons)
		if n := sealedFiles(t, h); n != 2 {
			t.Fatalf("%d sealed files while one artifact of the delivery is kept, want 2", n)
		}
		if st := h.r.Stats(); st.Owners != 1 || st.Artifacts != 2 || st.ArtifactRoots != 2 {
			t.Fatalf("the delivery was released with one artifact kept: %+v", st)
		}
		kept.Close()
		waitFor(t, "both collected", settled(h))
		if n := sealedFiles(t, h); n != 0 {
			t.Fatalf("%d sealed files left", n)
		}
	})
}

// Row 8.3.16: the SDK's control lane overflowing closes the connection
// rather than drop a release.
func TestGapClientControlLaneOverflowCloses(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		c, tc := h.dialTap("producer", client.Config{ControlLaneCapacity: 4})
		var arts []*client.Artifact
		for i := range 5 {
			arts = append(arts, produce(t, c, frameBytes(byte(i), 64)))
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
		if err := <-held; code(t, err) != wire.ErrRouterLost {
			t.Fatalf("the held command: %v", err)
		}
		waitFor(t, "the router to release the connection's owners", settled(h))
	})
}

// Row 9.2: the defaults are section 9's table, and hello reports them.
func TestGapDefaultLimitsAreTheTable(t *testing.T) {
	check := func(t *testing.T, where string, l wire.Limits) {
		t.Helper()
		const mib = 1 << 20
		want := []struct {
			name      string
			got, want uint64
		}{
			{"maxClients", uint64(l.MaxClients), 64},
			{"maxServices", uint64(l.MaxServices), 256},
			{"maxTopics", uint64(l.MaxTopics), 512},
			{"maxSubscriptionsPerClient", uint64(l.MaxSubscriptionsPerClient), 128},
			{"maxSubscriptions", uint64(l.MaxSubscriptions), 1024},
			{"maxActiveCallsPerClient", uint64(l.MaxActiveCallsPerClient), 64},
			{"maxServiceQueued", uint64(l.MaxServiceQueued), 16},
			{"maxServiceInFlight", uint64(l.MaxServiceInFlight), 16},
			{"maxLatestInFlight", uint64(l.MaxLatestInFlight), 2},
			{"maxBoundedQueued", uint64(l.MaxBoundedQueued), 64},
			{"maxBoundedInFlight", uint64(l.MaxBoundedInFlight), 16},
			{"maxOwnersPerClient", uint64(l.MaxOwnersPerClient), 256},
			{"maxStoreBytes", l.MaxStoreBytes, 512 * mib},
			{"maxArtifactBytes", l.MaxArtifactBytes, 128 * mib},
			{"maxQueuedBytesPerClient", l.MaxQueuedBytesPerClient, 1 * mib},
			{"maxControlFrames", uint64(l.MaxControlFrames), 128},
			{"maxControlBytes", l.MaxControlBytes, 1 * mib},
		}
		for _, w := range want {
			if w.got != w.want {
				t.Errorf("%s: %s is %d, the table says %d", where, w.name, w.got, w.want)
			}
		}
	}
	if wire.MaxEnvelopeBytes != 64*1024 {
		t.Errorf("maxEnvelopeBytes is %d, the table says 64 KiB", wire.MaxEnvelopeBytes)
	}
	check(t, "DefaultLimits", wire.DefaultLimits())
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		got := h.dial("probe").Info().Limits
		check(t, "hello", got)
		if got != wire.DefaultLimits() {
			t.Fatalf("hello reports %+v, defaults are %+v", got, wire.DefaultLimits())
		}
	})
}

// Row 12.4: ARTIFACT_MISMATCH refuses an attachment whose reference
// disagrees with the artifact it names.
func TestGapMismatchedRefIsRefused(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		r := newRaw(t, h.conn(""))
		r.hello("rawp")
		r.command(wire.OpTopicDeclare, &wire.Declare{Name: "t", Retained: wire.RetainNone})
		if be := r.reply(&wire.DeclareOK{}); be != nil {
			t.Fatal(be)
		}
		r.command(wire.OpArtifactAllocate, &wire.Allocate{ByteLength: 16, ContentType: "x/y"})
		var alloc wire.AllocateOK
		if be := r.reply(&alloc); be != nil {
			t.Fatal(be)
		}
		r.command(wire.OpArtifactSeal, &wire.Seal{ArtifactID: alloc.ArtifactID, Generation: 1, OwnerID: alloc.OwnerID})
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
		waitFor(t, "everything released", settled(h))
	})
}
