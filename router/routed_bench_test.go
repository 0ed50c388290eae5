package router_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"

	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

// benchRaw is a client written for benchmarks: every frame is encoded into
// a reused buffer and decoded in place, so it allocates nothing, and the
// allocations a benchmark reports are the router's.
type benchRaw struct {
	b   *testing.B
	nc  net.Conn
	fr  *wire.FrameReader
	dec wire.Decoder
	env wire.Envelope
	buf []byte
	id  uint64
}

func (r *benchRaw) sendWith(op wire.Op, body wire.Body, atts []wire.Attachment) {
	r.id++
	var err error
	if r.buf, err = wire.AppendFrame(r.buf[:0], wire.Header{ID: r.id, Kind: wire.KindCommand, Op: op}, body, atts); err != nil {
		r.b.Fatal(err)
	}
	if err := wire.WriteFull(r.nc, r.buf); err != nil {
		r.b.Fatal(err)
	}
}

func (r *benchRaw) next(want wire.Op) *wire.Envelope {
	f, err := r.fr.ReadFrame()
	if err == nil {
		err = r.dec.Decode(f, &r.env)
	}
	if err != nil {
		r.b.Fatal(err)
	}
	if r.env.Op != want {
		r.b.Fatalf("got %s %s, want %s", r.env.Kind, r.env.Op, want)
	}
	return &r.env
}

func (r *benchRaw) ok(op wire.Op, body, v wire.Body) { r.okWith(op, body, nil, v) }

func (r *benchRaw) okWith(op wire.Op, body wire.Body, atts []wire.Attachment, v wire.Body) {
	r.sendWith(op, body, atts)
	if be, err := r.next(op).DecodeReply(v); err != nil || be != nil {
		r.b.Fatalf("%s: %v %v", op, be, err)
	}
}

// consumeNext reads the next topic.message into msg and consumes it with
// consumed (its one id set here), the reply read into released: all
// reused, so the client allocates nothing.
func (r *benchRaw) consumeNext(msg *wire.TopicMessage, consumed *wire.Consumed, released *wire.Released) {
	if err := r.next(wire.OpTopicMessage).DecodeBody(msg); err != nil {
		r.b.Fatal(err)
	}
	consumed.DeliveryIDs[0] = msg.DeliveryID
	r.ok(wire.OpDeliveryConsumed, consumed, released)
}

// fanout is a publisher of one topic and n bounded subscribers to it, with
// the bodies the subscribers consume through, reused.
type fanout struct {
	pub      *benchRaw
	subs     []*benchRaw
	msg      wire.TopicMessage
	consumed wire.Consumed
	released wire.Released
}

// newFanout dials pubID, which declares topic, then subscribers subID0,
// subID1, ... to it, each allowed 4 queued messages and 1 in flight.
func newFanout(dial func(id string) *benchRaw, topic, pubID, subID string, n int) *fanout {
	f := &fanout{pub: dial(pubID), subs: make([]*benchRaw, n), consumed: wire.Consumed{DeliveryIDs: make([]wire.DeliveryID, 1)}}
	f.pub.ok(wire.OpTopicDeclare, &wire.Declare{Name: topic, Retained: wire.RetainNone}, &wire.DeclareOK{})
	for i := range f.subs {
		f.subs[i] = dial(fmt.Sprintf("%s%d", subID, i))
		f.subs[i].ok(wire.OpSubscribe, &wire.Subscribe{Topic: topic, Mode: wire.ModeBounded, MaxQueued: 4, MaxInFlight: 1}, &wire.SubscribeOK{})
	}
	return f
}

// consume has each subscriber consume its next message.
func (f *fanout) consume() {
	for _, s := range f.subs {
		s.consumeNext(&f.msg, &f.consumed, &f.released)
	}
}

// benchSteady runs op 100 times, to warm the router's lanes, maps and
// buffers (and its store), then b.N times with the timer and the
// allocation count running: the router's steady state.
func benchSteady(b *testing.B, op func()) {
	for range 100 {
		op()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		op()
	}
}

// benchRouter starts a router with cfg (listening on a Unix socket if
// unix) and returns it with how to connect a benchRaw client that has
// said hello.
func benchRouter(b *testing.B, cfg router.Config, unix bool) (*router.Router, func(id string) *benchRaw) {
	r, err := router.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Shutdown(context.Background()) })
	sock := filepath.Join(b.TempDir(), "bus.sock")
	if unix {
		if _, err := r.ListenUnix(sock); err != nil {
			b.Fatal(err)
		}
	}
	return r, func(id string) *benchRaw {
		var nc net.Conn
		var err error
		if unix {
			nc, err = net.Dial("unix", sock)
		} else {
			nc, err = r.ConnectInMemory()
		}
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { nc.Close() })
		c := &benchRaw{b: b, nc: nc, fr: wire.NewFrameReader(nc)}
		c.ok(wire.OpHello, &wire.Hello{ClientID: id, ClientIncarnation: "inc-" + id, SupportedMajors: []uint32{1}}, &wire.HelloOK{})
		return c
	}
}

