package router_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/leakcheck"
	"github.com/flybus/flybus/internal/shmtest"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

// harness runs one router and dials it over one transport. Every
// integration test runs through forEachTransport, so the in-memory and the
// Unix-socket transports pass the same tests through the same router code.
type harness struct {
	t      *testing.T
	r      *router.Router
	unix   bool
	dir    string
	socket string            // unbound listener path (open policy only)
	bound  map[string]string // client id -> bound listener path
	root   string            // the router's store root
	mode   store.Mode        // the store's backend

	mu      sync.Mutex
	clients []*client.Client // SDK clients the harness made, for their cached mappings
}

// track records an SDK client whose cached slot mappings count as expected.
func (h *harness) track(c *client.Client) *client.Client {
	h.mu.Lock()
	h.clients = append(h.clients, c)
	h.mu.Unlock()
	return c
}

// cachedSlots is how many slot mappings the tracked clients keep (pool
// mode): mappings a test may find open that no view holds.
func (h *harness) cachedSlots() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.clients {
		n += c.Stats().CachedSlots
	}
	return n
}

// open is the configuration most tests use: a trusted deployment.
func open() router.Config { return router.Config{Policy: router.OpenPolicy()} }

// openWith is open with the limits l sets, and the defaults for those it
// leaves zero.
func openWith(l wire.Limits) router.Config {
	cfg := open()
	cfg.Limits = wire.DefaultLimits()
	set, limits := reflect.ValueOf(l), reflect.ValueOf(&cfg.Limits).Elem()
	for i := range set.NumField() {
		if f := set.Field(i); !f.IsZero() {
			limits.Field(i).Set(f)
		}
	}
	return cfg
}

// storeModes are the store backends every integration test runs over.
var storeModes = []store.Mode{store.ModeFiles, store.ModePool}

func forEachTransport(t *testing.T, cfg router.Config, fn func(t *testing.T, h *harness)) {
	forEachTransportIn(t, cfg, storeModes, fn)
}

// forEachTransportIn runs fn over both transports in each of modes; tests
// of one mode's own behaviour name it.
func forEachTransportIn(t *testing.T, cfg router.Config, modes []store.Mode, fn func(t *testing.T, h *harness)) {
	for _, mode := range modes {
		cfg := cfg
		cfg.StoreMode = mode
		for _, unix := range []bool{false, true} {
			name := "memory"
			if unix {
				name = "unix"
			}
			if mode != store.ModeFiles {
				name += "/" + mode.String()
			}
			forTransport(t, name, cfg, unix, fn)
		}
	}
}

func forTransport(t *testing.T, name string, cfg router.Config, unix bool, fn func(t *testing.T, h *harness)) {
	t.Run(name, func(t *testing.T) {
		fn(t, leakCheckedHarness(t, cfg, unix, 5*time.Second))
	})
}

// leakCheckedHarness is newHarness with a cleanup registered first, so that
// it runs last, after every client and raw transport the test opened has
// been closed: it shuts the router down and checks that nothing is left.
func leakCheckedHarness(t *testing.T, cfg router.Config, unix bool, fdWait time.Duration) *harness {
	base, fdBase := leakcheck.Goroutines(), shmtest.FDs(t)
	h := newHarness(t, cfg, unix)
	t.Cleanup(func() { h.shutdown(t, base, fdBase, fdWait) })
	return h
}

// shutdown shuts the router down and checks that no goroutine is left
// above base, no descriptor above fdBase and no mapping of the store,
// cached or not (every client is closed by then). A descriptor closed
// while another goroutine is blocked on it is released when that call
// returns: it waits up to fdWait for that.
func (h *harness) shutdown(t *testing.T, base, fdBase int, fdWait time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.r.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	leakcheck.WaitGoroutines(t, base)
	deadline := time.Now().Add(fdWait)
	for {
		fds := shmtest.FDs(t)
		if fds <= fdBase {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("descriptors: %d before, %d after: %s", fdBase, fds, fdTargets())
			break
		}
		time.Sleep(time.Millisecond)
	}
	if m := shmtest.Mappings(t, h.root); m != 0 {
		t.Errorf("%d mappings of the store left after every client closed", m)
	}
}

