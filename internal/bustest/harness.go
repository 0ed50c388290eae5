// Package bustest is test support for the tests that run a real router in
// their own process: the router's integration tests and the client's tests
// of SDK features. Its Harness runs one router and dials it over one
// transport, ForEachTransport runs a test over both transports (the
// in-memory pipe and a Unix socket) in both store modes with a leak check
// after each, and the helpers run one SDK step each, failing the test on an
// error. Only _test.go files import it (TestOnlyTestsImportIt checks that).
package bustest

import (
	"context"
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

// Harness runs one router and dials it over one transport. Every
// integration test runs through ForEachTransport, so the in-memory and the
// Unix-socket transports pass the same tests through the same router code.
type Harness struct {
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

// T is the test the harness was made for.
func (h *Harness) T() *testing.T { return h.t }

// Router is the harness's router.
func (h *Harness) Router() *router.Router { return h.r }

// Unix says whether the harness dials over Unix sockets (else in memory).
func (h *Harness) Unix() bool { return h.unix }

// Dir is the harness's own temporary directory, where its sockets live.
func (h *Harness) Dir() string { return h.dir }

// Socket is the path of the unbound Unix listener (Unix transport and open
// policy only; "" otherwise).
func (h *Harness) Socket() string { return h.socket }

// Root is the router's store root.
func (h *Harness) Root() string { return h.root }

// Mode is the router's store backend.
func (h *Harness) Mode() store.Mode { return h.mode }

// Track records an SDK client whose cached slot mappings count as expected.
func (h *Harness) Track(c *client.Client) *client.Client {
	h.mu.Lock()
	h.clients = append(h.clients, c)
	h.mu.Unlock()
	return c
}

// CachedSlots is how many slot mappings the tracked clients keep (pool
// mode): mappings a test may find open that no view holds.
func (h *Harness) CachedSlots() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.clients {
		n += c.Stats().CachedSlots
	}
	return n
}

// Open is the configuration most tests use: a trusted deployment.
func Open() router.Config { return router.Config{Policy: router.OpenPolicy()} }

// OpenWith is Open with the limits l sets, and the defaults for those it
// leaves zero.
func OpenWith(l wire.Limits) router.Config {
	cfg := Open()
	cfg.Limits = wire.DefaultLimits()
	set, limits := reflect.ValueOf(l), reflect.ValueOf(&cfg.Limits).Elem()
	for i := range set.NumField() {
		if f := set.Field(i); !f.IsZero() {
			limits.Field(i).Set(f)
		}
	}
	return cfg
}

// StoreModes are the store backends every integration test runs over.
var StoreModes = []store.Mode{store.ModeFiles, store.ModePool}

// ForEachTransport runs fn over both transports in every store mode, as
// subtests memory, unix, memory/pool and unix/pool, each on a leak-checked
// harness of its own.
func ForEachTransport(t *testing.T, cfg router.Config, fn func(t *testing.T, h *Harness)) {
	ForEachTransportIn(t, cfg, StoreModes, fn)
}

// ForEachTransportIn runs fn over both transports in each of modes; tests
// of one mode's own behaviour name it.
func ForEachTransportIn(t *testing.T, cfg router.Config, modes []store.Mode, fn func(t *testing.T, h *Harness)) {
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
			t.Run(name, func(t *testing.T) {
				fn(t, LeakChecked(t, cfg, unix, 5*time.Second))
			})
		}
	}
}

// LeakChecked is New with a cleanup registered first, so that it runs
// last, after every client and raw transport the test opened has been
// closed: it shuts the router down and checks that nothing is left.
func LeakChecked(t *testing.T, cfg router.Config, unix bool, fdWait time.Duration) *Harness {
	base, fdBase := leakcheck.Goroutines(), shmtest.FDs(t)
	h := New(t, cfg, unix)
	t.Cleanup(func() { h.shutdown(t, base, fdBase, fdWait) })
	return h
}

