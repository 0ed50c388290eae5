package router_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/bustest"
	"github.com/flybus/flybus/internal/leakcheck"
	"github.com/flybus/flybus/internal/shmtest"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

// A router restart in process, over each transport: every old handle fails
// with ROUTER_LOST on its dead connection, an old reference presented to the
// new router is ARTIFACT_GONE, nothing of the old routes or topics
// survives, and the new router owns the only store directory under the root.
func TestFaultRouterRestart(t *testing.T) {
	forEachTransport(t, open(), func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		maps0 := storeMaps(t, h)
		c := h.dialWithTopic("rs-old", "fault.restart", wire.RetainLatest)
		data := frameBytes(70, 64_000)
		a := produce(t, c, data)
		if _, err := c.Publish(ctx, "fault.restart", tick{N: 1}, client.Attach("frame", a)); err != nil {
			t.Fatal(err)
		}
		s := mustSubscribe(t, ctx, c, "fault.restart", client.Replay())
		m, _ := next(t, s)
		v := mustView(t, a, data)
		svc := mustRegister(t, ctx, c, "fault.restart.svc")
		oldRef := a.Ref()
		if err := h.r.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		<-c.Done()
		checks := []struct {
			what string
			err  error
		}{
			{"read", func() error { _, err := a.ReadAll(ctx); return err }()},
			{"retain", func() error { _, err := a.Retain(ctx); return err }()},
			{"publish", func() error { _, err := c.Publish(ctx, "fault.restart", nil); return err }()},
			{"call", func() error {
				_, err := c.Call(ctx, "fault.restart.svc", "M", nil, client.Pin(svc.Incarnation()))
				return err
			}()},
			{"allocate", func() error { _, err := c.Allocate(ctx, 10, "x/y"); return err }()},
			{"subscribe", func() error { _, err := c.Subscribe(ctx, "fault.restart"); return err }()},
		}
		for _, ch := range checks {
			if code(t, ch.err) != wire.ErrRouterLost {
				t.Fatalf("%s on the dead connection: %v", ch.what, ch.err)
			}
		}
		if !bytes.Equal(v.Bytes(), data) {
			t.Fatal("mapped bytes changed across the restart")
		}
		v.Close()
		m.Close()
		a.Close()
		svc.Close()

		r2 := openRouterOn(t, h.root)
		defer r2.Shutdown(context.Background())
		if r2.StoreID() == oldRef.StoreID || r2.RouterID() == h.r.RouterID() {
			t.Fatal("the new router reused the old incarnation")
		}
		var nc net.Conn
		if h.unix {
			sock := filepath.Join(h.dir, "restarted.sock")
			if _, err := r2.ListenUnix(sock); err != nil {
				t.Fatal(err)
			}
			var err error
			if nc, err = net.Dial("unix", sock); err != nil {
				t.Fatal(err)
			}
		} else {
			nc = inMemory(t, r2)
		}
		rp := newRaw(t, nc)
		rp.hello("rs-new")
		rp.command(wire.OpArtifactOpen, &wire.RefOwner{Ref: oldRef, OwnerID: wire.HoldOwner(1)})
		if be := rp.reply(&wire.OpenOK{}); be == nil || be.Code != wire.ErrArtifactGone {
			t.Fatalf("an old reference on the new router: %v", be)
		}
		rp.command(wire.OpSubscribe, &wire.Subscribe{Topic: "fault.restart", Mode: wire.ModeLatest, MaxQueued: 1, MaxInFlight: 1})
		if be := rp.reply(&wire.SubscribeOK{}); be == nil || be.Code != wire.ErrNoTopic {
			t.Fatalf("the old topic on the new router: %v", be)
		}
		rp.command(wire.OpRPCCall, callBody(1, "fault.restart.svc", "{}"))
		if be := rp.reply(&wire.CallOK{}); be == nil || be.Code != wire.ErrNoService {
			t.Fatalf("the old service on the new router: %v", be)
		}
		ents, err := os.ReadDir(h.root)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 1 || ents[0].Name() != r2.StoreID().String() {
			t.Fatalf("store root after the restart: %v", ents)
		}
		wantStoreMaps(t, h, "after the restart", maps0)
	})
}

// A crashed router process: `flybus serve` is killed with SIGKILL while a
// client holds and maps an artifact. The client's handles fail with
// ROUTER_LOST, the dead store directory stays until the next router.New on
// the same root removes it (its lock is free), a live router's directory
// next to it is never touched, bytes still mapped from the dead store do
// not change, not even when later artifacts of the same size are made on
// the routers that follow, and the dead router's references are
// ARTIFACT_GONE. In both store modes.
func TestFaultRouterCrashLeavesAnOrphanStore(t *testing.T) {
	bin := bustest.FlybusBinary(t)
	for _, mode := range storeModes {
		t.Run(mode.String(), func(t *testing.T) { routerCrash(t, bin, mode) })
	}
}

