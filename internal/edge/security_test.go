package edge

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/flybus/flybus/internal/bustest"
	"github.com/flybus/flybus/wire"
)

// secured is an edge on an embedded router with one declared topic.
func secured(t *testing.T, cfg Config) *served {
	h := bustest.LeakChecked(t, bustest.Open(), false, 0)
	pub := h.Dial("camera")
	declare(t, pub, "cam.frames", wire.RetainLatest)
	cfg.Topics = []string{"cam.frames"}
	bus := &clients{}
	return serve(t, cfg, harnessDialer(h, "edge", bus), bus)
}

func TestOriginChecks(t *testing.T) {
	s := secured(t, Config{AllowedOrigins: []string{"https://app.example:8443"}})
	same := "http://" + strings.TrimPrefix(s.srv.URL, "http://")
	for _, tc := range []struct {
		origin string
		ok     bool
	}{
		{"", true}, // not a page: curl, a Go client
		{same, true},
		{strings.ToUpper(same[:4]) + same[4:], true},
		{"https://app.example:8443", true},
		{"https://APP.example:8443", true},
		{"https://app.example", false},
		{"http://evil.example", false},
		{"null", false},
		{"http://127.0.0.1:1", false},
	} {
		hd := http.Header{}
		if tc.origin != "" {
			hd.Set("Origin", tc.origin)
		}
		w, resp, err := dialWS(t, s.wsURL(), &websocket.DialOptions{HTTPHeader: hd})
		switch {
		case tc.ok && err != nil:
			t.Errorf("origin %q refused: %v", tc.origin, err)
		case !tc.ok && err == nil:
			t.Errorf("origin %q admitted", tc.origin)
		case !tc.ok && (resp == nil || resp.StatusCode != http.StatusForbidden):
			t.Errorf("origin %q: %v, want 403", tc.origin, resp)
		}
		if w != nil {
			w.c.CloseNow()
		}
	}
	if st := s.e.Stats(); st.RefusedOrigin != 4 {
		t.Errorf("refused %d origins, want 4", st.RefusedOrigin)
	}
}

func TestAnyOrigin(t *testing.T) {
	s := secured(t, Config{AllowedOrigins: []string{"*"}})
	w, _, err := dialWS(t, s.wsURL(), &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"http://anywhere.example"}}})
	if err != nil {
		t.Fatal(err)
	}
	w.c.CloseNow()
}

// On loopback the edge answers only to loopback host names, so a page
// whose name was rebound to 127.0.0.1 gets nothing.
func TestHostChecks(t *testing.T) {
	s := secured(t, Config{LoopbackHosts: true, AllowedHosts: []string{"cam.lan"}})
	_, port, _ := strings.Cut(strings.TrimPrefix(s.srv.URL, "http://"), ":")
	for host, ok := range map[string]bool{
		"127.0.0.1:" + port: true, "localhost:" + port: true, "[::1]:" + port: true, "LOCALHOST": true,
		"cam.lan:" + port: true, "rebound.example:" + port: false, "127.0.0.1.nip.io": false,
	} {
		for _, path := range []string{"/", "/viewer.js", WebSocketPath} {
			req, _ := http.NewRequest("GET", s.srv.URL+path, nil)
			req.Host = host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if forbidden := resp.StatusCode == http.StatusForbidden; forbidden == ok {
				t.Errorf("host %q %s: %s", host, path, resp.Status)
			}
		}
	}
}

func TestStaticFilesAndHeaders(t *testing.T) {
	s := secured(t, Config{})
	for path, want := range map[string]string{"/": "text/html", "/viewer.js": "text/javascript", "/viewer.css": "text/css"} {
		resp, err := http.Get(s.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), want) || len(body) == 0 {
			t.Errorf("%s: %s %q, %d bytes", path, resp.Status, resp.Header.Get("Content-Type"), len(body))
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") ||
			!strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("%s: CSP %q", path, csp)
		}
	}
	for path, code := range map[string]int{"/nothing": 404, "/static/viewer.js": 404, "/index.html": 404} {
		resp, err := http.Get(s.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != code && !(path == "/index.html" && resp.StatusCode == 301) {
			t.Errorf("%s: %s, want %d", path, resp.Status, code)
		}
	}
	resp, err := http.Post(s.srv.URL+"/", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %s", resp.Status)
	}
}

