package router_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/wire"
)

// The zero Config names no policy: New says how to write one.
func TestNewRefusesAPolicyThatAdmitsNobody(t *testing.T) {
	for name, p := range map[string]router.Policy{"zero": {}, "closed, no clients": router.ClosedPolicy()} {
		_, err := router.New(router.Config{Policy: p})
		if err == nil || !strings.Contains(err.Error(), "router.OpenPolicy()") || !strings.Contains(err.Error(), "ClosedPolicy().Client") {
			t.Errorf("%s policy: %v", name, err)
		}
	}
}

// ConnectInMemory under a closed policy says what to call instead.
func TestConnectInMemoryUnderAClosedPolicySaysWhatToDo(t *testing.T) {
	r, err := router.New(router.Config{Policy: router.ClosedPolicy().Client("a", router.AllGrants())})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	if _, err := r.ConnectInMemory(); err == nil || !strings.Contains(err.Error(), "ConnectInMemoryAs") {
		t.Fatalf("ConnectInMemory under a closed policy: %v", err)
	}
}

// A router given no store root makes a private one on the runtime tmpfs;
// in-memory clients use it without being told, and Shutdown removes it.
func TestEmbeddedRouterHasAPrivateStore(t *testing.T) {
	r, err := router.New(router.Config{Policy: router.OpenPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	root := r.StoreRoot()
	if root == "" || filepath.Dir(r.StoreDir()) != root {
		t.Fatalf("store root %q, store dir %q", root, r.StoreDir())
	}
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() && filepath.Dir(root) != "/dev/shm" {
		t.Fatalf("private root %s is not on /dev/shm", root)
	}
	if fi, err := os.Stat(root); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("private root: %v %v", fi.Mode(), err)
	}
	ctx := ctxT(t)
	nc := inMemory(t, r)
	c, err := client.Connect(ctx, nc, client.Config{ClientID: "embedded"})
	if err != nil {
		t.Fatal(err)
	}
	data := frameBytes(9, 1000)
	a := produce(t, c, data)
	v := mustMap(t, ctx, a)
	if !bytes.Equal(v.Bytes(), data) {
		t.Fatal("viewed bytes differ")
	}
	v.Close()
	a.Close()

	// A socket client must be told, and the errors say how.
	sock := filepath.Join(t.TempDir(), "bus.sock")
	if _, err := r.ListenUnix(sock); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []client.Config{{ClientID: "untold"}, {ClientID: "misled", StoreRoot: t.TempDir()}} {
		u, err := client.ConnectUnix(ctx, sock, cfg)
		if cfg.StoreRoot != "" {
			// A wrong root is refused at connect: the hello names the store.
			if err == nil || !strings.Contains(err.Error(), "StoreRoot") || !strings.Contains(err.Error(), "--store") {
				t.Fatalf("%s: connect: %v, want a hint at StoreRoot", cfg.ClientID, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		_, err = u.Allocate(ctx, 10, "x")
		if cfg.StoreRoot == "" && !errors.Is(err, client.ErrNoStoreRoot) {
			t.Fatalf("no store root: %v", err)
		}
		if err == nil || !strings.Contains(err.Error(), "StoreRoot") || !strings.Contains(err.Error(), "--store") {
			t.Fatalf("%s: %v, want a hint at StoreRoot", cfg.ClientID, err)
		}
		u.Close()
	}
	c.Close()
	if err := r.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("private root left after shutdown: %v", err)
	}
}

// A connection that is not the router's in-memory pipe tells nothing.
func TestStoreRootIsOnlyLearnedFromTheRouter(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		var nc net.Conn = h.conn("")
		if !h.unix {
			nc = struct{ net.Conn }{nc} // hides the pipe's StoreRoot
		}
		c, err := client.Connect(ctxT(t), nc, client.Config{ClientID: "wrapped"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Allocate(ctxT(t), 10, "x"); !errors.Is(err, client.ErrNoStoreRoot) {
			t.Fatalf("allocate: %v", err)
		}
		mustDeclare(t, c, "still.up", wire.RetainNone)
	})
}