func routerCrash(t *testing.T, bin string, mode store.Mode) {
	base := leakcheck.Goroutines()
	fdBase := shmtest.FDs(t)
	// Registered first, so it runs after every other cleanup.
	t.Cleanup(func() {
		leakcheck.WaitGoroutines(t, base)
		waitFor(t, "descriptors to close", func() bool { return shmtest.FDs(t) <= fdBase })
	})
	tmp := t.TempDir()
	root := shmtest.Dir(t, "flybus-test-")
	maps0 := shmtest.Mappings(t, root)
	ctx := ctxT(t)

	// A live in-process router on the same root, with an artifact of its own.
	live := openRouterOn(t, root)
	defer live.Shutdown(context.Background())
	liveNC := inMemory(t, live)
	liveC, err := client.Connect(ctx, liveNC, client.Config{ClientID: "crash-live", StoreRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	defer liveC.Close()
	liveData := frameBytes(80, 50_000)
	liveArt := produce(t, liveC, liveData)

	sock := filepath.Join(tmp, "crash.sock")
	child, deadStore := bustest.Serve(t, bin, root, sock, "--store-mode", mode.String())
	c, err := client.ConnectUnix(ctx, sock, client.Config{ClientID: "crash-victim", StoreRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	data := frameBytes(81, frameSize)
	a := produce(t, c, data)
	if a.Ref().StoreID.String() != deadStore {
		t.Fatalf("artifact of store %s, the child's is %s", a.Ref().StoreID, deadStore)
	}
	v := mustView(t, a, data)
	deadDir := filepath.Join(root, deadStore)

	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = child.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("flybus serve did not die by SIGKILL: %v", err)
	}
	<-c.Done()
	if _, err := a.ReadAll(ctx); code(t, err) != wire.ErrRouterLost {
		t.Fatalf("an artifact of the crashed router: %v", err)
	}
	if _, err := c.Allocate(ctx, 1, "x/y"); code(t, err) != wire.ErrRouterLost {
		t.Fatalf("allocate on the dead connection: %v", err)
	}
	if _, err := os.Stat(deadDir); err != nil {
		t.Fatalf("the crashed router's store should still be there: %v", err)
	}

	next := openRouterOn(t, root)
	defer next.Shutdown(context.Background())
	if _, err := os.Stat(deadDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the crashed router's store was not removed: %v", err)
	}
	if _, err := os.Stat(live.StoreDir()); err != nil {
		t.Fatalf("the live router's store was touched: %v", err)
	}
	mustRead(t, liveArt, liveData)
	if !bytes.Equal(v.Bytes(), data) {
		t.Fatal("bytes mapped from the crashed router's store changed when it was removed")
	}
	nextC, err := client.Connect(ctx, inMemory(t, next), client.Config{ClientID: "crash-next"})
	if err != nil {
		t.Fatal(err)
	}
	churn(t, nextC, frameSize, 3)
	churn(t, liveC, frameSize, 3)
	nextC.Close()
	if !bytes.Equal(v.Bytes(), data) {
		t.Fatal("bytes mapped from the crashed router's store changed when new artifacts were made")
	}
	if ents, err := os.ReadDir(root); err != nil || len(ents) != 2 {
		t.Fatalf("store root holds %d entries, want the live and the new store (%v)", len(ents), err)
	}
	nc := inMemory(t, next)
	rp := newRaw(t, nc)
	rp.hello("crash-after")
	rp.command(wire.OpArtifactOpen, &wire.RefOwner{Ref: a.Ref(), OwnerID: wire.HoldOwner(1)})
	if be := rp.reply(&wire.OpenOK{}); be == nil || be.Code != wire.ErrArtifactGone {
		t.Fatalf("a crashed router's reference on the new router: %v", be)
	}
	v.Close()
	a.Close()
	c.Close()
	liveArt.Close()
	liveC.Close()
	nc.Close()
	for _, r := range []*router.Router{live, next} {
		if err := r.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if ents, err := os.ReadDir(root); err != nil || len(ents) != 0 {
		t.Fatalf("store root not empty after both routers stopped: %v %v", ents, err)
	}
	if m := shmtest.Mappings(t, root); m != maps0 {
		t.Fatalf("mappings: %d, want %d", m, maps0)
	}
}
