package browsertest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/debugger"
	"github.com/chromedp/chromedp"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/edge"
	"github.com/flybus/flybus/internal/shmtest"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// stack is a router on a Unix socket, an edge connected to it as a
// separate client would be, and a publisher.
type stack struct {
	t      *testing.T
	socket string
	root   string
	port   string

	mu  sync.Mutex
	r   *router.Router
	pub *client.Client
	e   *edge.Edge
}

func newStack(t *testing.T, topics ...string) *stack {
	t.Helper()
	s := &stack{t: t, root: shmtest.Dir(t, "flybus-browser-"), socket: filepath.Join(t.TempDir(), "bus.sock")}
	s.startRouter(topics...)
	// A write timeout that a loaded machine cannot reach: the slow tab
	// is held still for as long as the fast one takes.
	cfg := edge.Config{Topics: topics, LoopbackHosts: true, RouterAddr: "embedded", WriteTimeout: 5 * time.Minute,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Feed: edge.Follow(func(ctx context.Context) (*client.Client, error) {
			return client.DialUnix(ctx, s.socket, client.Config{ClientID: "edge", StoreRoot: s.root,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		}),
		RouterDetails: func(context.Context) (router.Details, error) {
			s.mu.Lock()
			r := s.r
			s.mu.Unlock()
			if r == nil {
				return router.Details{}, fmt.Errorf("no router")
			}
			return r.Details(), nil
		},
	}
	e, err := edge.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.e = e
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, s.port, _ = net.SplitHostPort(ln.Addr().String())
	srv := &http.Server{Handler: e.Handler(), MaxHeaderBytes: edge.MaxHeaderBytes, ConnContext: edge.ConnContext}
	go srv.Serve(ln)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		srv.Shutdown(cctx)
		e.Close(cctx)
		cancel()
		<-done
		s.stopRouter()
	})
	s.await("the edge subscribed", func(st edge.Stats) bool {
		for _, t := range st.Topics {
			if !t.Subscribed {
				return false
			}
		}
		return true
	})
	return s
}

// url is the viewer's address on host (127.0.0.1 or localhost).
func (s *stack) url(host, query string) string { return "http://" + host + ":" + s.port + "/?" + query }

func (s *stack) startRouter(topics ...string) {
	s.t.Helper()
	r, err := router.New(router.Config{Policy: router.OpenPolicy(), StoreRoot: s.root})
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := r.ListenUnix(s.socket); err != nil {
		s.t.Fatal(err)
	}
	nc, err := r.ConnectInMemory()
	if err != nil {
		s.t.Fatal(err)
	}
	pub, err := client.Connect(context.Background(), nc, client.Config{ClientID: "camera"})
	if err != nil {
		s.t.Fatal(err)
	}
	for _, topic := range topics {
		if _, err := pub.DeclareTopic(context.Background(), topic, wire.RetainLatest); err != nil {
			s.t.Fatal(err)
		}
	}
	s.mu.Lock()
	s.r, s.pub = r, pub
	s.mu.Unlock()
}

func (s *stack) stopRouter() {
	s.mu.Lock()
	r, pub := s.r, s.pub
	s.r, s.pub = nil, nil
	s.mu.Unlock()
	if r == nil {
		return
	}
	pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Shutdown(ctx); err != nil {
		s.t.Errorf("router shutdown: %v", err)
	}
}

func (s *stack) await(what string, cond func(edge.Stats) bool) edge.Stats {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := s.e.Await(ctx, cond)
	if err != nil {
		s.t.Fatalf("timed out waiting for %s: %+v", what, st)
	}
	return st
}

