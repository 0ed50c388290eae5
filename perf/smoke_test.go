package perf

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flybus/flybus/internal/shmtest"
	"github.com/flybus/flybus/router"
	"github.com/flybus/flybus/store"
)

// TestSmoke runs the harness for real, briefly: one 2 s schedule with one
// agent, embedded and (when the flybus binary builds in time) as a router
// process. It checks that the harness works, never how fast anything is.
// CI enables it with FLYBUS_PERF_SMOKE=1 or -tags perfsmoke.
func TestSmoke(t *testing.T) {
	if !smokeByTag && os.Getenv("FLYBUS_PERF_SMOKE") != "1" {
		t.Skip("set FLYBUS_PERF_SMOKE=1 or build with -tags perfsmoke")
	}
	t.Run("Embedded", func(t *testing.T) {
		smoke(t, Config{Embedded: true, StalledSubscriber: true, SealWait: true})
	})
	t.Run("EmbeddedPool", func(t *testing.T) {
		smoke(t, Config{Embedded: true, StoreMode: store.ModePool})
	})
	t.Run("Process", func(t *testing.T) {
		bin := filepath.Join(t.TempDir(), "flybus")
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		root, err := moduleRoot(ctx)
		if err != nil {
			t.Skipf("cannot build flybus: %v", err)
		}
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/flybus")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			t.Skipf("cannot build flybus quickly: %v\n%s", err, out)
		}
		smoke(t, Config{Flybus: bin})
	})
}

func smoke(t *testing.T, cfg Config) {
	cfg.Seconds, cfg.Agents, cfg.Store = 2, []int{1}, smokeStore(t)
	cfg.rounds = &baselineRounds{copy: 20, pingPong: 50, pwrite: 5, mapTouch: 5, paced: 5}
	cfg.samplingWindow = 0.2
	cfg.CPUProfile = filepath.Join(t.TempDir(), "router.pprof")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, md, _ := runReport(t, ctx, cfg) // rendering the JSON is checked too
	if len(rep.Errors) > 0 {
		t.Errorf("run errors: %v", rep.Errors)
	}
	if len(rep.Schedules) != 1 {
		t.Fatalf("%d schedules", len(rep.Schedules))
	}
	s := rep.Schedules[0]
	checkSmokeSchedule(t, s)
	if st, err := os.Stat(s.Profile); err != nil || st.Size() == 0 {
		t.Errorf("CPU profile %q: %v", s.Profile, err)
	}
	if cfg.StalledSubscriber {
		checkSmokeIsolation(t, rep.Isolation)
	} else if rep.Isolation != nil {
		t.Error("isolation passes nobody asked for")
	}
	// Every figure is present: only the NATS target may say so, and,
	// when the seal is pipelined, the seal row and its target.
	want := 1
	if !cfg.SealWait {
		want = 3
	}
	if n := strings.Count(md.String(), "not measured"); n != want {
		t.Errorf("%d figures not measured, want %d", n, want)
	}
	if !cfg.Embedded && rep.Router.ExitStatus != 0 {
		t.Errorf("the router exited with status %d", rep.Router.ExitStatus)
	}
	if _, err := os.Stat(rep.Router.StoreDir); !os.IsNotExist(err) {
		t.Errorf("the router's store directory %s survived: %v", rep.Router.StoreDir, err)
	}
}

