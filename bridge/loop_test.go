package bridge

import (
	"testing"

	"github.com/flybus/flybus/client"
)

// Two bridges exporting to each other do not loop: each skips what it
// imported itself, and an import drops frames of its own origin (here a
// topic exported and imported on one subject).
func TestTwoBridgesExportingToEachOtherDoNotLoop(t *testing.T) {
	n := startNATS(t, 64<<10)
	a, b := newHost(t, "a"), newHost(t, "b")
	ca := bridgeConfig(a, n, "bridge-a")
	ca.Exports = []ExportConfig{{Topic: "shared", Subject: "ab", Mode: "bounded", Declare: "none"},
		{Topic: "echo", Subject: "echo", Mode: "bounded", Declare: "none"}}
	ca.Imports = []ImportConfig{{Subject: "ba", Topic: "shared"}, {Subject: "echo", Topic: "echo.in"}}
	cb := bridgeConfig(b, n, "bridge-b")
	cb.Exports = []ExportConfig{{Topic: "shared", Subject: "ba", Mode: "bounded", Declare: "none"}}
	cb.Imports = []ImportConfig{{Subject: "ab", Topic: "shared"}}
	ba, bb := startBridge(t, ca, Options{}), startBridge(t, cb, Options{})
	pa, pb := a.connect("producer-a"), b.connect("producer-b")
	subA := subscribe(t, pa, "shared", client.Bounded())
	subB := subscribe(t, pb, "shared", client.Bounded())
	echo := subscribe(t, pa, "echo.in", client.Bounded())
	for i := uint64(1); i <= 3; i++ {
		publishFrame(t, pa, "shared", i, frameSizes)
	}
	for i := uint64(11); i <= 12; i++ {
		publishFrame(t, pb, "shared", i, frameSizes)
	}
	publishFrame(t, pa, "echo", 21, frameSizes)
	// Each side sees its own frames and the other's, once.
	for _, s := range []*client.Subscription{subA, subB} {
		seen := map[uint64]int{}
		for range 5 {
			m, err := s.Next(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			seen[checkMessage(t, m)]++
			m.Close()
		}
		for _, k := range []uint64{1, 2, 3, 11, 12} {
			if seen[k] != 1 {
				t.Fatalf("frames seen: %v", seen)
			}
		}
	}
	waitFor(t, "both exports to consume 5", func() bool {
		return ba.b.Stats().Exports["shared"].Consumed == 5 && bb.b.Stats().Exports["shared"].Consumed == 5
	})
	waitFor(t, "the echo to come back", func() bool { return ba.b.Stats().Imports["echo.in"].DroppedOrigin == 1 })
	ea, eb := ba.b.Stats().Exports["shared"], bb.b.Stats().Exports["shared"]
	if ea.Sent != 3 || ea.LoopSkipped != 2 || eb.Sent != 2 || eb.LoopSkipped != 3 {
		t.Fatalf("exports: a %+v, b %+v", ea, eb)
	}
	waitFor(t, "the imports' counters", func() bool {
		return ba.b.Stats().Imports["shared"].Admitted == 2 && bb.b.Stats().Imports["shared"].Admitted == 3
	})
	if m, ok := echo.TryNext(); ok {
		t.Fatalf("an echo was published: #%d", m.TopicSequence)
	}
	if ba.b.Stats().Imports["echo.in"].Admitted != 0 {
		t.Fatal("the echo was admitted")
	}
}

// The sequences an import published are forgotten when the local router
// restarts: the new router numbers the topic from 1 again, and its first
// frames are the local producer's, not echoes, so the export sends them.
func TestLoopDetectionForgetsAnOldRouter(t *testing.T) {
	n := startNATS(t, 64<<10)
	a, b := newHost(t, "a"), newHost(t, "b")
	ca := bridgeConfig(a, n, "bridge-a")
	ca.Exports = []ExportConfig{{Topic: "shared", Subject: "ab", Mode: "bounded", Declare: "none"}}
	ca.Imports = []ImportConfig{{Subject: "ba", Topic: "shared"}}
	cb := bridgeConfig(b, n, "bridge-b")
	cb.Exports = []ExportConfig{{Topic: "shared", Subject: "ba", Mode: "bounded", Declare: "none"}}
	cb.Imports = []ImportConfig{{Subject: "ab", Topic: "shared"}}
	ba, _ := startBridge(t, ca, Options{}), startBridge(t, cb, Options{})
	pb := b.connect("producer-b")
	subB := subscribe(t, pb, "shared", client.Bounded())
	// Frames 11 and 12 cross to a, where they are sequences 1 and 2.
	for i := uint64(11); i <= 12; i++ {
		publishFrame(t, pb, "shared", i, frameSizes)
	}
	for range 2 {
		m, err := subB.Next(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		m.Close()
	}
	waitFor(t, "a's export to skip both", func() bool { return ba.b.Stats().Exports["shared"].LoopSkipped == 2 })

	a.restart()
	ba.waitSession(t)
	pa := a.connect("producer-a")
	for i := uint64(1); i <= 2; i++ {
		publishFrame(t, pa, "shared", i, frameSizes) // sequences 1 and 2 on the new router
	}
	for i := uint64(1); i <= 2; i++ {
		m, err := subB.Next(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if got := checkMessage(t, m); got != i {
			t.Fatalf("b got frame %d, want %d", got, i)
		}
		m.Close()
	}
	if e := ba.b.Stats().Exports["shared"]; e.LoopSkipped != 2 || e.Sent != 2 {
		t.Fatalf("a's export after the restart: %+v", e)
	}
}
