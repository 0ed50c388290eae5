package edge

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/bustest"
	"github.com/flybus/flybus/internal/leakcheck"
	"github.com/flybus/flybus/internal/shmtest"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/store"
	"github.com/flybus/flybus/wire"
)

// When the router goes away the edge tells its browsers the feed is down,
// keeps them, and once a router answers again (a new one, on the same
// socket and store root) follows the topics anew: the browsers get frames
// again without reconnecting.
func TestFeedDownAndBack(t *testing.T) {
	for _, mode := range bustest.StoreModes {
		for _, unix := range []bool{false, true} {
			name := "memory"
			if unix {
				name = "unix"
			}
			t.Run(name+"/"+mode.String(), func(t *testing.T) { feedDownAndBack(t, mode, unix) })
		}
	}
}

func feedDownAndBack(t *testing.T, mode store.Mode, unix bool) {
	base, fds := leakcheck.Goroutines(), shmtest.FDs(t)
	root := shmtest.Dir(t, "flybus-edge-")
	socket := filepath.Join(t.TempDir(), "bus.sock")
	var cur atomic.Pointer[router.Router]
	start := func() *router.Router {
		r, err := router.New(router.Config{Policy: router.OpenPolicy(), StoreRoot: root, StoreMode: mode})
		if err != nil {
			t.Fatal(err)
		}
		if unix {
			if _, err := r.ListenUnix(socket); err != nil {
				t.Fatal(err)
			}
		}
		cur.Store(r)
		return r
	}
	stop := func(r *router.Router) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}
	publisher := func(r *router.Router) *client.Client {
		nc, err := r.ConnectInMemory()
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.Connect(bustest.Ctx(t), nc, client.Config{ClientID: "camera"})
		if err != nil {
			t.Fatal(err)
		}
		declare(t, c, "cam.frames", wire.RetainLatest)
		return c
	}
	t.Cleanup(func() {
		// After the edge's own cleanup (registered later, run first).
		leakcheck.WaitGoroutines(t, base)
		bustest.WaitFor(t, "descriptors back to their count", func() bool { return shmtest.FDs(t) <= fds })
		if m := shmtest.Mappings(t, root); m != 0 {
			t.Errorf("%d mappings of the store left", m)
		}
	})

	r1 := start()
	pub := publisher(r1)
	bus := &clients{}
	s := serve(t, Config{Topics: []string{"cam.frames"}},
		routerDialer(cur.Load, func() bool { return unix }, socket, root, "edge", bus), bus)
	b := s.connect("")
	b.subscribe(map[string][]string{"cam.frames": {"*"}}, false)
	publishFrame(t, pub, "cam.frames", 1, map[string]attachment{"frame": frame(1)})
	hd, msg := b.publication()
	checkAttachments(t, hd, msg)

	pub.Close()
	cur.Store(nil)
	stop(r1)
	down := b.noticeWhere("status", func(m map[string]any) bool { return m["bus"] == "down" })
	if down["reason"] == "" {
		t.Fatalf("feed down without a reason: %v", down)
	}
	st := s.await("the loss counted", func(st Stats) bool { return !st.BusConnected && st.BusLost == 1 })
	if st.Held != 0 {
		t.Fatalf("%d publications of the lost connection still held", st.Held)
	}

	r2 := start()
	defer stop(r2)
	b.noticeWhere("status", func(m map[string]any) bool { return m["bus"] == "up" })
	// The new router has no topic yet: the edge waits for it.
	pub = publisher(r2)
	defer pub.Close()
	s.await("the topic followed again", func(st Stats) bool { return st.Topic("cam.frames").Subscribed })
	publishFrame(t, pub, "cam.frames", 2, map[string]attachment{"frame": frame(2)})
	hd, msg = b.publication()
	if hd.Sequence != 1 || hd.Skipped != 0 {
		t.Fatalf("after the restart: %+v", hd)
	}
	checkAttachments(t, hd, msg)
	if st := s.e.Stats(); st.BusLost != 1 || st.DecodeFailures != 0 {
		t.Fatalf("stats %+v", st)
	}
}
