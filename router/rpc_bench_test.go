package router_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/shmtest"
)

// BenchmarkRPCRoundTrip measures Call -> request -> Reply -> result ->
// consume through the router, beside the baseline it is judged against: a
// raw Unix-socket ping-pong of a similar envelope size, twice in a row (an
// RPC crosses the router twice each way).
func BenchmarkRPCRoundTrip(b *testing.B) {
	for _, unix := range []bool{false, true} {
		name := "transport=memory"
		if unix {
			name = "transport=unix"
		}
		b.Run(name, func(b *testing.B) {
			dial := benchClients(b, unix)
			svcClient, caller := dial("svc"), dial("caller")
			ctx := context.Background()
			svc, err := svcClient.Register(ctx, "bench.echo")
			if err != nil {
				b.Fatal(err)
			}
			go serveRequests(ctx, svc, func(req *client.Request) error {
				req.Reply(ctx, req.Payload)
				req.Close()
				return nil
			})
			payload := []byte(`{"step":12345,"agent":"fly-a","obs":{"t":0.016,"reward":1.5}}`)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				res, err := caller.CallAndWait(ctx, "bench.echo", "Echo.Echo", payload, client.Pin(svc.Incarnation()))
				if err != nil {
					b.Fatal(err)
				}
				res.Close()
			}
			b.StopTimer()
			svc.Close()
		})
	}
	b.Run("baseline=raw-unix-pingpong-x2", func(b *testing.B) { rawPingPong(b, 300, 2) })
	b.Run("baseline=raw-unix-pingpong", func(b *testing.B) { rawPingPong(b, 300, 1) })
}

// rawPingPong bounces a size-byte message over a Unix socket hops times per
// iteration: the floor any local bus pays.
func rawPingPong(b *testing.B, size, hops int) {
	path := filepath.Join(b.TempDir(), "pp.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			shmtest.Echo(c, size)
		}
	}()
	c, err := net.Dial("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	shmtest.PingPong(b, c, make([]byte, size), hops)
}
