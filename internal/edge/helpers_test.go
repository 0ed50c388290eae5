package edge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/bustest"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// clients remembers the bus clients a dialer made, to check them after.
type clients struct {
	mu   sync.Mutex
	list []*client.Client
}

func (cs *clients) add(c *client.Client) {
	cs.mu.Lock()
	cs.list = append(cs.list, c)
	cs.mu.Unlock()
}

func (cs *clients) leaked() uint64 {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var n uint64
	for _, c := range cs.list {
		n += c.Stats().Leaked
	}
	return n
}

// harnessDialer dials the harness's router over its transport as id.
func harnessDialer(h *bustest.Harness, id string, cs *clients) Dialer {
	return routerDialer(func() *router.Router { return h.Router() }, h.Unix, h.Socket(), h.Root(), id, cs)
}

// routerDialer makes a reconnecting client of whichever router cur
// returns: in memory, or over socket when unix says so.
func routerDialer(cur func() *router.Router, unix func() bool, socket, root, id string, cs *clients) Dialer {
	dial := func(ctx context.Context) (net.Conn, error) {
		if unix() {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}
		r := cur()
		if r == nil {
			return nil, errors.New("no router")
		}
		return r.ConnectInMemory()
	}
	return func(ctx context.Context) (*client.Client, error) {
		c, err := client.Dial(ctx, dial, client.Config{ClientID: id, StoreRoot: root,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err == nil && cs != nil {
			cs.add(c)
		}
		return c, err
	}
}

// served is an edge running under a test: its HTTP server and its bus
// clients.
type served struct {
	t   *testing.T
	e   *Edge
	srv *httptest.Server
	bus *clients
}

// serve starts an edge on feed-less cfg with the given dialer and an
// HTTP test server; everything stops when the test ends, before the
// harness checks for leaks.
func serve(t *testing.T, cfg Config, dial Dialer, bus *clients) *served {
	t.Helper()
	if cfg.Feed == nil {
		cfg.Feed = Follow(dial)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	srv := httptest.NewUnstartedServer(e.Handler())
	srv.Config.MaxHeaderBytes = MaxHeaderBytes
	srv.Config.ConnContext = ConnContext
	srv.Start()
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		if err := e.Close(cctx); err != nil {
			t.Errorf("edge close: %v", err)
		}
		srv.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("edge run: %v", err)
		}
		if s := e.Stats(); s.Held != 0 || s.Sockets != 0 {
			t.Errorf("after stop: %d publications held, %d sockets", s.Held, s.Sockets)
		}
		if bus != nil && bus.leaked() != 0 {
			t.Errorf("the edge's bus clients leaked %d handles", bus.leaked())
		}
	})
	return &served{t: t, e: e, srv: srv, bus: bus}
}

func (s *served) wsURL() string { return "ws" + strings.TrimPrefix(s.srv.URL, "http") + WebSocketPath }

// await waits for cond on the edge's Stats, failing after 20 s.
func (s *served) await(what string, cond func(Stats) bool) Stats {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := s.e.Await(ctx, cond)
	if err != nil {
		s.t.Fatalf("timed out waiting for %s; stats %+v", what, st)
	}
	return st
}

// ws is a test's WebSocket client of the edge.
type ws struct {
	t       *testing.T
	c       *websocket.Conn
	notices []map[string]any // text messages read so far
}

func dialWS(t *testing.T, url string, opts *websocket.DialOptions) (*ws, *http.Response, error) {
	t.Helper()
	if opts == nil {
		opts = &websocket.DialOptions{}
	}
	if opts.Subprotocols == nil {
		opts.Subprotocols = []string{Subprotocol}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, url, opts)
	if err != nil {
		return nil, resp, err
	}
	c.SetReadLimit(64 << 20)
	w := &ws{t: t, c: c}
	t.Cleanup(func() { c.CloseNow() })
	return w, resp, nil
}

// connect dials and says hello, and waits for the welcome.
func (s *served) connect(token string) *ws {
	s.t.Helper()
	w, _, err := dialWS(s.t, s.wsURL(), nil)
	if err != nil {
		s.t.Fatal(err)
	}
	w.send(map[string]any{"op": "hello", "version": Version, "token": token})
	w.notice("welcome")
	return w
}

func (w *ws) send(v any) {
	w.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		w.t.Fatal(err)
	}
	w.sendRaw(websocket.MessageText, b)
}

func (w *ws) sendRaw(typ websocket.MessageType, b []byte) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.c.Write(ctx, typ, b); err != nil {
		w.t.Fatal(err)
	}
}

