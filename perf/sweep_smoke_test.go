package perf

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestSweepSmoke runs the sweep for real on a tiny grid, a fraction of a
// second a point, with the router as its own process and, when
// bench/compare builds, the NATS peer. It checks the report's and the
// plots' structure, never a figure. Like TestSmoke it runs with
// FLYBUS_PERF_SMOKE=1 or -tags perfsmoke.
func TestSweepSmoke(t *testing.T) {
	if !smokeByTag && os.Getenv("FLYBUS_PERF_SMOKE") != "1" {
		t.Skip("set FLYBUS_PERF_SMOKE=1 or build with -tags perfsmoke")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	root, err := moduleRoot(ctx)
	if err != nil {
		t.Skipf("cannot build flybus: %v", err)
	}
	bins := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(bins, "flybus"), "./cmd/flybus")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Skipf("cannot build flybus quickly: %v\n%s", err, out)
	}
	cfg := SweepConfig{Seconds: 0.3, Flybus: filepath.Join(bins, "flybus"), Store: smokeStore(t),
		Grid: SweepGrid{Consumers: []int{1, 2}, Rates: []int{60, 120}, Sizes: []int{FeedFrameBytes}, SizeRates: []int{30},
			Senders: []int{1, 2}},
		rounds: &sweepRounds{frameBytes: FeedFrameBytes, hot: 5, pingPong: 20, paced: 2}}
	if _, _, err := locateCompare(ctx, "", bins); err != nil {
		t.Logf("without the NATS peer: %v", err)
		cfg.NoNATS = true
	} else {
		cfg.Compare = filepath.Join(bins, "compare")
	}
	rep, err := RunSweep(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	files, err := rep.WriteFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(files[len(files)-1])
	defer func() {
		if t.Failed() || testing.Verbose() {
			t.Logf("report:\n%s", md)
		}
	}()
	if len(rep.Errors) > 0 {
		t.Errorf("sweep errors: %v", rep.Errors)
	}
	if len(rep.Entries) != 2+2+1+4 {
		t.Fatalf("%d points", len(rep.Entries))
	}
	for _, e := range rep.Entries {
		peers := []*PointResult{e.Flybus}
		if !cfg.NoNATS {
			peers = append(peers, e.NATS)
		}
		for _, r := range peers {
			if r == nil {
				t.Errorf("%s: a peer did not run", e.Point.Label())
				continue
			}
			if r.ErrorCount > 0 || r.CPUErr != "" {
				t.Errorf("%s on %s: %d errors %v, CPU %q", e.Point.Label(), r.Peer, r.ErrorCount, r.Errors, r.CPUErr)
			}
			if r.Sent == 0 || r.Deliveries == 0 || r.Latency.Count == 0 || r.WallNs <= 0 {
				t.Errorf("%s on %s measured nothing: %+v", e.Point.Label(), r.Peer, r)
			}
			if e.Point.Kind == PointFrames && (r.Planned == 0 || r.Deliveries > uint64(r.Sent*e.Point.Consumers)) {
				t.Errorf("%s on %s: %d deliveries of %d frames", e.Point.Label(), r.Peer, r.Deliveries, r.Sent)
			}
			if e.Point.Kind == PointFrames && r == e.Flybus && (r.Fill.Count != r.Sent || uint64(r.Touch.Count) != r.Deliveries ||
				r.Faults == nil || r.Faults.Err != "") {
				t.Errorf("%s: fill of %d frames, touch of %d deliveries, faults %+v", e.Point.Label(), r.Fill.Count, r.Touch.Count, r.Faults)
			}
		}
	}
	if bl := rep.Baselines; bl == nil || bl.CrossProcess == nil || len(bl.Sizes) != 2 {
		t.Errorf("baselines %+v", rep.Baselines)
	}
	if rep.Router.ExitStatus != 0 {
		t.Errorf("the router exited with status %d", rep.Router.ExitStatus)
	}
	checkSweepFiles(t, rep, files)
}
