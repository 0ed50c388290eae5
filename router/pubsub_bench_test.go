package router_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// benchClients starts a router and returns a dial function over the chosen
// transport; everything is torn down when the benchmark ends.
func benchClients(b *testing.B, unix bool) func(id string) *client.Client {
	r, err := router.New(router.Config{Policy: router.OpenPolicy()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Shutdown(context.Background()) })
	dir := b.TempDir()
	return func(id string) *client.Client {
		var nc net.Conn
		if unix {
			path := filepath.Join(dir, id+".sock")
			if _, err := r.ListenUnixAs(path, id); err != nil {
				b.Fatal(err)
			}
			nc, err = net.Dial("unix", path)
		} else {
			nc, err = r.ConnectInMemoryAs(id)
		}
		if err != nil {
			b.Fatal(err)
		}
		c, err := client.Connect(context.Background(), nc, client.Config{ClientID: id})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return c
	}
}

// BenchmarkPublish measures publish admission (the publisher's round trip)
// and delivery latency (publish sent to the last subscriber's message in
// hand) for 1, 3 and 16 latest-mode subscribers, beside a raw Unix-socket
// ping-pong of a similar size in the same run.
func BenchmarkPublish(b *testing.B) {
	payload := wire.RawJSON(`{"frame":1234,"t":20.566,"width":640,"height":480,"binding":{"image":"frame"}}`)
	for _, unix := range []bool{false, true} {
		for _, n := range []int{1, 3, 16} {
			tr := "memory"
			if unix {
				tr = "unix"
			}
			b.Run(fmt.Sprintf("transport=%s/subscribers=%d", tr, n), func(b *testing.B) {
				dial := benchClients(b, unix)
				ctx := context.Background()
				pub := dial("pub")
				if _, err := pub.DeclareTopic(ctx, "bench.frames", wire.RetainNone); err != nil {
					b.Fatal(err)
				}
				subs := make([]*client.Subscription, n)
				for i := range subs {
					s, err := dial(fmt.Sprintf("sub-%d", i)).Subscribe(ctx, "bench.frames", client.Bounded())
					if err != nil {
						b.Fatal(err)
					}
					subs[i] = s
				}
				var admit, deliver time.Duration
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					t0 := time.Now()
					if _, err := pub.Publish(ctx, "bench.frames", payload); err != nil {
						b.Fatal(err)
					}
					admit += time.Since(t0)
					for _, s := range subs {
						m, err := s.Next(ctx)
						if err != nil {
							b.Fatal(err)
						}
						m.Close()
					}
					deliver += time.Since(t0)
				}
				b.ReportMetric(float64(admit.Nanoseconds())/float64(b.N), "admit-ns/op")
				b.ReportMetric(float64(deliver.Nanoseconds())/float64(b.N), "all-delivered-ns/op")
			})
		}
	}
	b.Run("baseline=raw-unix-pingpong", func(b *testing.B) { rawPingPong(b, 300, 1) })
}

// BenchmarkPublishThroughput pipelines publications of a small envelope to
// one bounded subscriber: publications per second end to end.
func BenchmarkPublishThroughput(b *testing.B) {
	dial := benchClients(b, true)
	ctx := context.Background()
	pub, subc := dial("pub"), dial("sub")
	if _, err := pub.DeclareTopic(ctx, "bench.events", wire.RetainNone); err != nil {
		b.Fatal(err)
	}
	s, err := subc.Subscribe(ctx, "bench.events", client.Bounded())
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := s.Next(ctx)
			if err != nil {
				return
			}
			m.Close()
		}
	}()
	payload := wire.RawJSON(`{"n":1}`)
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		for {
			_, err := pub.Publish(ctx, "bench.events", payload)
			if err == nil {
				break
			}
			if code := err.(*wire.BusError).Code; code != wire.ErrBackpressure {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "publications/s")
	b.StopTimer()
	s.Close()
	<-done
}
