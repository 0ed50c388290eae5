package router_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/leakcheck"
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

// storeModes are the store backends every integration test runs over; a
// test that configures StoreMode itself runs in that mode only.
var storeModes = []store.Mode{store.ModeFiles, store.ModePool}

func forEachTransport(t *testing.T, cfg router.Config, fn func(t *testing.T, h *harness)) {
	modes := storeModes
	if cfg.StoreMode != store.ModeFiles {
		modes = []store.Mode{cfg.StoreMode}
	}
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
	{
		t.Run(name, func(t *testing.T) {
			base := leakcheck.Goroutines()
			fdBase, _ := leakcheck.FDs()
			h := newHarness(t, cfg, unix)
			// Registered first, so it runs last: after every client and
			// raw transport the test opened has been closed.
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := h.r.Shutdown(ctx); err != nil {
					t.Errorf("shutdown: %v", err)
				}
				leakcheck.WaitGoroutines(t, base)
				// A descriptor closed while another goroutine is blocked on
				// it is released when that call returns: wait for it.
				deadline := time.Now().Add(5 * time.Second)
				for {
					fds, _ := leakcheck.FDs()
					if fds <= fdBase {
						break
					}
					if time.Now().After(deadline) {
						t.Errorf("descriptors: %d before, %d after: %s", fdBase, fds, fdTargets())
						break
					}
					time.Sleep(time.Millisecond)
				}
				// Every client is closed by now: no mapping of the store,
				// cached or not, is left.
				if m, err := leakcheck.Mappings(h.root); err == nil && m != 0 {
					t.Errorf("%d mappings of the store left after every client closed", m)
				}
			})
			fn(t, h)
		})
	}
}

func newHarness(t *testing.T, cfg router.Config, unix bool) *harness {
	if cfg.StoreRoot == "" {
		cfg.StoreRoot = shmDir(t)
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

// shmDir is a store root on tmpfs when the machine has /dev/shm, as in
// production; the test removes it.
func shmDir(t *testing.T) string {
	base := ""
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		base = "/dev/shm"
	}
	dir, err := os.MkdirTemp(base, "flybus-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// code extracts a bus error code, failing the test when err is not one.
func code(t *testing.T, err error) wire.ErrorCode {
	t.Helper()
	var be *wire.BusError
	if !errors.As(err, &be) {
		t.Fatalf("want a *wire.BusError, got %v", err)
	}
	return be.Code
}

func dispatchOf(t *testing.T, err error) wire.Dispatch {
	t.Helper()
	var be *wire.BusError
	if !errors.As(err, &be) {
		t.Fatalf("want a *wire.BusError, got %v", err)
	}
	return be.Dispatch
}

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