func newHarness(t *testing.T, cfg router.Config, unix bool) *harness {
	if cfg.StoreRoot == "" {
		cfg.StoreRoot = shmtest.Dir(t, "flybus-test-")
	}
	r, err := router.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, r: r, unix: unix, dir: t.TempDir(), bound: map[string]string{}, root: cfg.StoreRoot, mode: cfg.StoreMode}
	if unix && cfg.Policy.IsOpen() {
		h.socket = filepath.Join(h.dir, "open.sock")
		if _, err := r.ListenUnix(h.socket); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// conn returns a raw transport to the router, bound to id when id != "".
func (h *harness) conn(id string) net.Conn {
	h.t.Helper()
	if !h.unix {
		var nc net.Conn
		var err error
		if id == "" {
			nc, err = h.r.ConnectInMemory()
		} else {
			nc, err = h.r.ConnectInMemoryAs(id)
		}
		if err != nil {
			h.t.Fatal(err)
		}
		return nc
	}
	path := h.socket
	if id != "" {
		path = h.bound[id]
		if path == "" {
			path = filepath.Join(h.dir, id+".sock")
			if _, err := h.r.ListenUnixAs(path, id); err != nil {
				h.t.Fatal(err)
			}
			h.bound[id] = path
		}
	}
	nc, err := net.Dial("unix", path)
	if err != nil {
		h.t.Fatal(err)
	}
	return nc
}

// dial connects an SDK client over an unbound transport.
func (h *harness) dial(id string) *client.Client {
	h.t.Helper()
	c, err := client.Connect(ctxT(h.t), h.conn(""), client.Config{ClientID: id, StoreRoot: h.root})
	if err != nil {
		h.t.Fatalf("connect %s: %v", id, err)
	}
	h.t.Cleanup(func() { c.Close() })
	return h.track(c)
}

// fdTargets lists what this process's descriptors point at, for a leak
// report.
func fdTargets() string {
	ents, _ := os.ReadDir("/proc/self/fd")
	var out []string
	for _, e := range ents {
		if t, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil {
			out = append(out, e.Name()+"->"+t)
		}
	}
	return strings.Join(out, " ")
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// busError is the *wire.BusError in err, failing the test when there is
// none.
func busError(t *testing.T, err error) *wire.BusError {
	t.Helper()
	var be *wire.BusError
	if !errors.As(err, &be) {
		t.Fatalf("want a *wire.BusError, got %v", err)
	}
	return be
}

// code and dispatchOf extract a bus error's code and dispatch, failing the
// test when err is not one.
func code(t *testing.T, err error) wire.ErrorCode { t.Helper(); return busError(t, err).Code }

func dispatchOf(t *testing.T, err error) wire.Dispatch { t.Helper(); return busError(t, err).Dispatch }

// waitFor polls cond, yielding between checks, until it holds or the test's
// deadline passes. It is for router-internal effects that emit no frame
// (a credit returning), never a substitute for waiting on a reply.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// tapConn sits between an SDK client and its transport. It records the op
// of every frame the client writes, and can hold one Write until the test
// lets it go, so that the client's write token stays taken and everything
// else the client queues waits behind it.
type tapConn struct {
	net.Conn

	mu      sync.Mutex
	pending []byte   // written bytes not yet forming a whole frame
	ops     []string // op of every whole frame written, in order
	armed   bool
	entered chan struct{} // closed when the held Write has started
	gate    chan struct{} // closed to let the held Write through
	opened  bool
}

func newTap(nc net.Conn) *tapConn { return &tapConn{Conn: nc} }

// hold makes the next Write wait for release; the returned channel is
// closed once that Write has started.
func (c *tapConn) hold() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = true
	c.entered = make(chan struct{})
	c.gate = make(chan struct{})
	c.opened = false
	return c.entered
}

// release lets a held Write through. Idempotent.
func (c *tapConn) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = false
	if c.gate != nil && !c.opened {
		c.opened = true
		close(c.gate)
	}
}