// BenchmarkRoutedPublication routes one small publication to each of n
// bounded subscribers, which consume it, through clients that allocate
// nothing: allocs/op is what the router allocates per routed frame, in
// its steady state.
func BenchmarkRoutedPublication(b *testing.B) {
	for _, unix := range []bool{false, true} {
		for _, n := range []int{1, 3} {
			tr := "memory"
			if unix {
				tr = "unix"
			}
			b.Run(fmt.Sprintf("transport=%s/subscribers=%d", tr, n), func(b *testing.B) {
				_, dial := benchRouter(b, router.Config{Policy: router.OpenPolicy()}, unix)
				fo := newFanout(dial, "t", "pub", "sub", n)
				publish := &wire.Publish{Topic: "t", Payload: wire.RawJSON(`{"frame":1234,"width":640,"height":480}`)}
				var pubOK wire.PublishOK
				benchSteady(b, func() {
					fo.pub.ok(wire.OpPublish, publish, &pubOK)
					fo.consume()
				})
			})
		}
	}
}

// BenchmarkRoutedFrame is one artifact-bearing frame's whole life through
// the router, in each store mode, over the in-memory transport: allocate,
// seal, publish with the frame attached, release the producer's hold,
// deliver to each of n bounded subscribers, which consume it, until the
// router collects it. The clients allocate nothing and write no bytes (the
// router never reads them), so allocs/op is the router's per frame,
// store included.
func BenchmarkRoutedFrame(b *testing.B) {
	for _, mode := range []store.Mode{store.ModeFiles, store.ModePool} {
		for _, n := range []int{1, 3} {
			b.Run(fmt.Sprintf("store=%s/subscribers=%d", mode, n), func(b *testing.B) {
				r, dial := benchRouter(b, router.Config{Policy: router.OpenPolicy(), StoreRoot: benchStoreRoot(b), StoreMode: mode}, false)
				fo := newFanout(dial, "frames", "producer", "consumer", n)
				pub := fo.pub
				allocate := &wire.Allocate{ByteLength: 640 * 480 * 4, ContentType: "image/x-rgba"}
				var allocOK wire.AllocateOK
				var seal wire.Seal
				var sealOK wire.SealOK
				publish := &wire.Publish{Topic: "frames", Payload: wire.RawJSON(`{"frame":1234,"width":640,"height":480}`)}
				atts := make([]wire.Attachment, 1)
				var pubOK wire.PublishOK
				owners := make([]wire.OwnerID, 1)
				release := &wire.Release{OwnerIDs: owners}
				var released wire.Released
				benchSteady(b, func() {
					pub.ok(wire.OpArtifactAllocate, allocate, &allocOK)
					seal = wire.Seal{Allocation: allocOK.Allocation}
					pub.ok(wire.OpArtifactSeal, &seal, &sealOK)
					atts[0] = wire.Attachment{Name: "frame", Ref: sealOK.Ref, OwnerID: sealOK.OwnerID}
					pub.okWith(wire.OpPublish, publish, atts, &pubOK)
					owners[0] = sealOK.OwnerID
					pub.ok(wire.OpArtifactRelease, release, &released)
					fo.consume()
				})
				b.StopTimer()
				if st := r.Stats(); st.ArtifactRoots != 0 {
					b.Fatalf("%d roots left after the frames", st.ArtifactRoots)
				}
			})
		}
	}
}

// BenchmarkDetails takes the operator's snapshot of a router holding 64
// clients, 16 topics with 8 subscriptions each and 8 services: one pass
// over its tables under the lock, which an operator's view takes once a
// second.
func BenchmarkDetails(b *testing.B) {
	r, dial := benchRouter(b, router.Config{Policy: router.OpenPolicy()}, false)
	clients := make([]*benchRaw, 64)
	for i := range clients {
		clients[i] = dial(fmt.Sprintf("client%d", i))
	}
	for i := range 16 {
		clients[0].ok(wire.OpTopicDeclare, &wire.Declare{Name: fmt.Sprintf("topic%d", i), Retained: wire.RetainNone}, &wire.DeclareOK{})
	}
	for i, c := range clients {
		for j := range 2 {
			c.ok(wire.OpSubscribe, &wire.Subscribe{Topic: fmt.Sprintf("topic%d", (i+j)%16), Mode: wire.ModeLatest, MaxQueued: 1, MaxInFlight: 1}, &wire.SubscribeOK{})
		}
		if i < 8 {
			c.ok(wire.OpServiceRegister, &wire.Register{Name: fmt.Sprintf("svc%d", i), MaxQueued: 16, MaxInFlight: 16}, &wire.RegisterOK{})
		}
	}
	if d := r.Details(); len(d.Clients) != 64 || len(d.Subscriptions) != 128 || len(d.Topics) != 16 || len(d.Services) != 8 {
		b.Fatalf("details: %d clients, %d subscriptions, %d topics, %d services", len(d.Clients), len(d.Subscriptions), len(d.Topics), len(d.Services))
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = r.Details()
	}
}
