package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/coder/websocket"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/edge"
	"github.com/flybus/flybus/wire"
)

func TestEdgeUsageErrors(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"edge"}, "want SOCKET"},
		{[]string{"edge", "s", "--topic", "t"}, "--store DIR is required"},
		{[]string{"edge", "s", "--store", "/dev/shm"}, "--topic TOPIC is required"},
		{[]string{"edge", "s", "--store", "/dev/shm", "--topic", "Bad"}, "not a topic name"},
		{[]string{"edge", "s", "--store", "/dev/shm", "--topic", "t", "--topic", "t"}, "given twice"},
		{[]string{"edge", "s", "--store", "/dev/shm", "--topic", "t", "--listen", "unix:/tmp/x"}, "browsers do not dial Unix sockets"},
		{[]string{"edge", "s", "--store", "/dev/shm", "--topic", "t", "--listen", "x:y"}, "--listen"},
		{[]string{"edge", "s", "--store", "/dev/shm", "--topic", "t", "--allow-origin", "evil.example"}, "want scheme://host"},
		{[]string{"edge", "s", "--store", "/dev/shm", "--topic", "t", "--token-file", empty}, "first line is empty"},
		{[]string{"edge", "s", "--store", "/dev/shm", "--topic", "t", "--max-clients", "0"}, "--max-clients must be positive"},
		{[]string{"edge", "s", "--store", "/dev/shm", "--topic", "t", "--write-timeout", "5"}, "did you mean 5s?"},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), tc.want) ||
			!strings.HasSuffix(errb.String(), "see flybus edge --help\n") {
			t.Errorf("%q: exit %d, stderr %q, want %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

// The edge as an operator runs it: next to flybus serve, a browser-like
// WebSocket client gets a frame, the metrics count it, SIGTERM closes the
// socket with going away and exits 0, and --check says what it found.
func TestEdgeServesAndStops(t *testing.T) {
	dir, store := shortDir(t), filepath.Join(t.TempDir(), "store")
	sock := filepath.Join(dir, "bus.sock")
	serve := startFlybus(t, "serve", "--store", store, "--open", "--listen", sock, "--metrics", "127.0.0.1:0", "--log-format", "json")
	serve.ready(t)
	routerMetrics := serve.logValue(t, "metrics listening", "addr")
	pub, err := client.ConnectUnix(context.Background(), sock, client.Config{ClientID: "camera", StoreRoot: store})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if _, err := pub.DeclareTopic(context.Background(), "cam.frames", wire.RetainLatest); err != nil {
		t.Fatal(err)
	}

	e := startFlybus(t, "edge", sock, "--store", store, "--topic", "cam.frames", "--listen", "127.0.0.1:0",
		"--metrics", "127.0.0.1:0", "--router-metrics", routerMetrics, "--log-format", "json")
	line := e.waitOutput(t, e.stdout, "the ready line", func(s string) bool { return strings.Contains(s, "\n") })
	var ready struct {
		Ready   bool
		URL     string
		Metrics string
		Topics  []string
	}
	if err := json.Unmarshal([]byte(line), &ready); err != nil || !ready.Ready || len(ready.Topics) != 1 {
		t.Fatalf("ready line %q: %v", line, err)
	}

	resp, err := http.Get(ready.URL)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(page, []byte("viewer.js")) {
		t.Fatalf("GET %s: %s", ready.URL, resp.Status)
	}

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ready.URL, "http")+"ws", &websocket.DialOptions{Subprotocols: []string{edge.Subprotocol}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(8 << 20)
	send := func(s string) {
		if err := ws.Write(ctx, websocket.MessageText, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"op":"hello","version":1}`)
	send(`{"op":"subscribe","topics":{"cam.frames":["*"]}}`)
	// Once subscribed, publish; the edge may still be subscribing to the
	// bus, and a retained frame reaches it either way.
	for {
		_, msg, err := ws.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(msg, []byte(`"type":"subscribed"`)) {
			break
		}
	}
	frame := bytes.Repeat([]byte{1, 2, 3, 255}, 160*144)
	w, err := pub.Allocate(ctx, int64(len(frame)), "image/x-rgba; width=160; height=144")
	if err != nil {
		t.Fatal(err)
	}
	w.Write(frame)
	a, err := w.Seal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(ctx, "cam.frames", map[string]int{"n": 1}, client.Attach("frame", a)); err != nil {
		t.Fatal(err)
	}
	a.Close()
	for {
		typ, msg, err := ws.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if typ != websocket.MessageBinary {
			continue
		}
		h, err := edge.ParsePublication(msg)
		if err != nil {
			t.Fatal(err)
		}
		at := h.Attachments[0]
		if h.Sequence != 1 || sha256.Sum256(msg[at.Offset:at.Offset+at.Size]) != sha256.Sum256(frame) {
			t.Fatalf("publication %+v: other bytes", h)
		}
		break
	}

	resp, err = http.Get("http://" + ready.Metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"flybus_edge_clients 1", "flybus_edge_bus_connected 1", `flybus_edge_frames_sent_total{topic="cam.frames"} 1`,
		`flybus_edge_topic_subscribed{topic="cam.frames"} 1`, "flybus_edge_decode_failures_total 0"} {
		if !bytes.Contains(metrics, []byte(want+"\n")) {
			t.Errorf("metrics lack %q", want)
		}
	}

	e.signal(t, syscall.SIGTERM)
	for {
		_, _, err := ws.Read(ctx)
		if err == nil {
			continue
		}
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.StatusGoingAway {
			t.Fatalf("the socket ended with %v, want going away", err)
		}
		break
	}
	if code := e.wait(t); code != 0 {
		t.Fatalf("edge exit %d", code)
	}
	if !strings.Contains(e.stderr.String(), `"msg":"stopped"`) {
		t.Errorf("no stopped line in the log:\n%s", e.stderr)
	}

	out, errOut, code := runFlybus(t, "edge", sock, "--store", store, "--topic", "cam.frames", "--router-metrics", routerMetrics, "--check")
	if code != 0 || !strings.Contains(out, "cam.frames: subscribed\n") || !strings.Contains(out, "router metrics ") {
		t.Fatalf("--check: exit %d\n%s%s", code, out, errOut)
	}
	out, _, code = runFlybus(t, "edge", sock, "--store", store, "--topic", "not.declared", "--check")
	if code != 1 || !strings.Contains(out, "not.declared: ") {
		t.Fatalf("--check of a topic not declared: exit %d\n%s", code, out)
	}

	serve.signal(t, syscall.SIGTERM)
	if code := serve.wait(t); code != 0 {
		t.Fatalf("serve exit %d", code)
	}
}