func (c *tapConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	var gate chan struct{}
	if c.armed {
		c.armed = false
		gate = c.gate
		close(c.entered)
	}
	c.mu.Unlock()
	if gate != nil {
		<-gate
	}
	n, err := c.Conn.Write(p)
	c.record(p[:n])
	return n, err
}

func (c *tapConn) record(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending = append(c.pending, p...)
	for len(c.pending) >= 4 {
		n := int(binary.LittleEndian.Uint32(c.pending))
		if len(c.pending) < 4+n {
			break
		}
		c.ops = append(c.ops, opOf(c.pending[4:4+n]))
		c.pending = c.pending[4+n:]
	}
}

// Close lets a held Write go first, so the client's writer can stop.
func (c *tapConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// written returns how many whole frames the client has written.
func (c *tapConn) written() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ops)
}

// opsSince returns the ops of the frames written after the first n.
func (c *tapConn) opsSince(n int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.ops[n:]...)
}

// opOf reads the envelope's op: the first "op" key of the frame's JSON.
func opOf(frame []byte) string {
	const key = `"op":"`
	i := bytes.Index(frame, []byte(key))
	if i < 0 {
		return "?"
	}
	rest := frame[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return "?"
	}
	return string(rest[:j])
}

// dialTap connects an SDK client through a tapConn.
func (h *harness) dialTap(id string, cfg client.Config) (*client.Client, *tapConn) {
	h.t.Helper()
	tc := newTap(h.conn(""))
	cfg.ClientID, cfg.StoreRoot = id, h.root
	c, err := client.Connect(ctxT(h.t), tc, cfg)
	if err != nil {
		h.t.Fatalf("connect %s: %v", id, err)
	}
	h.t.Cleanup(func() { tc.release(); c.Close() })
	return c, tc
}

// blockWriter takes c's write token with a round trip whose Write is held
// by tc, and returns once that Write has started. The returned channel
// yields the round trip's outcome after tc.release.
func blockWriter(t *testing.T, c *client.Client, tc *tapConn) <-chan error {
	t.Helper()
	entered := tc.hold()
	done := make(chan error, 1)
	go func() {
		_, err := c.DeclareTopic(context.Background(), "test.held", wire.RetainNone)
		done <- err
	}()
	select {
	case <-entered:
	case <-ctxT(t).Done():
		t.Fatal("the held write never started")
	}
	return done
}

// rawAllocate allocates through a raw client and returns the grant.
func rawAllocate(t *testing.T, r *raw, n uint64) wire.AllocateOK {
	t.Helper()
	var a wire.AllocateOK
	rawOK(t, r, wire.OpArtifactAllocate, &wire.Allocate{ByteLength: n, ContentType: "x/y"}, &a)
	return a
}

// The helpers below run one SDK step whose error would end the test anyway,
// so that a scenario reads one line per step. Each takes the caller's
// context: a test with a longer deadline keeps it.

