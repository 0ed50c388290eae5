package perf

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/store"
)

func testReport(mode string, agents ...int) *Report {
	r := &Report{
		Started: time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC),
		Machine: Machine{CPU: "Test CPU", NumCPU: 2, PhysicalCores: 2, ThreadsPerCore: 1, L1d: 48 << 10, L2: 2 << 20,
			L3: 260 << 20, CacheLine: 64, Kernel: "Linux 6.1 x86_64", Go: "go1.26", MaxProcs: 2},
		Store: StoreFS{Root: "/dev/shm/x", Magic: "0x01021994", Tmpfs: true, MountPoint: "/dev/shm", FSType: "tmpfs",
			Options: "rw", Huge: "never"},
		Router: Router{Mode: mode, Binary: "/tmp/flybus", Found: "--flybus", PID: 42, RouterID: "router-1", Metrics: "127.0.0.1:1"},
		Settings: Settings{Width: FrameWidth, Height: FrameHeight, FrameBytes: FrameBytes, Rate: FrameRate, Seconds: 5,
			Frames: 300, Agents: agents, Consumers: Consumers, SlowDelayNs: int64(SlowConsumerDelay), Fill: FillWrite,
			TouchStride: TouchStride, SampleEvery: int64(sampleEvery)},
		Baselines:   testBaselines(),
		SamplingCPU: 0.02,
	}
	for _, n := range agents {
		s := testSchedule(n)
		judge(r.Baselines, s, Config{Fill: FillWrite, Embedded: mode == "embedded", StoreMode: store.ModeFiles})
		r.Schedules = append(r.Schedules, s)
	}
	return r
}

func render(t *testing.T, r *Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := r.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// wantAll fails t for each of wants that out does not hold.
func wantAll(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q\n%s", want, out)
		}
	}
}

func TestMarkdownProcessMode(t *testing.T) {
	out := render(t, testReport("process", 1, 2, 4))
	if !strings.HasPrefix(out, "machine: Test CPU, 2 logical cores (2 physical, 1 per core); L1d 48 KiB, L2 2 MiB, L3 260 MiB") {
		t.Errorf("the machine line is not first:\n%s", out)
	}
	wantAll(t, out,
		"| figure | 1 agent | Rust | 2 agents | Rust | 4 agents | Rust |",
		// Ours beside the Rust crate's, with the ratio to the two-hop cross-process ping-pong.
		"| RPC round trip, call to result (÷ two-hop ping-pong) | 0.500 / 0.500 / 0.500 (1; 12.50x, paced 2.50x) | 0.51-0.60 / 0.84-1.47 / 1.12-2.05 |",
		"1.04-1.08 / 1.67-5.01 / 2.06-10.02",
		"| Frames produced (late) | 300 (1), worst overrun 2.000 ms | 120 (0) |",
		"| seal round trip (÷ copy) | 0.040 / 0.040 / 0.040 (1; 0.80x, paced 0.40x) |",
		"| Router CPU, cores (net of stats sampling) | 0.100 (0.080) | 0.175-0.185 |",
		"| Router CPU per frame, µs (net of stats sampling) | 1666 (1333) |",
		"| Router + clients CPU, cores | 0.300 | 0.325-0.335 |",
		"| Router VmRSS / VmHWM, before → after | 15.0 / 15.0 → 16.0 / 17.0 MB |",
		"| Frames seen by the three consumers (coalesced) | 300, 300, 120 (0, 0, 180) |",
		"| Collection lag after the last frame (polled every 0.25 ms) | 0.70 ms | 63.5-74.7 ms |",
		"| seal round trip p50 < 1x copy() p50 | 0.80x: met (paced 0.40x) |",
		"| RPC round trip p50 < 3x back-to-back cross-process two-hop ping-pong p50 | 12.50x: NOT met (paced 2.50x) |",
		"| RPC round trip p50 < 1.5x paced cross-process two-hop ping-pong p50 | paced 2.50x: NOT met (back to back 12.50x) |",
		"| publish admission p50 < 1.3x paced cross-process ping-pong p50 | paced 1.33x: NOT met (back to back 10.00x) |",
		"| producer's critical path (Allocate returned to Publish answered) p50 < 1.5x paced cross-process ping-pong p50 | paced 3.00x: NOT met (back to back 22.50x) |",
		// 900 µs over 100 + 3 x 150 + 60 = 610 µs, and over 400 + 3 x 150 + 100 = 950 µs.
		"| frame latency: fill start to every line touched, fast consumers (÷ the sum of its baselines, below) | 0.900 / 0.900 / 0.900 (1; 1.48x, paced 0.95x) | — |",
		"| 0.610 (paced 0.950) = pwrite 100.0 µs (paced 400.0 µs) + 3 x paced ping-pong 150.0 µs (seal; publish to the router, "+
			"then the delivery to the consumer; artifact.open) + map+touch+unmap 60.0 µs (paced 100.0 µs) | — |",
		"| producer's critical path: Allocate returned to Publish answered (÷ ping-pong) | 0.450 / 0.450 / 0.450 (1; 22.50x, paced 3.00x) | — |",
		"not measured here: bench/compare",
		"Ratios to a ping-pong use the cross-process one",
		"| raw Unix-socket ping-pong of 300 bytes with another process, one hop | 20.0 µs / 20.0 µs / 20.0 µs (1) | 150.0 µs / 150.0 µs / 150.0 µs (1) |",
		"huge=never (4 KiB pages)",
	)
	// Every row of the figures table has a cell per schedule and per reference.
	inFigures := false
	for line := range strings.SplitSeq(out, "\n") {
		switch {
		case strings.HasPrefix(line, "| figure |"):
			inFigures = true
		case inFigures && line == "":
			inFigures = false
		case inFigures:
			if n := strings.Count(line, " | ") + 2; n != 1+2*3+1 {
				t.Errorf("row with %d separators: %s", n, line)
			}
		}
	}
	if t.Failed() {
		t.Log(out)
	}
}