// read returns the next message; text ones are also kept in notices.
func (w *ws) read() (websocket.MessageType, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	typ, b, err := w.c.Read(ctx)
	if err == nil && typ == websocket.MessageText {
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			w.t.Fatalf("a notice that is not JSON: %q", b)
		}
		w.notices = append(w.notices, m)
	}
	return typ, b, err
}

// notice reads until a notice of type kind, passing over publications
// and other notices.
func (w *ws) notice(kind string) map[string]any {
	w.t.Helper()
	return w.noticeWhere(kind, func(map[string]any) bool { return true })
}

func (w *ws) noticeWhere(kind string, ok func(map[string]any) bool) map[string]any {
	w.t.Helper()
	for {
		typ, _, err := w.read()
		if err != nil {
			w.t.Fatalf("waiting for a %s notice: %v", kind, err)
		}
		if typ != websocket.MessageText {
			continue
		}
		m := w.notices[len(w.notices)-1]
		if m["type"] == kind && ok(m) {
			return m
		}
	}
}

// publication reads until the next publication message.
func (w *ws) publication() (PublicationHeader, []byte) {
	w.t.Helper()
	for {
		typ, b, err := w.read()
		if err != nil {
			w.t.Fatalf("waiting for a publication: %v", err)
		}
		if typ != websocket.MessageBinary {
			continue
		}
		h, err := ParsePublication(b)
		if err != nil {
			w.t.Fatal(err)
		}
		return h, b
	}
}

// closed reads until the edge closes the socket and returns how.
func (w *ws) closed() websocket.CloseError {
	w.t.Helper()
	for {
		_, _, err := w.read()
		if err == nil {
			continue
		}
		var ce websocket.CloseError
		if !errors.As(err, &ce) {
			w.t.Fatalf("the socket ended without a close frame: %v", err)
		}
		return ce
	}
}

// subscribe sends a selection and waits for its acknowledgement.
func (w *ws) subscribe(topics map[string][]string, routerView bool) {
	w.t.Helper()
	w.send(map[string]any{"op": "subscribe", "topics": topics, "router": routerView})
	w.notice("subscribed")
}

// framePayload is what the test publisher says of a frame's attachments.
type framePayload struct {
	N      int               `json:"n"`
	Sha256 map[string]string `json:"sha256"`
	Width  int               `json:"width,omitempty"`
	Height int               `json:"height,omitempty"`
}

// publishFrame publishes payload n with the attachments given (name to
// content type and bytes) and returns the payload sent.
func publishFrame(t *testing.T, pub *client.Client, topic string, n int, atts map[string]attachment) framePayload {
	t.Helper()
	ctx := bustest.Ctx(t)
	p := framePayload{N: n, Sha256: map[string]string{}}
	var list []client.Attachment
	for name, a := range atts {
		w, err := pub.Allocate(ctx, int64(len(a.data)), a.ctype)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(a.data); err != nil {
			t.Fatal(err)
		}
		art, err := w.Seal(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer art.Close()
		sum := sha256.Sum256(a.data)
		p.Sha256[name] = hex.EncodeToString(sum[:])
		list = append(list, client.Attach(name, art))
	}
	if _, err := pub.Publish(ctx, topic, p, list...); err != nil {
		t.Fatal(err)
	}
	return p
}

type attachment struct {
	ctype string
	data  []byte
}

// frame is a 640x480 RGBA frame of a pattern seed varies.
func frame(seed byte) attachment {
	return attachment{ctype: "image/x-rgba; width=640; height=480", data: bustest.FrameBytes(seed, 640*480*4)}
}

// checkAttachments checks every included attachment's bytes against the
// digests the payload carries.
func checkAttachments(t *testing.T, h PublicationHeader, msg []byte) {
	t.Helper()
	var p framePayload
	if err := json.Unmarshal(h.Payload, &p); err != nil {
		t.Fatalf("payload %s: %v", h.Payload, err)
	}
	for _, a := range h.Attachments {
		if a.Offset == 0 {
			continue
		}
		sum := sha256.Sum256(msg[a.Offset : a.Offset+a.Size])
		if hex.EncodeToString(sum[:]) != p.Sha256[a.Name] {
			t.Fatalf("#%d %s: the bytes sent do not hash to the digest published", h.Sequence, a.Name)
		}
	}
}

// declare declares topic on c.
func declare(t *testing.T, c *client.Client, topic string, r wire.Retention) client.TopicInfo {
	t.Helper()
	return bustest.MustDeclare(t, c, topic, r)
}
