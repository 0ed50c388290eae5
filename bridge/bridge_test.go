package bridge

import (
	"testing"

	"github.com/flybus/flybus/client"
	"github.com/flybus/flybus/wire"
)

// pair is two hosts bridged through one NATS server: bridge A exports,
// bridge B imports.
type pair struct {
	n    *natsHarness
	a, b *host
	ba   *running
	bb   *running
	prod *client.Client // the producer on A
	cons *client.Client // the consumer on B
}

func newPair(t *testing.T, maxPayload int32, exports []ExportConfig, imports []ImportConfig, optsB Options) *pair {
	t.Helper()
	return bridgePair(t, startNATS(t, maxPayload), exports, imports, optsB, nil)
}

// bridgePair is newPair through a NATS server of the test's own; edit, when
// set, changes both bridges' configurations before they start.
func bridgePair(t *testing.T, n *natsHarness, exports []ExportConfig, imports []ImportConfig, optsB Options, edit func(ca, cb *Config)) *pair {
	t.Helper()
	p := &pair{n: n, a: newHost(t, "a"), b: newHost(t, "b")}
	p.prod = p.a.connect("producer")
	for _, e := range exports {
		if _, err := p.prod.DeclareTopic(ctxT(t), e.Topic, wire.RetainNone); err != nil {
			t.Fatal(err)
		}
	}
	ca := bridgeConfig(p.a, p.n, "bridge-a")
	ca.Exports = exports
	cb := bridgeConfig(p.b, p.n, "bridge-b")
	cb.Imports = imports
	if edit != nil {
		edit(ca, cb)
	}
	// B first, so that its subscriptions stand before A sends anything.
	p.bb = startBridge(t, cb, optsB)
	p.ba = startBridge(t, ca, Options{})
	p.cons = p.b.connect("consumer")
	return p
}

var frameSizes = map[string]int{"frame": frameSize, "meta": 100}

// Export and import of a latest and a bounded topic, payload and two
// artifacts, every digest checked: inline where the server's max_payload
// holds a frame, chunked where it is 64 KiB.
func TestExportImportLatestAndBounded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		max     int32
		chunked bool
	}{{"inline", 8 << 20, false}, {"chunked", 64 << 10, true}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, tc.max,
				[]ExportConfig{{Topic: "cam.latest", Subject: "site.latest", Mode: "latest"},
					{Topic: "cam.bounded", Subject: "site.bounded", Mode: "bounded"}},
				[]ImportConfig{{Subject: "site.latest", Topic: "b.latest"}, {Subject: "site.bounded", Topic: "b.bounded"}},
				Options{})
			bsub := subscribe(t, p.cons, "b.bounded", client.Bounded())
			lsub := subscribe(t, p.cons, "b.latest")
			const frames = 5
			for n := uint64(1); n <= frames; n++ {
				publishFrame(t, p.prod, "cam.bounded", n, frameSizes)
			}
			for n := uint64(1); n <= frames; n++ {
				expectFrame(t, bsub, n)
			}
			for n := uint64(1); n <= 3; n++ {
				publishFrame(t, p.prod, "cam.latest", n, frameSizes)
				expectFrame(t, lsub, n)
			}
			// Counted once the publish returned, which may be after the
			// consumer had the message.
			waitFor(t, "the counters", func() bool {
				ea, ib := p.ba.b.Stats().Exports, p.bb.b.Stats().Imports
				return ea["cam.bounded"].Sent == frames && ea["cam.latest"].Sent == 3 &&
					ib["b.bounded"].Admitted == frames && ib["b.latest"].Admitted == 3
			})
			ea, ib := p.ba.b.Stats().Exports, p.bb.b.Stats().Imports
			chunked := ea["cam.bounded"].Chunked + ea["cam.latest"].Chunked
			if tc.chunked && (chunked != frames+3 || ea["cam.bounded"].Messages < frames*18) {
				t.Fatalf("chunked: %+v", ea)
			}
			if !tc.chunked && (chunked != 0 || ea["cam.bounded"].Messages != frames) {
				t.Fatalf("inline: %+v", ea)
			}
			for _, s := range ib {
				if s.DroppedMissing+s.DroppedCorrupt+s.DroppedLocal+s.DroppedOrigin != 0 {
					t.Fatalf("drops: %+v", ib)
				}
			}
		})
	}
}

// A frame far larger than the server's max_payload goes in chunks that
// each fit it (nats.go refuses a message over max_payload), with
// artifacts of every awkward size, an empty one included; a latest import
// assembles them in memory and arrives at the same bytes.
func TestFrameLargerThanMaxPayload(t *testing.T) {
	const max = 64 << 10
	importModes(t, func(t *testing.T, mode string) {
		p := newPair(t, max, []ExportConfig{{Topic: "cam.frames", Subject: "site.cam", Mode: "bounded"}},
			[]ImportConfig{{Subject: "site.cam", Topic: "cam.frames", Mode: mode}}, Options{})
		sub := subscribe(t, p.cons, "cam.frames", client.Bounded())
		sizes := map[string]int{"frame": frameSize, "empty": 0, "one": 1, "edge": max, "tail": 3*max + 7}
		// One at a time: a latest import may skip a frame a newer one
		// overtook.
		publishFrame(t, p.prod, "cam.frames", 1, sizes)
		expectFrame(t, sub, 1)
		publishFrame(t, p.prod, "cam.frames", 2, map[string]int{}) // the payload alone: inline
		expectFrame(t, sub, 2)
		// Counted once the publish returned, which may be after the
		// consumer had the message.
		waitFor(t, "the counters", func() bool {
			return p.ba.b.Stats().Exports["cam.frames"].Sent == 2 && p.bb.b.Stats().Imports["cam.frames"].Admitted == 2
		})
		e := p.ba.b.Stats().Exports["cam.frames"]
		total := uint64(frameSize + 1 + max + 3*max + 7)
		if e.Chunked != 1 || e.Failed != 0 || e.Messages < 1+total/max || e.Bytes < total {
			t.Fatalf("export: %+v", e)
		}
		if im := p.bb.b.Stats().Imports["cam.frames"]; im.Received != 2 || im.Coalesced != 0 {
			t.Fatalf("import: %+v", im)
		}
	})
}

// The bridge may start before the exported topic's producer: its export
// awaits the declaration, and every frame published from then on crosses,
// the first one included.
func TestExportBeforeTheProducerDeclares(t *testing.T) {
	n := startNATS(t, 8<<20)
	a, b := newHost(t, "a"), newHost(t, "b")
	ca := bridgeConfig(a, n, "bridge-a")
	ca.Exports = []ExportConfig{{Topic: "cam.late", Subject: "site.late", Mode: "bounded"}}
	cb := bridgeConfig(b, n, "bridge-b")
	cb.Imports = []ImportConfig{{Subject: "site.late", Topic: "b.late"}}
	startBridge(t, cb, Options{})
	startBridge(t, ca, Options{}) // its session is up with the topic not declared
	cons := b.connect("consumer")
	sub := subscribe(t, cons, "b.late", client.Bounded())
	prod := a.connect("producer")
	if _, err := prod.DeclareTopic(ctxT(t), "cam.late", wire.RetainNone); err != nil {
		t.Fatal(err)
	}
	const frames = 5
	for i := uint64(1); i <= frames; i++ {
		publishFrame(t, prod, "cam.late", i, frameSizes)
	}
	for i := uint64(1); i <= frames; i++ {
		expectFrame(t, sub, i)
	}
}
