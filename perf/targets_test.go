package perf

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func histOf(ds ...time.Duration) *Hist {
	h := newHist(len(ds))
	for _, d := range ds {
		h.Add(d)
	}
	return h
}

func TestRatioTarget(t *testing.T) {
	us := time.Microsecond
	base := Baseline{Hot: histOf(100*us, 100*us, 900*us), Paced: histOf(200 * us)}
	met := ratioTarget("x", 3, histOf(250*us), base)
	if !met.Measured || !met.Met || met.Ratio != 2.5 || met.PacedRatio != 1.25 || !met.PacedMet {
		t.Fatalf("%+v", met)
	}
	missed := ratioTarget("x", 3, histOf(300*us), base)
	if !missed.Measured || missed.Met || !missed.PacedMet {
		t.Fatalf("a ratio of exactly the limit is not under it: %+v", missed)
	}
	if none := ratioTarget("x", 3, newHist(0), base); none.Measured || none.Met {
		t.Fatalf("%+v", none)
	}
	if unpaced := ratioTarget("x", 3, histOf(250*us), Baseline{Hot: base.Hot}); unpaced.PacedRatio != 0 || !unpaced.Met {
		t.Fatalf("%+v", unpaced)
	}

	// A paced target judges on the paced baseline, whatever the other says.
	paced := pacedTarget("x", 1.3, histOf(250*us), base)
	if !paced.Measured || !paced.Met || paced.Basis != BasisPaced || paced.PacedRatio != 1.25 || paced.Ratio != 2.5 {
		t.Fatalf("%+v", paced)
	}
	if p := pacedTarget("x", 1.3, histOf(260*us), base); !p.Measured || p.Met {
		t.Fatalf("1.3x is not under 1.3x: %+v", p)
	}
	if p := pacedTarget("x", 1.3, histOf(250*us), Baseline{Hot: base.Hot}); p.Measured || p.Met || p.Note == "" {
		t.Fatalf("a paced target without a paced baseline is not measured: %+v", p)
	}
}

func testBaselines() *Baselines {
	us := time.Microsecond
	bl := func(hot, paced time.Duration) Baseline { return Baseline{Hot: histOf(hot), Paced: histOf(paced)} }
	return &Baselines{
		Copy:         bl(50*us, 100*us),
		InProcess:    &PingPong{One: bl(5*us, 15*us), Two: bl(10*us, 20*us)},
		CrossProcess: &PingPong{One: bl(20*us, 150*us), Two: bl(40*us, 200*us)},
		Pwrite:       bl(100*us, 400*us),
		MapTouch:     bl(60*us, 100*us),
		Touch:        bl(10*us, 25*us),
	}
}

func testSchedule(agents int) *Schedule {
	us := time.Microsecond
	return &Schedule{Agents: agents, Planned: 300, Frames: 300, Late: 1, MaxOverrunNs: 2 * time.Millisecond,
		WallNs: 5 * time.Second,
		RPC:    histOf(500 * us), RPCNet: histOf(300 * us), Allocate: histOf(50 * us), Fill: histOf(110 * us),
		Seal: histOf(40 * us), Publish: histOf(200 * us), DeliveryFast: histOf(400 * us), DeliverySlow: histOf(20 * time.Millisecond),
		CriticalPath: histOf(450 * us), FrameLatency: histOf(900 * us), ProducerPath: sealThenPublish,
		Access: histOf(300 * us), View: histOf(150 * us), AgentAccess: histOf(250 * us),
		Seals: 300, LeaseSeals: 300, RouterCPU: CPU{What: "router process", Seconds: 0.5, Cores: 0.1, PerFrameUs: 1666, NetCores: 0.08, NetPerFrameUs: 1333},
		HarnessCPU:     CPU{What: "harness process", Seconds: 1, Cores: 0.2, PerFrameUs: 3333},
		Memory:         MemoryFigures{Before: Memory{RSS: 15e6, HWM: 15e6}, After: Memory{RSS: 16e6, HWM: 17e6}, PeakReset: true},
		StoreBytesPeak: 3686400, RootsPeak: 6, QueuedPeak: 1, ArtifactsPeak: 3, StatsSamples: 500,
		CollectionLagNs: 700 * us, Drained: true,
		Consumers: []ConsumerFigures{{Seen: 300}, {Seen: 300}, {Slow: true, Seen: 120, Coalesced: 180}}}
}