// checkSmokeSchedule checks that a schedule measured every figure and
// ended clean.
func checkSmokeSchedule(t *testing.T, s *Schedule) {
	t.Helper()
	if s.ErrorCount > 0 {
		t.Errorf("%d errors: %v", s.ErrorCount, s.Errors)
	}
	if s.Frames == 0 {
		t.Fatal("no frame produced")
	}
	for name, h := range map[string]*Hist{"rpc": s.RPC, "rpcNet": s.RPCNet, "allocate": s.Allocate, "fill": s.Fill,
		"seal": s.Seal, "publish": s.Publish, "deliveryFast": s.DeliveryFast, "deliverySlow": s.DeliverySlow,
		"access": s.Access, "view": s.View, "agentAccess": s.AgentAccess, "criticalPath": s.CriticalPath,
		"frameLatency": s.FrameLatency, "rpcAgent1": s.RPCByAgent[0]} {
		pipelined := !slices.Equal(s.ProducerPath, sealThenPublish)
		if name == "seal" && pipelined {
			continue // no seal round trip of its own
		}
		if h.Summary().Count == 0 {
			t.Errorf("no %s samples", name)
		}
	}
	// Every fast consumer's frame latency is recorded with its delivery.
	if f, d := s.FrameLatency.Summary().Count, s.DeliveryFast.Summary().Count; f != d {
		t.Errorf("%d frame latencies for %d fast deliveries", f, d)
	}
	if !s.FrameBudget.Measured || s.FrameBudget.RoundTrips < 1 {
		t.Errorf("frame budget %+v", s.FrameBudget)
	}
	if s.Seals == 0 || s.LeaseSeals+s.CopySeals != s.Seals || s.Publications == 0 {
		t.Errorf("seals %d (lease %d, copy %d), publications %d", s.Seals, s.LeaseSeals, s.CopySeals, s.Publications)
	}
	// Left: the producer's allocation prepared ahead, and nothing else.
	if !s.Drained || s.ArtifactsLive != s.PreparedLive || s.RootsLive != 0 || s.StoreBytesLive != uint64(s.PreparedLive)*FrameBytes ||
		s.QueuedLive != 0 || s.PreparedLive > 1 {
		t.Errorf("not drained: artifacts %d (%d prepared ahead), roots %d, store bytes %d, queued %d",
			s.ArtifactsLive, s.PreparedLive, s.RootsLive, s.StoreBytesLive, s.QueuedLive)
	}
	if s.StatsSamples == 0 || s.RootsPeak == 0 || s.StoreBytesPeak == 0 {
		t.Errorf("sampling saw nothing: %d samples, roots peak %d, store peak %d", s.StatsSamples, s.RootsPeak, s.StoreBytesPeak)
	}
	if len(s.Consumers) != Consumers {
		t.Fatalf("%d consumers", len(s.Consumers))
	}
	for i, c := range s.Consumers {
		if c.Seen == 0 {
			t.Errorf("consumer %d saw nothing", i+1)
		}
	}
	// The router's own view of the same subscriptions: one each, and what
	// it delivered is what the consumers saw (the last may still be in
	// flight, so it delivered at least as many). A recorder pass's
	// recorder is checked on its own.
	var frames []router.SubscriptionDetail
	for _, sd := range s.Subscriptions {
		if strings.HasPrefix(sd.Topic, "perf.frames.") && !strings.HasSuffix(sd.Client, "-recorder") {
			frames = append(frames, sd)
		}
	}
	if len(frames) != Consumers {
		t.Fatalf("the router's snapshot has %d subscriptions to the frames: %+v", len(frames), s.Subscriptions)
	}
	for i, sd := range frames {
		if sd.Mode != "latest" || sd.Delivered == 0 || sd.Delivered+1 < uint64(s.Consumers[i].Seen) {
			t.Errorf("subscription %d in the router's snapshot: %+v (its consumer saw %d)", i+1, sd, s.Consumers[i].Seen)
		}
	}
	// The router timed every command of the schedule (at least a publish
	// and a seal per frame) and every batch it wrote.
	if l := s.Latencies; l == nil || l.Admission.Count < 2*uint64(s.Frames) || l.LaneWait.Count == 0 {
		t.Errorf("the router's timing of the schedule: %+v", s.Latencies)
	}
	if s.RouterCPU.Err != "" || s.HarnessCPU.Err != "" || s.Memory.Err != "" || s.Memory.After.RSS == 0 {
		t.Errorf("CPU or memory not measured: %+v %+v %+v", s.RouterCPU, s.HarnessCPU, s.Memory)
	}
	if len(s.Targets) != 9 {
		t.Errorf("%d targets", len(s.Targets))
	}
}

// checkSmokeIsolation checks the stalled-subscriber passes: both clean, the
// stalled subscriber's queue filled and the side publisher refused after.
func checkSmokeIsolation(t *testing.T, iso *Isolation) {
	t.Helper()
	if iso == nil {
		t.Fatal("no isolation passes")
	}
	for _, s := range []*Schedule{iso.Without, iso.With} {
		checkSmokeSchedule(t, s)
		if s.Side == nil || s.Side.Admitted == 0 {
			t.Fatalf("side traffic %+v", s.Side)
		}
	}
	if w := iso.Without.Side; w.Stalled || w.Refused != 0 {
		t.Errorf("without the stalled subscriber: %+v", w)
	}
	// Admitted: what its credit and queue hold, and nothing after.
	if w := iso.With.Side; !w.Stalled || w.Refused == 0 || w.Admitted > stalledQueued+stalledInFlight {
		t.Errorf("with the stalled subscriber: %+v", w)
	}
	if len(iso.Rows) == 0 || !iso.Rows[0].Measured || iso.Rows[0].Limit == 0 {
		t.Errorf("isolation rows %+v", iso.Rows)
	}
}

// smokeStore is a store root on /dev/shm when there is one.
func smokeStore(t testing.TB) string {
	return shmtest.Dir(t, "flybus-perf-smoke-")
}

// runReport runs the harness and renders its report, which the test's log
// shows when it fails (or runs verbose).
func runReport(t *testing.T, ctx context.Context, cfg Config) (rep *Report, md, js *bytes.Buffer) {
	t.Helper()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	md, js = &bytes.Buffer{}, &bytes.Buffer{}
	if err := rep.WriteMarkdown(md); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteJSON(js); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || testing.Verbose() {
			t.Logf("report:\n%s", md.String())
		}
	})
	return rep, md, js
}
