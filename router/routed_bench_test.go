package router_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"

	"github.com/flybus/flybus/router"
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

func (r *benchRaw) send(op wire.Op, body wire.Body) {
	r.id++
	var err error
	if r.buf, err = wire.AppendFrame(r.buf[:0], wire.Header{ID: r.id, Kind: wire.KindCommand, Op: op}, body, nil); err != nil {
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

func (r *benchRaw) ok(op wire.Op, body, v wire.Body) {
	r.send(op, body)
	if be, err := r.next(op).DecodeReply(v); err != nil || be != nil {
		r.b.Fatalf("%s: %v %v", op, be, err)
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
				r, err := router.New(router.Config{Policy: router.OpenPolicy()})
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
				dial := func(id string) *benchRaw {
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
				pub := dial("pub")
				pub.ok(wire.OpTopicDeclare, &wire.Declare{Name: "t", Retained: wire.RetainNone}, &wire.DeclareOK{})
				subs := make([]*benchRaw, n)
				for i := range subs {
					subs[i] = dial(fmt.Sprintf("sub%d", i))
					subs[i].ok(wire.OpSubscribe, &wire.Subscribe{Topic: "t", Mode: wire.ModeBounded, MaxQueued: 4, MaxInFlight: 1}, &wire.SubscribeOK{})
				}
				publish := &wire.Publish{Topic: "t", Payload: wire.RawJSON(`{"frame":1234,"width":640,"height":480}`)}
				var pubOK wire.PublishOK
				var msg wire.TopicMessage
				var released wire.Released
				ids := make([]wire.DeliveryID, 1)
				consumed := &wire.Consumed{DeliveryIDs: ids}
				round := func() {
					pub.ok(wire.OpPublish, publish, &pubOK)
					for _, s := range subs {
						if err := s.next(wire.OpTopicMessage).DecodeBody(&msg); err != nil {
							b.Fatal(err)
						}
						ids[0] = msg.DeliveryID
						s.ok(wire.OpDeliveryConsumed, consumed, &released)
					}
				}
				for range 100 { // warm the lanes, maps and buffers
					round()
				}
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					round()
				}
			})
		}
	}
}