func TestMarkdownEmbeddedAndOddAgentCounts(t *testing.T) {
	out := render(t, testReport("embedded", 3))
	wantAll(t, out,
		"| figure | 3 agents | Rust |",
		"| Router CPU, cores (net of stats sampling) | n/a (embedded) | — |",
		"Whole process VmRSS / VmHWM",
		"Ratios to a ping-pong use the in-process one",
		"router.New in the harness",
	)
}

func TestMarkdownReportsErrorsAndNotDrained(t *testing.T) {
	r := testReport("process", 1)
	r.Schedules[0].Drained = false
	r.Schedules[0].ErrorCount, r.Schedules[0].Errors = 12, []string{"seal: QUOTA_EXCEEDED"}
	r.Errors = []string{"stopping the router: status 1"}
	out := render(t, r)
	wantAll(t, out, "NOT drained", "- 1 agent: seal: QUOTA_EXCEEDED", "- 1 agent: and 11 more", "- stopping the router: status 1")
	if !r.Failed() {
		t.Error("a report with errors does not say it failed")
	}
	if testReport("process", 1).Failed() {
		t.Error("a clean report says it failed")
	}
}

func TestReportJSON(t *testing.T) {
	var b bytes.Buffer
	if err := testReport("process", 1, 2).WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Schedules []struct {
			Agents int `json:"agents"`
			RPC    struct {
				P50Ns     int64   `json:"p50Ns"`
				SamplesNs []int64 `json:"samplesNs"`
			} `json:"rpcRoundTrip"`
			Targets []Target `json:"targets"`
		} `json:"schedules"`
		Baselines struct {
			CrossProcess struct {
				Two struct {
					Paced histJSON `json:"paced60Hz"`
				} `json:"two"`
			} `json:"pingPongCrossProcess"`
		} `json:"baselines"`
	}
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Schedules) != 2 || back.Schedules[1].Agents != 2 || back.Schedules[0].RPC.P50Ns != 500_000 ||
		len(back.Schedules[0].RPC.SamplesNs) != 1 || len(back.Schedules[0].Targets) != 9 ||
		back.Baselines.CrossProcess.Two.Paced.P50Ns != 200_000 {
		t.Fatalf("JSON:\n%s", b.String())
	}
}

func TestFormatting(t *testing.T) {
	for in, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1228800: "1,228,800", -19200: "-19,200"} {
		if got := thousands(in); got != want {
			t.Errorf("thousands(%d) = %q, want %q", in, got, want)
		}
	}
	if got := dur(46100 * time.Nanosecond); got != "46.1 µs" {
		t.Errorf("dur: %q", got)
	}
	if got := dur(1234567 * time.Nanosecond); got != "1.235 ms" {
		t.Errorf("dur: %q", got)
	}
	if got := profileFile("/tmp/router.pprof", 2, true); got != "/tmp/router.agents2.pprof" {
		t.Errorf("profileFile: %q", got)
	}
	if got := profileFile("/tmp/router.pprof", 2, false); got != "/tmp/router.pprof" {
		t.Errorf("profileFile: %q", got)
	}
	if got := cacheSize(48 << 10); got != "48 KiB" {
		t.Errorf("cacheSize: %q", got)
	}
}

// The router's own timing of a schedule is a table of bucket bounds.
func TestMarkdownRouterTiming(t *testing.T) {
	r := testReport("process", 1)
	adm := router.Histogram{Count: 10, Buckets: make([]router.HistogramBucket, 22)}
	for i := range adm.Buckets {
		adm.Buckets[i].UpperBound = router.BucketBound(i)
	}
	adm.Buckets[3].Count, adm.Buckets[6].Count = 9, 1 // 9 at most 8 µs, one at most 64 µs
	r.Schedules[0].Latencies = &router.Latencies{Admission: adm}
	wantAll(t, render(t, r), "## The router's own timing (router.Latencies, bucket upper bounds)",
		"| 1 agent | 8µs / 64µs / 64µs (10) | - |")
}
