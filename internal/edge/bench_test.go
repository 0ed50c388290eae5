package edge

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/shmtest"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// The edge's cost per frame per browser: a 640x480 RGBA frame published
// on the bus, sent by the edge and read whole by each of N WebSocket
// clients, one frame at a time; beside it, the baseline writes the same
// bytes to N loopback TCP sockets that read them whole. Everything runs in
// this process, so cpu-ns/frame/client (user and system CPU of the whole
// process per frame per client) includes the router and the publisher on
// the edge's side, which the baseline does not pay.
//
//	go test ./internal/edge -run '^$' -bench EdgeFrame -benchtime 300x
func BenchmarkEdgeFrame(b *testing.B) {
	for _, n := range []int{1, 4} {
		b.Run(fmt.Sprintf("edge/clients=%d", n), func(b *testing.B) { benchEdge(b, n) })
		b.Run(fmt.Sprintf("tcp/clients=%d", n), func(b *testing.B) { benchTCP(b, n) })
	}
}

const benchFrame = 640 * 480 * 4

func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, start time.Duration, clients int) {
	b.ReportMetric(float64(cpuNow()-start)/float64(b.N*clients), "cpu-ns/frame/client")
	b.SetBytes(int64(benchFrame * clients))
}

func benchEdge(b *testing.B, clients int) {
	ctx := context.Background()
	r, err := router.New(router.Config{Policy: router.OpenPolicy(), StoreRoot: shmtest.BenchDir(b, "flybus-edge-bench-")})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Shutdown(ctx)
	nc, err := r.ConnectInMemory()
	if err != nil {
		b.Fatal(err)
	}
	pub, err := client.Connect(ctx, nc, client.Config{ClientID: "camera"})
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	if _, err := pub.DeclareTopic(ctx, "cam.frames", wire.RetainNone); err != nil {
		b.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dial := func(ctx context.Context) (*client.Client, error) {
		return client.Dial(ctx, func(context.Context) (net.Conn, error) { return r.ConnectInMemory() },
			client.Config{ClientID: "edge", Logger: quiet})
	}
	e, err := New(Config{Topics: []string{"cam.frames"}, Feed: Follow(dial), Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(runCtx) }()
	srv := httptest.NewUnstartedServer(e.Handler())
	srv.Config.MaxHeaderBytes = MaxHeaderBytes
	srv.Config.ConnContext = ConnContext
	srv.Start()
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = e.Close(cctx)
		srv.Close()
		stop()
		<-done
	}()
	for !e.Stats().Topic("cam.frames").Subscribed { // setup, not measured
		time.Sleep(time.Millisecond)
	}
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + WebSocketPath
	conns := make([]*websocket.Conn, clients)
	for i := range conns {
		c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{Subprotocol}})
		if err != nil {
			b.Fatal(err)
		}
		defer c.CloseNow()
		c.SetReadLimit(64 << 20)
		send := func(v any) {
			m, _ := json.Marshal(v)
			if err := c.Write(ctx, websocket.MessageText, m); err != nil {
				b.Fatal(err)
			}
		}
		awaitNotice := func(kind string) {
			for {
				typ, m, err := c.Read(ctx)
				if err != nil {
					b.Fatal(err)
				}
				var n struct{ Type string }
				if typ == websocket.MessageText && json.Unmarshal(m, &n) == nil && n.Type == kind {
					return
				}
			}
		}
		send(map[string]any{"op": "hello", "version": Version})
		awaitNotice("welcome")
		send(map[string]any{"op": "subscribe", "topics": map[string][]string{"cam.frames": {"*"}}})
		awaitNotice("subscribed")
		conns[i] = c
	}
	// One sealed frame, attached to every publication: the producer's
	// fill and seal are not the edge's cost.
	w, err := pub.Allocate(ctx, benchFrame, "image/x-rgba; width=640; height=480")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := w.Write(make([]byte, benchFrame)); err != nil {
		b.Fatal(err)
	}
	art, err := w.Seal(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer art.Close()
	// Each reader drains messages into a buffer of its own, as the TCP
	// readers do, so that neither side allocates a frame per read.
	bufs := make([][]byte, clients)
	for i := range bufs {
		bufs[i] = make([]byte, benchFrame+64<<10) // whole frames per read, as the TCP readers take them
	}
	readFrame := func(c *websocket.Conn, buf []byte) error {
		for {
			typ, rd, err := c.Reader(ctx)
			if err != nil {
				return err
			}
			n := 0
			for {
				k, err := rd.Read(buf)
				n += k
				if err == io.EOF {
					break
				}
				if err != nil {
					return err
				}
			}
			if typ == websocket.MessageBinary {
				if n < benchFrame {
					return fmt.Errorf("a publication of %d bytes", n)
				}
				return nil
			}
		}
	}
	errs := make(chan error, clients)
	b.ReportAllocs()
	b.ResetTimer()
	start := cpuNow()
	for i := 0; i < b.N; i++ {
		if _, err := pub.Publish(ctx, "cam.frames", map[string]int{"n": i}, client.Attach("frame", art)); err != nil {
			b.Fatal(err)
		}
		for j, c := range conns {
			go func() { errs <- readFrame(c, bufs[j]) }()
		}
		for range conns {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	reportCPU(b, start, clients)
	if st := e.Stats(); st.Topic("cam.frames").FramesSkipped != 0 {
		b.Fatalf("frames skipped: %+v", st.Topic("cam.frames"))
	}
}

func benchTCP(b *testing.B, clients int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	writers := make([]net.Conn, clients)
	readers := make([]net.Conn, clients)
	for i := range writers {
		if writers[i], err = net.Dial("tcp", ln.Addr().String()); err != nil {
			b.Fatal(err)
		}
		defer writers[i].Close()
		if readers[i], err = ln.Accept(); err != nil {
			b.Fatal(err)
		}
		defer readers[i].Close()
	}
	frame := make([]byte, benchFrame)
	bufs := make([][]byte, clients)
	for i := range bufs {
		bufs[i] = make([]byte, benchFrame)
	}
	errs := make(chan error, 2*clients)
	b.ReportAllocs()
	b.ResetTimer()
	start := cpuNow()
	for i := 0; i < b.N; i++ {
		for j := range writers {
			go func() { _, err := writers[j].Write(frame); errs <- err }()
			go func() { _, err := io.ReadFull(readers[j], bufs[j]); errs <- err }()
		}
		for range 2 * clients {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	reportCPU(b, start, clients)
}
