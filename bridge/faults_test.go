package bridge

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/internal/leakcheck"
)

// producer publishes numbered frames to topic until stopped, each after
// the previous one was admitted (the tick paces it; it orders nothing).
type producer struct {
	last atomic.Uint64
	stop chan struct{}
	wg   sync.WaitGroup
}

func startProducer(t *testing.T, c *client.Client, topic string, from uint64) *producer {
	p := &producer{stop: make(chan struct{})}
	p.last.Store(from - 1)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for n := from; ; n++ {
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
			publishFrame(t, c, topic, n, map[string]int{"frame": frameSize})
			p.last.Store(n)
		}
	}()
	t.Cleanup(p.halt)
	return p
}

func (p *producer) halt() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.wg.Wait()
}

// receiveUntil reads frames (checking each) until one numbered above n.
func receiveUntil(t *testing.T, sub *client.Subscription, n uint64) uint64 {
	t.Helper()
	var last uint64
	for {
		k := nextFrame(t, sub)
		if k <= last {
			t.Fatalf("frame %d after %d", k, last)
		}
		last = k
		if k > n {
			return k
		}
	}
}

// importModes runs a test once per import mode.
func importModes(t *testing.T, fn func(t *testing.T, mode string)) {
	for _, mode := range []string{"bounded", "latest"} {
		t.Run("import="+mode, func(t *testing.T) { fn(t, mode) })
	}
}

// A NATS server restarted mid-stream: both bridges reconnect, the stream
// resumes with the next frame, and no frame is ever published in part.
func TestNATSRestartMidStream(t *testing.T) { importModes(t, natsRestartMidStream) }

func natsRestartMidStream(t *testing.T, mode string) {
	p := newPair(t, 64<<10, []ExportConfig{{Topic: "cam.frames", Subject: "site.cam", Mode: "latest"}},
		[]ImportConfig{{Subject: "site.cam", Topic: "cam.frames", Mode: mode}}, Options{})
	sub := subscribe(t, p.cons, "cam.frames")
	prod := startProducer(t, p.prod, "cam.frames", 1)
	receiveUntil(t, sub, 3)
	p.n.restart()
	at := prod.last.Load()
	waitFor(t, "both bridges to reconnect", func() bool {
		return p.ba.b.Stats().NATSReconnects >= 1 && p.bb.b.Stats().NATSReconnects >= 1
	})
	got := receiveUntil(t, sub, at)
	prod.halt()
	e, im := p.ba.b.Stats().Exports["cam.frames"], p.bb.b.Stats().Imports["cam.frames"]
	t.Logf("restart after frame %d; received %d; export %+v; import %+v", at, got, e, im)
	if im.DroppedCorrupt != 0 {
		t.Fatalf("import: %+v", im)
	}
}

// The local router restarts on either side: the bridge reconnects with a
// new incarnation and frames flow again.
func TestLocalRouterRestart(t *testing.T) { importModes(t, localRouterRestart) }

func localRouterRestart(t *testing.T, mode string) {
	p := newPair(t, 64<<10, []ExportConfig{{Topic: "cam.frames", Subject: "site.cam", Mode: "bounded"}},
		[]ImportConfig{{Subject: "site.cam", Topic: "cam.frames", Mode: mode}}, Options{})
	sub := subscribe(t, p.cons, "cam.frames", client.Bounded())
	publishFrame(t, p.prod, "cam.frames", 1, frameSizes)
	receiveUntil(t, sub, 0)

	// The exporting side.
	before := p.ba.b.Stats().LocalSessions
	p.a.restart()
	prod := p.a.connect("producer")
	if _, err := prod.DeclareTopic(ctxT(t), "cam.frames", 1); err != nil {
		t.Fatal(err)
	}
	info := p.ba.waitSession(t)
	if p.ba.b.Stats().LocalSessions != before+1 || info.RouterID != p.a.r.RouterID() {
		t.Fatalf("sessions %d", p.ba.b.Stats().LocalSessions)
	}
	publishFrame(t, prod, "cam.frames", 2, frameSizes)
	receiveUntil(t, sub, 1)

	// The importing side.
	p.b.restart()
	p.bb.waitSession(t)
	cons := p.b.connect("consumer")
	sub = subscribe(t, cons, "cam.frames", client.Bounded())
	publishFrame(t, prod, "cam.frames", 3, frameSizes)
	receiveUntil(t, sub, 2)
}