// pattern is a w x h RGBA frame (opaque, so a canvas keeps it exactly)
// that seed varies.
func pattern(w, h int, seed byte) []byte {
	b := make([]byte, w*h*4)
	for y := range h {
		for x := range w {
			i := 4 * (y*w + x)
			b[i], b[i+1], b[i+2], b[i+3] = byte(x), byte(y), byte(x)^byte(y)^seed, 255
		}
	}
	return b
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// publish publishes pixels as attachment "frame" of contentType.
func (s *stack) publish(topic, contentType string, payload any, pixels []byte) {
	s.t.Helper()
	s.mu.Lock()
	pub := s.pub
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := pub.Allocate(ctx, int64(len(pixels)), contentType)
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := w.Write(pixels); err != nil {
		s.t.Fatal(err)
	}
	a, err := w.Seal(ctx, client.NoWait())
	if err != nil {
		s.t.Fatal(err)
	}
	defer a.Close()
	if _, err := pub.Publish(ctx, topic, payload, client.Attach("frame", a)); err != nil {
		s.t.Fatal(err)
	}
}

// chromium finds the browser: FLYBUS_CHROMIUM, or one on PATH. Without
// one the test skips, unless CI is set: there it must run.
func chromium(t *testing.T) string {
	if p := os.Getenv("FLYBUS_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium on PATH (apt-get install chromium), and CI needs the browser tests")
	}
	t.Skip("no chromium on PATH (apt-get install chromium, or set FLYBUS_CHROMIUM)")
	return ""
}

// browser starts headless Chromium; tabs are contexts made from it.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 1400), chromedp.Flag("disable-dev-shm-usage", true),
		// chromedp's defaults turn site isolation off; the slow-tab test
		// needs its two sites in two renderer processes.
		chromedp.Flag("disable-features", "Translate"), chromedp.Flag("site-per-process", true))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(func() { bcancel(); acancel() })
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("starting %s: %v", chromium(t), err)
	}
	return bctx
}

// tab opens url in a new tab of the browser.
func tab(t *testing.T, b context.Context, url string) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	return ctx
}

// debug pauses or resumes a tab's JavaScript: a paused page takes no
// message, as a page stuck in a long task would not.
func debug(t *testing.T, ctx context.Context, pause bool) {
	t.Helper()
	err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if !pause {
			_, err := cdp.Call(ctx, tg, debugger.Resume, debugger.ResumeParams{})
			return err
		}
		if _, err := cdp.Call(ctx, tg, debugger.Enable, debugger.EnableParams{}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, tg, debugger.Pause, cdp.Empty{})
		return err
	}))
	if err != nil {
		t.Fatalf("debugger (pause %v): %v", pause, err)
	}
}

// eval evaluates a JavaScript expression, awaiting a promise.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// waitJS re-evaluates expr until it is true: the page's own state, read
// as it changes.
func waitJS(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if eval[bool](t, ctx, "!!("+expr+")") {
			return
		}
		if time.Now().After(deadline) {
			state := eval[string](t, ctx, "JSON.stringify({v: window.flybusViewer, feed: document.getElementById('feed').textContent})")
			t.Fatalf("timed out waiting for %s (%s); the page: %s", what, expr, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// canvasDigest reads a topic's frame canvas back: its size and the
// SHA-256 of its RGBA pixels.
func canvasDigest(t *testing.T, ctx context.Context, topic string) string {
	t.Helper()
	return eval[string](t, ctx, fmt.Sprintf(`(async () => {
		const c = document.querySelector('.panel[data-topic=%q] canvas[data-attachment="frame"]');
		if (!c || c.hidden) return "no canvas";
		const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
		const h = new Uint8Array(await crypto.subtle.digest("SHA-256", d));
		return c.width + "x" + c.height + " " + Array.from(h, (b) => b.toString(16).padStart(2, "0")).join("");
	})()`, topic))
}

// topicJS is the viewer's figures of one topic, as an expression.
func topicJS(topic string) string {
	return fmt.Sprintf("(window.flybusViewer.topics[%q] || {})", topic)
}

func ready(topics ...string) string {
	var conds []string
	for _, t := range topics {
		conds = append(conds, fmt.Sprintf("v.subscribed[%q]", t))
	}
	return "(v => v && v.connected && v.bus === 'up' && v.subscribed && " + strings.Join(conds, " && ") + ")(window.flybusViewer)"
}
