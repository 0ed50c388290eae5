package compare

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flybus/flybus/perf"
)

// TestMain lets the test binary play the child roles that RunNATS and
// RunDirect re-execute it in.
func TestMain(m *testing.M) {
	RunChild()
	os.Exit(m.Run())
}

func hist(ms ...float64) *perf.Hist {
	h := &perf.Hist{}
	for _, v := range ms {
		h.Add(time.Duration(v * float64(time.Millisecond)))
	}
	return h
}

// writeSynthetic writes a tiny flybus report and nats/direct results.
func writeSynthetic(t *testing.T, dir string) (fb, nf, df string) {
	t.Helper()
	s := &perf.Schedule{Agents: 1, Planned: 4, Frames: 4,
		RPC: hist(1, 2, 3), RPCNet: hist(0.5, 1), Allocate: hist(0.3, 0.4), Fill: hist(0.4),
		Seal: hist(0.2, 0.25), Publish: hist(0.2), DeliveryFast: hist(0.5, 0.6, 0.7, 0.8),
		DeliverySlow: hist(9, 12), Access: hist(0.5), View: hist(0.2), AgentAccess: &perf.Hist{},
		RouterCPU:  perf.CPU{What: "router", PerFrameUs: 1800, NetPerFrameUs: 1200, Cores: 0.1},
		HarnessCPU: perf.CPU{What: "harness", PerFrameUs: 3000},
		Memory:     perf.MemoryFigures{After: perf.Memory{RSS: 18e6, HWM: 19e6}},
		Consumers:  []perf.ConsumerFigures{{Seen: 4}, {Seen: 4}, {Slow: true, Seen: 2, Coalesced: 2}}}
	rep := &perf.Report{Router: perf.Router{Mode: "process"}, Schedules: []*perf.Schedule{s}}
	fb = filepath.Join(dir, "flybus.json")
	if err := writeFile(fb, rep.WriteJSON); err != nil {
		t.Fatal(err)
	}
	n := newResult("nats", 1, 0)
	n.Frames = 4
	n.DeliveryFast, n.DeliverySlow = hist(3, 4, 5), hist(2000)
	n.CPU = perf.CPU{What: "server", PerFrameUs: 3000}
	n.Consumers = []ConsumerFigures{{Seen: 4}, {Seen: 4}, {Slow: true, Seen: 1, Dropped: 3}}
	nf = filepath.Join(dir, "nats.json")
	if err := writeFile(nf, n.WriteJSON); err != nil {
		t.Fatal(err)
	}
	d := newResult("direct", 1, 0)
	d.DeliveryFast, d.DeliverySlow = hist(1, 2), &perf.Hist{} // an empty histogram is skipped
	d.CPU = perf.CPU{What: "producer", PerFrameUs: 1100}
	df = filepath.Join(dir, "direct.json")
	if err := writeFile(df, d.WriteJSON); err != nil {
		t.Fatal(err)
	}
	return fb, nf, df
}

func TestReadAndPlot(t *testing.T) {
	dir := t.TempDir()
	fb, nf, df := writeSynthetic(t, dir)

	rep, err := ReadFlybus(fb)
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Schedules[0].DeliverySlow.Summary().Count; got != 2 {
		t.Errorf("flybus slow delivery samples read back: %d, want 2", got)
	}
	n, err := ReadResult(nf)
	if err != nil {
		t.Fatal(err)
	}
	if n.Kind != "nats" || n.DeliveryFast.Summary().P50 != 4*time.Millisecond || n.Consumers[2].Dropped != 3 {
		t.Errorf("nats result read back wrong: %+v", n)
	}
	if _, err := ReadResult(fb); err == nil {
		t.Error("ReadResult took a flybus report")
	}
	if _, err := ReadFlybus(nf); err == nil {
		t.Error("ReadFlybus took a nats result")
	}

	out := filepath.Join(dir, "plots")
	var stdout, stderr bytes.Buffer
	args := []string{"plot", "--flybus", fb, "--nats", nf, "--direct", df, "--out", out}
	if code := Main(args, &stdout, &stderr); code != 0 {
		t.Fatalf("plot exited %d: %s", code, stderr.String())
	}
	for _, name := range []string{"delivery-cdf.png", "cpu-per-frame.png", "flybus-stages-cdf.png",
		"flybus-stage-seal-cdf.png", "flybus-stage-rpc-cdf.png"} {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Error(err)
			continue
		}
		if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("%s is not a PNG", name)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "flybus-stage-agent-access-cdf.png")); err == nil {
		t.Error("an empty histogram got a plot")
	}
	text := stdout.String()
	for _, want := range []string{"0.600x", "less sampling: 0.400x", "0.60 / 0.80 / 0.80 ms (n=4)", "dropped 3"} {
		if !strings.Contains(text, want) {
			t.Errorf("table lacks %q:\n%s", want, text)
		}
	}
}

func TestPlotArguments(t *testing.T) {
	var out, errs bytes.Buffer
	if Main([]string{"plot", "--out", t.TempDir()}, &out, &errs) == 0 {
		t.Error("plot without inputs succeeded")
	}
	if Main([]string{"nope"}, &out, &errs) == 0 {
		t.Error("an unknown command succeeded")
	}
}

// The smoke tests run the real peers for a second each; they need the
// loopback network and a few seconds, so they run with COMPARE_SMOKE=1.
func smoke(t *testing.T) {
	if os.Getenv("COMPARE_SMOKE") != "1" {
		t.Skip("set COMPARE_SMOKE=1 to run the peers for 1 s")
	}
}

func checkRun(t *testing.T, r *Result) {
	t.Helper()
	if len(r.Errors) > 0 {
		t.Errorf("errors: %v", r.Errors)
	}
	if r.Frames != r.Planned || r.Planned != 60 {
		t.Errorf("frames %d of %d planned, want 60", r.Frames, r.Planned)
	}
	if !r.Drained {
		t.Error("not drained")
	}
	if r.DeliveryFast.Summary().Count == 0 || r.DeliverySlow.Summary().Count == 0 {
		t.Error("no delivery samples")
	}
	if len(r.Consumers) != Consumers {
		t.Fatalf("%d consumers", len(r.Consumers))
	}
	for i, c := range r.Consumers {
		if c.Seen == 0 {
			t.Errorf("consumer %d saw nothing", i+1)
		}
	}
	if r.CPU.Err != "" || r.CPU.PerFrameUs <= 0 {
		t.Errorf("CPU: %+v", r.CPU)
	}
	if r.Memory.After.RSS == 0 {
		t.Errorf("memory: %+v", r.Memory)
	}
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Error(err)
	}
}

func TestSmokeNATS(t *testing.T) {
	smoke(t)
	r, err := RunNATS(context.Background(), NATSConfig{Seconds: 1, Agents: 1})
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, r)
	if r.Server == nil || r.Server.InMsgs < 60 {
		t.Errorf("server figures: %+v", r.Server)
	}
	if r.RPC.Summary().Count != 60 {
		t.Errorf("%d agent round trips, want 60", r.RPC.Summary().Count)
	}
}

func TestSmokeDirect(t *testing.T) {
	smoke(t)
	r, err := RunDirect(context.Background(), DirectConfig{Seconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, r)
	if slow := r.Consumers[Consumers-1]; slow.Seen+slow.Dropped != r.Frames {
		t.Errorf("slow consumer: seen %d + dropped %d != %d frames", slow.Seen, slow.Dropped, r.Frames)
	}
}