// Reconnects take a new incarnation each time.
func TestLocalReconnectTakesANewIncarnation(t *testing.T) {
	n := startNATS(t, 1<<20)
	a := newHost(t, "a")
	ca := bridgeConfig(a, n, "bridge-a")
	ca.Imports = []ImportConfig{{Subject: "x", Topic: "x"}}
	rb := startBridge(t, ca, Options{})
	first := a.r.RouterID()
	incs := map[string]bool{}
	for range 2 {
		a.restart()
		info := rb.waitSession(t)
		if info.RouterID == first || incs[info.Identity.ClientIncarnation] {
			t.Fatalf("session %+v", info)
		}
		incs[info.Identity.ClientIncarnation] = true
	}
}

// heldImport bridges cam.frames from a bounded export through an import
// configured as im (its subject and topic filled in) whose first frame is
// held before it is written locally until release; frames 2 to 1+more are
// published meanwhile.
func heldImport(t *testing.T, im ImportConfig, more uint64) (p *pair, sub *client.Subscription, release func()) {
	t.Helper()
	gate, held := make(chan struct{}), make(chan struct{})
	var holdOnce, releaseOnce sync.Once
	im.Subject, im.Topic = "site.cam", "cam.frames"
	p = newPair(t, 64<<10, []ExportConfig{{Topic: "cam.frames", Subject: "site.cam", Mode: "bounded"}},
		[]ImportConfig{im}, Options{BeforeImportPublish: func(string) {
			holdOnce.Do(func() { close(held); <-gate })
		}})
	release = func() { releaseOnce.Do(func() { close(gate) }) }
	t.Cleanup(release) // a test that fails first still lets the bridge stop
	sub = subscribe(t, p.cons, "cam.frames", client.Bounded())
	publishFrame(t, p.prod, "cam.frames", 1, frameSizes)
	select {
	case <-held:
	case <-ctxT(t).Done():
		t.Fatal("the import never came to write its first frame")
	}
	for i := uint64(2); i <= 1+more; i++ {
		publishFrame(t, p.prod, "cam.frames", i, frameSizes)
	}
	return p, sub, release
}

// A slow importer does not slow the exporter: NATS drops what the import
// cannot hold (counted), the frames it lost parts of are dropped whole,
// and once it has caught up it carries on with complete frames.
func TestSlowImporter(t *testing.T) {
	const more = 8
	p, sub, release := heldImport(t, ImportConfig{PendingBytes: 3 << 20}, more)
	waitFor(t, "the exporter to send everything while the importer is stuck", func() bool {
		return p.ba.b.Stats().Exports["cam.frames"].Sent == 1+more
	})
	waitFor(t, "every message to reach the importing bridge's connection", func() bool {
		return p.bb.b.nc.Stats().InMsgs >= p.ba.b.Stats().Exports["cam.frames"].Messages
	})
	release()
	// The import's NATS queue is still full (3 MiB of frames 2 to 4) until
	// its handler has worked through it. Frame 100 published now would
	// race the handler, and reaching the connection first (a handler
	// starved for some tens of milliseconds under load) it would be
	// dropped by nats.go like frames 5 to 9, and never come. Once the
	// queue is empty it holds frame 100 whole, however slow the handler.
	waitFor(t, "the import to take every message NATS held for it", func() bool {
		return p.bb.importPending(t, "cam.frames") == 0
	})
	publishFrame(t, p.prod, "cam.frames", 100, frameSizes)
	got := receiveUntil(t, sub, 99)
	if got != 100 {
		t.Fatalf("last %d", got)
	}
	im := p.bb.b.Stats().Imports["cam.frames"]
	t.Logf("import %+v", im)
	if im.NATSDropped == 0 || im.DroppedMissing == 0 || im.DroppedCorrupt != 0 {
		t.Fatalf("import: %+v", im)
	}
}

// A latest import does not wait on a slow local side: while its writer is
// held at the first frame, the handler goes on assembling the next eight
// as they come (a bounded import's handler is held with the writes, and
// NATS queues for it), each replaces the one before it, and once the
// writer is free it writes the newest: the consumer sees 1, 9 and 100.
func TestLatestImportSkipsWhatASlowLocalSideMissed(t *testing.T) {
	const more = 8
	p, sub, release := heldImport(t, ImportConfig{Mode: "latest"}, more)
	imports := func() ImportStats { return p.bb.b.Stats().Imports["cam.frames"] }
	// Frame 9 completing replaces frame 8, the seventh to be replaced.
	waitFor(t, "the import to assemble every frame while its writer is held", func() bool {
		return imports().Coalesced == more-1
	})
	release()
	// Frame 100 goes once the writer has taken frame 9, so it cannot
	// replace it.
	waitFor(t, "the writer to publish frames 1 and 9", func() bool { return imports().Admitted == 2 })
	publishFrame(t, p.prod, "cam.frames", 100, frameSizes)
	var got []uint64
	for len(got) == 0 || got[len(got)-1] != 100 {
		got = append(got, nextFrame(t, sub))
	}
	if !slices.Equal(got, []uint64{1, 1 + more, 100}) {
		t.Fatalf("the consumer saw frames %v, want 1, %d and 100", got, 1+more)
	}
	waitFor(t, "the last publish to be counted", func() bool { return imports().Admitted == 3 })
	im := imports()
	t.Logf("import %+v", im)
	if im.Received != 3 || im.Coalesced != more-1 || im.NATSDropped != 0 || im.DroppedMissing != 0 ||
		im.DroppedCorrupt != 0 || im.DroppedLocal != 0 {
		t.Fatalf("import: %+v", im)
	}
}