func TestToken(t *testing.T) {
	s := secured(t, Config{Token: "s3cret"})

	// In hello.
	s.connect("s3cret").subscribe(map[string][]string{"cam.frames": {}}, false)

	// In the upgrade's header.
	w, _, err := dialWS(t, s.wsURL(), &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer s3cret"}}})
	if err != nil {
		t.Fatal(err)
	}
	w.send(map[string]any{"op": "hello", "version": Version})
	w.notice("welcome")

	// A wrong header is refused before the upgrade.
	if _, resp, err := dialWS(t, s.wsURL(), &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer nope"}}}); err == nil || resp.StatusCode != 401 {
		t.Fatalf("wrong bearer: %v %v", err, resp)
	}
	// No token, or a wrong one, in hello: an error, then close 4001.
	for _, tok := range []string{"", "s3cre", "s3cret!"} {
		w, _, err := dialWS(t, s.wsURL(), nil)
		if err != nil {
			t.Fatal(err)
		}
		w.send(map[string]any{"op": "hello", "version": Version, "token": tok})
		if e := w.notice("error"); e["code"] != "UNAUTHORIZED" {
			t.Fatalf("token %q: %v", tok, e)
		}
		if ce := w.closed(); ce.Code != CloseUnauthorized {
			t.Fatalf("token %q: closed %v", tok, ce)
		}
	}
	if st := s.await("the refusals", func(st Stats) bool { return st.RefusedToken == 4 }); st.Clients != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestLimits(t *testing.T) {
	s := secured(t, Config{MaxClients: 3, HelloTimeout: 200 * time.Millisecond})

	// No hello in time.
	w, _, err := dialWS(t, s.wsURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if e := w.notice("error"); e["code"] != "NO_HELLO" {
		t.Fatalf("no hello: %v", e)
	}
	if ce := w.closed(); ce.Code != websocket.StatusPolicyViolation {
		t.Fatalf("no hello: closed %v", ce)
	}
	s.await("the socket gone", func(st Stats) bool { return st.Sockets == 0 })

	// Requests the edge refuses, each closing the socket.
	for _, tc := range []struct {
		name string
		typ  websocket.MessageType
		msg  string
		code websocket.StatusCode
	}{
		{"binary", websocket.MessageBinary, `{"op":"hello","version":1}`, websocket.StatusUnsupportedData},
		{"not JSON", websocket.MessageText, `{"op":`, websocket.StatusPolicyViolation},
		{"duplicate key", websocket.MessageText, `{"op":"hello","op":"hello","version":1}`, websocket.StatusPolicyViolation},
		{"unknown field", websocket.MessageText, `{"op":"hello","version":1,"x":1}`, websocket.StatusPolicyViolation},
		{"not hello first", websocket.MessageText, `{"op":"subscribe","topics":{}}`, websocket.StatusPolicyViolation},
		{"too big", websocket.MessageText, `{"op":"hello","version":1,"token":"` + strings.Repeat("x", MaxRequestBytes) + `"}`, websocket.StatusMessageTooBig},
	} {
		w, _, err := dialWS(t, s.wsURL(), nil)
		if err != nil {
			t.Fatal(err)
		}
		w.sendRaw(tc.typ, []byte(tc.msg))
		if ce := w.closed(); ce.Code != tc.code {
			t.Errorf("%s: closed %v, want %v", tc.name, ce, tc.code)
		}
	}

	// A second hello after a good one.
	w = s.connect("")
	w.send(map[string]any{"op": "hello", "version": Version})
	if ce := w.closed(); ce.Code != websocket.StatusPolicyViolation {
		t.Errorf("hello twice: closed %v", ce)
	}

	// Without the subprotocol.
	w, _, err = dialWS(t, s.wsURL(), &websocket.DialOptions{Subprotocols: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if ce := w.closed(); ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, Subprotocol) {
		t.Errorf("no subprotocol: closed %v", ce)
	}
	s.await("every refused socket gone", func(st Stats) bool { return st.Sockets == 0 })

	// Seats: three at most, those before hello included.
	var open []*ws
	for range 2 {
		open = append(open, s.connect(""))
	}
	pending, _, err := dialWS(t, s.wsURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, resp, err := dialWS(t, s.wsURL(), nil); err == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a fourth socket: %v %v", err, resp)
	}
	pending.send(map[string]any{"op": "hello", "version": Version})
	pending.notice("welcome")
	open[0].c.Close(websocket.StatusNormalClosure, "")
	s.await("a seat free", func(st Stats) bool { return st.Sockets == 2 })
	s.connect("")

	st := s.e.Stats()
	if st.RefusedFull != 1 || st.ProtocolErrors != 8 {
		t.Fatalf("stats %+v", st)
	}
}

// A browser that leaves a message unread past the write timeout is
// dropped, and the others go on.
func TestWriteTimeoutDrops(t *testing.T) {
	h := bustest.LeakChecked(t, bustest.Open(), true, 5*time.Second)
	pub := h.Dial("camera")
	declare(t, pub, "cam.frames", wire.RetainNone)
	bus := &clients{}
	s := serve(t, Config{Topics: []string{"cam.frames"}, WriteTimeout: 300 * time.Millisecond}, harnessDialer(h, "edge", bus), bus)
	s.await("the subscription", func(st Stats) bool { return st.Topic("cam.frames").Subscribed })
	fast, stuck := s.connect(""), s.connect("")
	fast.subscribe(map[string][]string{"cam.frames": {"*"}}, false)
	stuck.subscribe(map[string][]string{"cam.frames": {"*"}}, false)
	// Once a frame is skipped, the stuck browser's writer is blocked on a
	// full socket; the write timeout then drops it.
	for n := 1; s.e.Stats().FramesSkipped == 0; n++ {
		publishFrame(t, pub, "cam.frames", n, map[string]attachment{"frame": frame(byte(n))})
		if hd, _ := fast.publication(); hd.Sequence != uint64(n) {
			t.Fatalf("fast browser got #%d, want #%d", hd.Sequence, n)
		}
	}
	s.await("the stuck browser dropped", func(st Stats) bool { return st.SlowDrops == 1 && st.Clients == 1 })
	n := int(s.e.Stats().Publications) + 1
	publishFrame(t, pub, "cam.frames", n, map[string]attachment{"frame": frame(byte(n))})
	if hd, _ := fast.publication(); hd.Sequence != uint64(n) {
		t.Fatalf("after the drop the fast browser got #%d, want #%d", hd.Sequence, n)
	}
}
