package bridge

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/leakcheck"
	"github.com/flybus/flybus/internal/shmtest"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// frameSize is one 640x480 RGBA frame.
const frameSize = 640 * 480 * 4

// deadline bounds every wait: a failure, never a pace.
const deadline = 30 * time.Second

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	t.Cleanup(cancel)
	return ctx
}

func quiet() *slog.Logger {
	if os.Getenv("BRIDGE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// host is one flybus router with its own store root and socket: one of
// the two machines a test stands in for.
type host struct {
	t    testing.TB
	name string
	root string
	sock string
	r    *router.Router
}

func newHost(t testing.TB, name string) *host {
	t.Helper()
	sockDir, err := os.MkdirTemp("", "fbb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	h := &host{t: t, name: name, root: shmtest.Dir(t, "flybus-bridge-"+name+"-"), sock: filepath.Join(sockDir, name+".sock")}
	h.start()
	t.Cleanup(func() { h.stop() })
	return h
}

func (h *host) start() {
	h.t.Helper()
	r, err := router.New(router.Config{Policy: router.OpenPolicy(), StoreRoot: h.root, Logger: quiet()})
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := r.ListenUnix(h.sock); err != nil {
		h.t.Fatal(err)
	}
	h.r = r
}

func (h *host) stop() {
	if h.r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.r.Shutdown(ctx); err != nil {
		h.t.Errorf("%s: shutdown: %v", h.name, err)
	}
	h.r = nil
}

// restart stops the router and starts a new one on the same socket and
// store root, as a crashed and restarted router process would be.
func (h *host) restart() {
	h.t.Helper()
	h.stop()
	h.start()
}

func (h *host) connect(id string) *client.Client {
	h.t.Helper()
	c, err := client.ConnectUnix(ctxT(h.t), h.sock, client.Config{ClientID: id, StoreRoot: h.root, Logger: quiet()})
	if err != nil {
		h.t.Fatalf("%s: connect %s: %v", h.name, id, err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

// assertEmpty checks that the router holds no artifact, root or owner.
func (h *host) assertEmpty(t testing.TB) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		s := h.r.Stats()
		if s.Artifacts == 0 && s.ArtifactRoots == 0 && s.Owners == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: left in the router: %d artifacts, %d roots, %d owners", h.name, s.Artifacts, s.ArtifactRoots, s.Owners)
		}
		time.Sleep(time.Millisecond)
	}
}

// natsHarness is an embedded NATS server with JetStream in a temporary
// directory, restartable on the same port and store.
type natsHarness struct {
	t          testing.TB
	dir        string
	port       int
	maxPayload int32
	maxStore   int64       // JetStream's file store limit (0: the server's default)
	tls        *tls.Config // set: clients must speak TLS (and show a certificate when it asks for one)
	s          *server.Server
}

func startNATS(t testing.TB, maxPayload int32) *natsHarness {
	t.Helper()
	n := &natsHarness{t: t, dir: t.TempDir(), port: -1, maxPayload: maxPayload}
	n.start()
	t.Cleanup(n.stop)
	return n
}

func (n *natsHarness) start() {
	n.t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: n.port, MaxPayload: n.maxPayload,
		JetStream: true, StoreDir: n.dir, JetStreamMaxStore: n.maxStore, NoLog: true, NoSigs: true,
		TLS: n.tls != nil, TLSConfig: n.tls, TLSVerify: n.tls != nil && n.tls.ClientAuth == tls.RequireAndVerifyClientCert,
		TLSTimeout: 5})
	if err != nil {
		n.t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		n.t.Fatal("nats server not ready")
	}
	n.s = s
	n.port = s.Addr().(*net.TCPAddr).Port // a restart takes the same port
}

func (n *natsHarness) stop() {
	if n.s == nil {
		return
	}
	n.s.Shutdown()
	n.s.WaitForShutdown()
	n.s = nil
}

func (n *natsHarness) restart() {
	n.t.Helper()
	n.stop()
	n.start()
}

func (n *natsHarness) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// running is a Bridge in its own goroutine.
type running struct {
	b        *Bridge
	cancel   context.CancelFunc
	done     chan error
	sessions chan client.Info
}

func startBridge(t testing.TB, cfg *Config, opts Options) *running {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	rb := &running{done: make(chan error, 1), sessions: make(chan client.Info, 16)}
	user := opts.OnLocalSession
	opts.OnLocalSession = func(info client.Info) {
		if user != nil {
			user(info)
		}
		rb.sessions <- info
	}
	b, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	rb.b = b
	ctx, cancel := context.WithCancel(context.Background())
	rb.cancel = cancel
	go func() { rb.done <- b.Run(ctx) }()
	t.Cleanup(rb.stop)
	rb.waitSession(t)
	return rb
}

func (rb *running) waitSession(t testing.TB) client.Info {
	t.Helper()
	select {
	case info := <-rb.sessions:
		return info
	case err := <-rb.done:
		t.Fatalf("bridge stopped: %v", err)
	case <-time.After(deadline):
		t.Fatal("no local session")
	}
	return client.Info{}
}

func (rb *running) stop() {
	if rb.cancel == nil {
		return
	}
	rb.cancel()
	rb.cancel = nil
	<-rb.done
}

// importPending is how many messages nats.go holds for rb's import of
// topic that the import's handler has not finished with.
func (rb *running) importPending(t testing.TB, topic string) int {
	t.Helper()
	rb.b.mu.Lock()
	imps := rb.b.importers
	rb.b.mu.Unlock()
	for _, im := range imps {
		if im.cfg.Topic == topic {
			n, _, err := im.sub.Pending()
			if err != nil {
				t.Fatalf("import %s: %v", topic, err)
			}
			return n
		}
	}
	t.Fatalf("no import of %s", topic)
	return 0
}

// waitFor polls cond until it holds; it fails the test after deadline.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// bridgeConfig is a bridge of host h to NATS.
func bridgeConfig(h *host, n *natsHarness, id string) *Config {
	return &Config{Origin: id, NATS: NATSConfig{URLs: []string{n.url()}, ReconnectWait: Duration(50 * time.Millisecond),
		Timeout: Duration(5 * time.Second)},
		Local: LocalConfig{Socket: h.sock, ClientID: id, StoreRoot: h.root}}
}

// fill makes the bytes of artifact name of frame seq, different for each.
func fill(seq uint64, name string, size int) []byte {
	b := make([]byte, size)
	var x [8]byte
	binary.LittleEndian.PutUint64(x[:], seq*2654435761+uint64(len(name)))
	for i := range b {
		b[i] = x[i%8] ^ byte(i>>8) ^ name[i%len(name)]
	}
	return b
}

// framePayload is what a test producer publishes: the sequence it chose
// and the digest of every artifact, which every consumer checks.
type framePayload struct {
	N      uint64            `json:"n"`
	Sums   map[string]string `json:"sums"`
	SentNS int64             `json:"sentNs,omitempty"`
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// publishFrame publishes frame n with artifacts of the given sizes,
// sealed with their digests.
func publishFrame(t testing.TB, c *client.Client, topic string, n uint64, sizes map[string]int) wire.RawJSON {
	t.Helper()
	ctx := ctxT(t)
	p := framePayload{N: n, Sums: map[string]string{}}
	var atts []client.Attachment
	for name, size := range sizes {
		data := fill(n, name, size)
		w, err := c.Allocate(ctx, int64(size), "application/x-"+name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
		a, err := w.Seal(ctx, client.Digest(sum(data)))
		if err != nil {
			t.Fatal(err)
		}
		p.Sums[name] = sum(data)
		atts = append(atts, client.Attach(name, a))
	}
	raw, err := jsonRaw(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, topic, raw, atts...); err != nil {
		t.Fatal(err)
	}
	for _, a := range atts {
		a.Artifact.Close()
	}
	return raw
}

// subscribe subscribes c to topic, failing the test on a refusal.
func subscribe(t testing.TB, c *client.Client, topic string, opts ...client.SubscribeOption) *client.Subscription {
	t.Helper()
	sub, err := c.Subscribe(ctxT(t), topic, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

// nextFrame takes the next message of sub, checks it (checkMessage),
// closes it and returns its frame number.
func nextFrame(t *testing.T, sub *client.Subscription) uint64 {
	t.Helper()
	m, err := sub.Next(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	return checkMessage(t, m)
}

// expectFrame is nextFrame, which must be frame want.
func expectFrame(t *testing.T, sub *client.Subscription, want uint64) {
	t.Helper()
	if got := nextFrame(t, sub); got != want {
		t.Fatalf("frame %d, want %d", got, want)
	}
}

// checkMessage verifies a received frame: every artifact the payload
// names is there with the digest and content type it was sent with, read
// through a mapping. It returns the frame's number.
func checkMessage(t testing.TB, m *client.Message) uint64 {
	t.Helper()
	var p framePayload
	if err := m.Decode(&p); err != nil {
		t.Fatal(err)
	}
	names := m.Attachments()
	if len(names) != len(p.Sums) {
		t.Fatalf("frame %d: attachments %v, payload names %d", p.N, names, len(p.Sums))
	}
	for _, name := range names {
		a, err := m.Artifact(name)
		if err != nil {
			t.Fatal(err)
		}
		if a.Ref().ContentType != "application/x-"+name {
			t.Fatalf("frame %d %s: content type %q", p.N, name, a.Ref().ContentType)
		}
		v, err := a.View(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if got := sum(v.Bytes()); got != p.Sums[name] {
			t.Fatalf("frame %d %s: digest %s, sent %s", p.N, name, got, p.Sums[name])
		}
		if !bytes.Equal(v.Bytes()[:min(64, len(v.Bytes()))], fill(p.N, name, len(v.Bytes()))[:min(64, len(v.Bytes()))]) {
			t.Fatalf("frame %d %s: bytes differ", p.N, name)
		}
		v.Close()
		a.Close()
	}
	return p.N
}

// leakBase records goroutines and descriptors before a test's servers
// start; check compares once everything is stopped.
type leakBase struct{ g, fd int }

func baseline() leakBase {
	fd, _ := leakcheck.FDs()
	return leakBase{leakcheck.Goroutines(), fd}
}

func (l leakBase) check(t testing.TB) {
	t.Helper()
	leakcheck.WaitGoroutines(t, l.g)
	end := time.Now().Add(5 * time.Second)
	for {
		fd, _ := leakcheck.FDs()
		if fd <= l.fd {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("descriptors: %d before, %d after", l.fd, fd)
		}
		time.Sleep(time.Millisecond)
	}
}

func jsonRaw(v any) (wire.RawJSON, error) {

	b, err := json.Marshal(v)
	return wire.RawJSON(b), err
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// crossesWith runs one frame from host a across NATS server n to host b,
// digests checked, through bridges whose NATS settings secure sets (TLS,
// credentials). It returns host a, for bridges expected to fail.
func crossesWith(t *testing.T, n *natsHarness, secure func(*NATSConfig)) *host {
	t.Helper()
	p := bridgePair(t, n, []ExportConfig{{Topic: "cam.frames", Subject: "site.cam", Mode: "bounded"}},
		[]ImportConfig{{Subject: "site.cam", Topic: "cam.frames"}}, Options{},
		func(ca, cb *Config) { secure(&ca.NATS); secure(&cb.NATS) })
	waitFor(t, "the import's topic", func() bool { return p.b.r.Stats().Topics == 1 })
	sub := subscribe(t, p.cons, "cam.frames", client.Bounded())
	publishFrame(t, p.prod, "cam.frames", 1, frameSizes)
	expectFrame(t, sub, 1)
	return p.a
}

// refusedWith starts a bridge of host a whose NATS settings secure sets,
// with no reconnects, and requires Run to end with the NATS connection's
// failure naming one of why.
func refusedWith(t *testing.T, a *host, n *natsHarness, secure func(*NATSConfig), why ...string) {
	t.Helper()
	c := bridgeConfig(a, n, "bridge-c")
	c.Exports = []ExportConfig{{Topic: "cam.frames", Subject: "site.other", Mode: "bounded"}}
	secure(&c.NATS)
	none := 0
	c.NATS.MaxReconnects = &none
	br, err := New(c, Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	err = br.Run(ctxT(t))
	said := false
	for _, w := range why {
		said = said || err != nil && strings.Contains(strings.ToLower(err.Error()), w)
	}
	if !said || !strings.HasPrefix(err.Error(), "nats:") {
		t.Errorf("Run returned %v, want the NATS connection's failure saying one of %q", err, why)
	}
}