// A stopped bridge leaves nothing behind: no artifact, root or owner in
// either router, no file in either store once the routers stop, and no
// goroutine (a latest import's writer included) or descriptor over the
// test's baseline.
func TestStoppedBridgeLeavesNothing(t *testing.T) { importModes(t, stoppedBridgeLeavesNothing) }

func stoppedBridgeLeavesNothing(t *testing.T, mode string) {
	base := baseline()
	func() {
		p := newPair(t, 64<<10, []ExportConfig{{Topic: "cam.frames", Subject: "site.cam", Mode: "bounded",
			Stream: &StreamConfig{Name: "CAM", Storage: "memory"}}},
			[]ImportConfig{{Subject: "site.cam", Topic: "cam.frames", Mode: mode}}, Options{})
		sub := subscribe(t, p.cons, "cam.frames", client.Bounded())
		for i := uint64(1); i <= 3; i++ {
			publishFrame(t, p.prod, "cam.frames", i, frameSizes)
		}
		receiveUntil(t, sub, 2)
		// A frame half-way through an import when the bridges stop.
		f := rawFrame(t, "peer", "site.cam", 9, frameSize, 60<<10)
		for _, m := range f[:3] {
			if err := p.ba.b.nc.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
		}
		p.ba.b.nc.Flush()
		sub.Close()
		p.cons.Close()
		p.prod.Close()
		p.ba.stop()
		p.bb.stop()
		p.a.assertEmpty(t)
		p.b.assertEmpty(t)
		roots := []string{p.a.root, p.b.root}
		p.a.stop()
		p.b.stop()
		p.n.stop()
		for _, r := range roots {
			if n, err := leakcheck.Files(r); err != nil || n != 0 {
				t.Fatalf("store root %s: %d files (%v)", r, n, err)
			}
		}
	}()
	base.check(t)
}

// The stream lives through a NATS restart: frames stored before and after
// it are answered from history.
func TestNATSRestartKeepsHistory(t *testing.T) {
	n, a, prod, ba := historyExport(t, &StreamConfig{Name: "CAM"})
	stored := func() uint64 { return ba.b.Stats().Exports["cam.frames"].StoredAcked }
	for i := uint64(1); i <= 2; i++ {
		publishFrame(t, prod, "cam.frames", i, frameSizes)
	}
	waitFor(t, "two frames stored", func() bool { return stored() == 2 })
	n.restart()
	waitFor(t, "the bridge to reconnect", func() bool { return ba.b.Stats().NATSReconnects >= 1 })
	publishFrame(t, prod, "cam.frames", 3, frameSizes)
	waitFor(t, "the third frame stored", func() bool { return stored() == 3 })
	var rng RangeReply
	res := call(t, a.connect("late"), MethodRange, RangeRequest{Topic: "cam.frames", From: 1, Count: 3}, &rng)
	defer res.Close()
	if len(rng.Frames) != 3 || len(rng.Missing) != 0 {
		t.Fatalf("range: %d frames, missing %v, error %q", len(rng.Frames), rng.Missing, rng.Error)
	}
	for _, f := range rng.Frames {
		checkHistoryFrame(t, res, f)
	}
}

// A local router that refuses the bridge for good (here: a store root
// without the router's store) stops it with the reason instead of
// retrying forever.
func TestLocalRefusalStopsTheBridge(t *testing.T) {
	n := startNATS(t, 1<<20)
	a := newHost(t, "a")
	cfg := bridgeConfig(a, n, "bridge-a")
	cfg.Local.StoreRoot = t.TempDir()
	cfg.Imports = []ImportConfig{{Subject: "x", Topic: "x"}}
	b, err := New(cfg, Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	err = b.Run(ctx)
	if !errors.Is(err, client.ErrNoStoreRoot) || ctx.Err() != nil {
		t.Fatalf("Run: %v, want the store root refusal before the deadline", err)
	}
}