// orFatal returns v, failing the test when err is set.
func orFatal[T any](t *testing.T, v T, err error) T {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// step makes a test step of an SDK method that takes a context: it fails
// the test on an error.
func step[H, R any](method func(H, context.Context) (R, error)) func(*testing.T, context.Context, H) R {
	return func(t *testing.T, ctx context.Context, h H) R {
		t.Helper()
		r, err := method(h, ctx)
		return orFatal(t, r, err)
	}
}

// step2 is step for a method that takes two arguments after its context.
func step2[H, A, B, R any](method func(H, context.Context, A, B) (R, error)) func(*testing.T, context.Context, H, A, B) R {
	return func(t *testing.T, ctx context.Context, h H, a A, b B) R {
		t.Helper()
		r, err := method(h, ctx, a, b)
		return orFatal(t, r, err)
	}
}

var (
	nextMessage  = step((*client.Subscription).Next)
	nextRequest  = step((*client.Service).Next)
	mustResult   = step((*client.PendingCall).Result)
	mustMap      = step((*client.Artifact).View)
	mustAllocate = step2((*client.Client).Allocate)
)

func mustSubscribe(t *testing.T, ctx context.Context, c *client.Client, topic string, opts ...client.SubscribeOption) *client.Subscription {
	t.Helper()
	s, err := c.Subscribe(ctx, topic, opts...)
	return orFatal(t, s, err)
}

func mustRegister(t *testing.T, ctx context.Context, c *client.Client, name string, opts ...client.ServiceOption) *client.Service {
	t.Helper()
	s, err := c.Register(ctx, name, opts...)
	return orFatal(t, s, err)
}

func mustCall(t *testing.T, ctx context.Context, c *client.Client, target string, pin wire.ServiceInc, method string, payload any, atts ...client.CallOption) *client.PendingCall {
	t.Helper()
	p, err := c.Call(ctx, target, method, payload, append([]client.CallOption{client.Pin(pin)}, atts...)...)
	return orFatal(t, p, err)
}

// attached is what carries named attachments: a message, a request or a
// result.
type attached interface {
	Artifact(name string) (*client.Artifact, error)
}

func mustArtifact(t *testing.T, from attached, name string) *client.Artifact {
	t.Helper()
	a, err := from.Artifact(name)
	return orFatal(t, a, err)
}

// pubSub dials a publisher and a subscriber, declares topic and subscribes
// to it: where most publish/subscribe tests start.
func (h *harness) pubSub(pubID, subID, topic string, r wire.Retention, opts ...client.SubscribeOption) (pub, sub *client.Client, s *client.Subscription) {
	h.t.Helper()
	pub, sub = h.dial(pubID), h.dial(subID)
	return pub, sub, declareAndSubscribe(h.t, pub, sub, topic, r, opts...)
}

// declareAndSubscribe declares topic through pub and subscribes sub to it.
func declareAndSubscribe(t *testing.T, pub, sub *client.Client, topic string, r wire.Retention, opts ...client.SubscribeOption) *client.Subscription {
	t.Helper()
	mustDeclare(t, pub, topic, r)
	return mustSubscribe(t, ctxT(t), sub, topic, opts...)
}

// serviceAndCaller dials a service's client, registers name on it and
// dials a caller: where most SDK call tests start.
func (h *harness) serviceAndCaller(svcID, name string, opts ...client.ServiceOption) (svcClient, caller *client.Client, svc *client.Service) {
	h.t.Helper()
	svcClient, caller = h.dial(svcID), h.dial("caller")
	return svcClient, caller, mustRegister(h.t, ctxT(h.t), svcClient, name, opts...)
}

// openLocation opens a location the router granted with open
// (store.OpenRead or store.OpenWrite), as a client resolves it under its
// store root.
func openLocation(t *testing.T, h *harness, open func(root, storeID, relPath string) (*os.File, error), loc wire.Location) *os.File {
	t.Helper()
	f, err := open(h.root, loc.StoreID.String(), loc.RelativePath)
	return orFatal(t, f, err)
}

// writeLocation writes data into the staging file of a grant's write
// location, as a producer does before its seal.
func writeLocation(t *testing.T, h *harness, loc wire.Location, data []byte) {
	t.Helper()
	f := openLocation(t, h, store.OpenWrite, loc)
	defer f.Close()
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
}

// rawOK sends a command through a raw client and decodes its reply into
// reply, failing the test on a refusal.
func rawOK(t *testing.T, r *raw, op wire.Op, body, reply wire.Body) {
	t.Helper()
	r.command(op, body)
	if be := r.reply(reply); be != nil {
		t.Fatal(be)
	}
}

// openRouterOn starts an open router on the store root root, outside any
// harness; the caller shuts it down.
func openRouterOn(t *testing.T, root string) *router.Router {
	t.Helper()
	r, err := router.New(router.Config{Policy: router.OpenPolicy(), StoreRoot: root})
	return orFatal(t, r, err)
}

// inMemory connects an unbound in-memory transport to r.
func inMemory(t *testing.T, r *router.Router) net.Conn {
	t.Helper()
	nc, err := r.ConnectInMemory()
	return orFatal(t, nc, err)
}
