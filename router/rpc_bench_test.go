package router_test

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
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
			r, err := router.New(router.Config{Policy: router.OpenPolicy()})
			if err != nil {
				b.Fatal(err)
			}
			defer r.Shutdown(context.Background())
			dial := func(id string) *client.Client {
				var nc net.Conn
				if unix {
					path := filepath.Join(b.TempDir(), id+".sock")
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
				return c
			}
			svcClient, caller := dial("svc"), dial("caller")
			defer svcClient.Close()
			defer caller.Close()
			ctx := context.Background()
			svc, err := svcClient.Register(ctx, "bench.echo", client.ServiceConfig{})
			if err != nil {
				b.Fatal(err)
			}
			go func() {
				for {
					req, err := svc.Next(ctx)
					if err != nil {
						return
					}
					req.Reply(ctx, req.Payload)
					req.Close()
				}
			}()
			payload := []byte(`{"step":12345,"agent":"fly-a","obs":{"t":0.016,"reward":1.5}}`)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				res, err := caller.CallAndWait(ctx, "bench.echo", svc.Incarnation(), "Echo.Echo", payload)
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
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, size)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	msg := make([]byte, size)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		for range hops {
			if _, err := c.Write(msg); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(c, msg); err != nil {
				b.Fatal(err)
			}
		}
	}
}