// shutdown shuts the router down and checks that no goroutine is left
// above base, no descriptor above fdBase and no mapping of the store,
// cached or not (every client is closed by then). A descriptor closed
// while another goroutine is blocked on it is released when that call
// returns: it waits up to fdWait for that.
func (h *Harness) shutdown(t *testing.T, base, fdBase int, fdWait time.Duration) {
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

// New starts a router with cfg (on a fresh store root when cfg names
// none) and returns a harness dialing it in memory, or over Unix sockets
// when unix is set. Nothing shuts the router down: LeakChecked does, or
// the caller.
func New(t *testing.T, cfg router.Config, unix bool) *Harness {
	if cfg.StoreRoot == "" {
		cfg.StoreRoot = shmtest.Dir(t, "flybus-test-")
	}
	r, err := router.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &Harness{t: t, r: r, unix: unix, dir: t.TempDir(), bound: map[string]string{}, root: cfg.StoreRoot, mode: cfg.StoreMode}
	if unix && cfg.Policy.IsOpen() {
		h.socket = filepath.Join(h.dir, "open.sock")
		if _, err := r.ListenUnix(h.socket); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// Conn returns a raw transport to the router, bound to id when id != "".
func (h *Harness) Conn(id string) net.Conn {
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

// Dial connects an SDK client over an unbound transport.
func (h *Harness) Dial(id string) *client.Client {
	h.t.Helper()
	return h.DialWith(id, client.Config{})
}

// DialWith connects an SDK client with cfg over an unbound transport.
func (h *Harness) DialWith(id string, cfg client.Config) *client.Client {
	h.t.Helper()
	return h.DialOn(h.Conn(""), id, cfg)
}

// DialOn connects an SDK client with cfg over nc, a transport to the
// harness's router (perhaps wrapped), as id on the harness's store root.
// The client is closed when the test ends.
func (h *Harness) DialOn(nc net.Conn, id string, cfg client.Config) *client.Client {
	h.t.Helper()
	cfg.ClientID, cfg.StoreRoot = id, h.root
	c, err := client.Connect(Ctx(h.t), nc, cfg)
	if err != nil {
		h.t.Fatalf("connect %s: %v", id, err)
	}
	h.t.Cleanup(func() { c.Close() })
	return h.Track(c)
}

// PubSub dials a publisher and a subscriber, declares topic and subscribes
// to it: where most publish/subscribe tests start.
func (h *Harness) PubSub(pubID, subID, topic string, r wire.Retention, opts ...client.SubscribeOption) (pub, sub *client.Client, s *client.Subscription) {
	h.t.Helper()
	pub, sub = h.Dial(pubID), h.Dial(subID)
	return pub, sub, DeclareAndSubscribe(h.t, pub, sub, topic, r, opts...)
}

// ServiceAndCaller dials a service's client, registers name on it and
// dials a caller: where most SDK call tests start.
func (h *Harness) ServiceAndCaller(svcID, name string, opts ...client.ServiceOption) (svcClient, caller *client.Client, svc *client.Service) {
	h.t.Helper()
	svcClient, caller = h.Dial(svcID), h.Dial("caller")
	return svcClient, caller, MustRegister(h.t, Ctx(h.t), svcClient, name, opts...)
}

// Settled says whether the router holds nothing now (Drained).
func (h *Harness) Settled() bool { return Drained(h.r.Stats()) }

// Drained says whether s shows a router holding nothing: no artifact,
// root, owner or store byte, and no store file left to unlink. A
// condition for Await.
func Drained(s router.Stats) bool {
	// StoreFiles falls only once a collected file's unlink has run,
	// which is after the step that dropped its last root.
	return s.Artifacts == 0 && s.ArtifactRoots == 0 && s.Owners == 0 && s.StoreBytes == 0 && s.StoreFiles == 0
}

// Await waits, on the router's own announcements of change (Router.Await),
// until cond holds for its Stats; it fails the test after 10 s, saying
// what it waited for.
func (h *Harness) Await(what string, cond func(router.Stats) bool) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s, err := h.r.Await(ctx, cond); err != nil {
		h.t.Fatalf("timed out waiting for %s; stats %+v", what, s)
	}
}

// SealedFiles counts sealed artifact files in the router's store directory
// (the staging pool's prepared files are not artifacts): in pool mode the
// slots holding a sealed generation, which are the 0444 ones.
func (h *Harness) SealedFiles(t *testing.T) int {
	t.Helper()
	return len(h.SealedPaths(t))
}

// SealedPaths lists the files SealedFiles counts.
func (h *Harness) SealedPaths(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(h.r.StoreDir())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		name := e.Name()
		sealed := strings.HasPrefix(name, "sealed-") || strings.HasPrefix(name, "copy-")
		if strings.HasPrefix(name, "slot-") {
			if fi, err := e.Info(); err == nil && fi.Mode().Perm() == 0o444 {
				sealed = true
			}
		}
		if sealed {
			out = append(out, filepath.Join(h.r.StoreDir(), name))
		}
	}
	return out
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