func TestCheckTargets(t *testing.T) {
	b := testBaselines()
	s := testSchedule(1)
	got := map[string]Target{}
	targets := checkTargets(b, s, FillWrite, false)
	for _, tg := range targets {
		key := strings.Fields(tg.Name)[0] + " " + strings.Fields(tg.Name)[1]
		if tg.Basis == BasisPaced {
			key += " paced"
		}
		if _, dup := got[key]; dup {
			t.Fatalf("two targets under %q", key)
		}
		got[key] = tg
	}
	if len(targets) != 9 {
		t.Errorf("%d targets, want 9", len(targets))
	}
	check := func(key string, ratio float64, met bool) {
		t.Helper()
		tg, ok := got[key]
		if !ok {
			t.Fatalf("no target %q in %v", key, got)
		}
		if !tg.Measured || tg.Met != met || tg.Ratio < ratio-1e-9 || tg.Ratio > ratio+1e-9 {
			t.Errorf("%s: %+v, want ratio %g met %v", key, tg, ratio, met)
		}
	}
	check("seal round", 0.8, true)     // 40 / 50
	check("allocate round", 2.5, true) // 50 / 20, cross-process
	check("RPC round", 12.5, false)    // 500 / 40, against 3x
	check("consumer access", 5, false) // 300 / 60
	check("producer fill", 1.1, true)  // 110 / 100
	checkPaced := func(key string, ratio float64, met bool) {
		t.Helper()
		tg, ok := got[key+" paced"]
		if !ok {
			t.Fatalf("no paced target %q in %v", key, got)
		}
		if !tg.Measured || tg.Met != met || tg.PacedRatio < ratio-1e-9 || tg.PacedRatio > ratio+1e-9 {
			t.Errorf("%s: %+v, want paced ratio %g met %v", key, tg, ratio, met)
		}
	}
	checkPaced("RPC round", 2.5, false)               // 500 / 200, against 1.5x
	checkPaced("publish admission", 200.0/150, false) // 200 / 150, against 1.3x
	checkPaced("producer's critical", 3, false)       // 450 / 150, against 1.5x
	if r := got["RPC round"].PacedRatio; r != 2.5 {   // 500 / 200
		t.Errorf("RPC paced ratio %g, want 2.5", r)
	}
	if f := got["producer fill"]; f.PacedRatio != 0.275 || !f.PacedMet { // 110 / 400
		t.Errorf("fill paced %+v", f)
	}
	if nats := got["router CPU"]; nats.Measured || !strings.Contains(nats.Note, "not measured") {
		t.Errorf("NATS target without a NATS figure: %+v", nats)
	}

	// Embedded: ping-pong targets use the in-process ping-pong.
	for _, tg := range checkTargets(b, s, FillWrite, true) {
		if strings.HasPrefix(tg.Name, "allocate") && (tg.Ratio != 10 || !strings.Contains(tg.Name, "in-process")) {
			t.Errorf("embedded allocate target %+v, want 10x in-process", tg)
		}
	}

	us := 20000.0
	s.NATSRouterCPUPerFrameUs = &us
	for _, tg := range checkTargets(b, s, FillMap, false) {
		if strings.HasPrefix(tg.Name, "router CPU") && (!tg.Measured || !tg.Met) {
			t.Errorf("1333 µs against NATS's 20000 µs is under 0.25x: %+v", tg)
		}
		if strings.HasPrefix(tg.Name, "producer fill") && !strings.Contains(tg.Name, "Bytes") {
			t.Errorf("map fill target named %q", tg.Name)
		}
	}
}

func TestCPUFigure(t *testing.T) {
	c := cpuFigure("router process", 500*time.Millisecond, 5*time.Second, 250, 0.02, nil)
	// 0.5 s over 5 s is 0.1 cores; sampling took 0.02 x 5 s = 0.1 s of it.
	if c.Cores != 0.1 || c.PerFrameUs != 2000 || c.NetPerFrameUs != 1600 || c.NetCores < 0.0799 || c.NetCores > 0.0801 {
		t.Fatalf("%+v", c)
	}
	if c := cpuFigure("x", time.Second, time.Second, 0, 5, nil); c.NetCores != 0 || c.PerFrameUs != 0 {
		t.Fatalf("sampling above the total, or no frames: %+v", c)
	}
	if c := cpuFigure("x", 0, time.Second, 1, 0, errTest); c.Err == "" || c.Cores != 0 {
		t.Fatalf("%+v", c)
	}
}

var errTest = errors.New("no /proc")

func TestNATSTargetNeedsARouterProcess(t *testing.T) {
	s := testSchedule(1)
	us := 20000.0
	s.NATSRouterCPUPerFrameUs = &us
	for _, tg := range checkTargets(testBaselines(), s, FillWrite, true) {
		if strings.HasPrefix(tg.Name, "router CPU") && tg.Measured {
			t.Fatalf("embedded router CPU compared with NATS: %+v", tg)
		}
	}
}
