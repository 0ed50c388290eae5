package compare

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/flybus/flybus/perf"
)

func TestSweepLimits(t *testing.T) {
	small := perf.SweepPoint{Kind: perf.PointFrames, Consumers: 3, RateHz: 60, FrameBytes: perf.FrameBytes, Seconds: 1}
	if p, q, b := sweepLimits(small); p != natsMaxPayload || q != natsMaxPending || b != 64<<20 {
		t.Errorf("1.2 MB frames: %d %d %d", p, q, b)
	}
	uhd := small
	uhd.FrameBytes = perf.UHDFrameBytes
	if p, q, b := sweepLimits(uhd); int(p) <= uhd.FrameBytes || q < 4*int64(uhd.FrameBytes) || b < 4*uhd.FrameBytes {
		t.Errorf("4K frames: %d %d %d", p, q, b)
	}
	for v, ok := range map[string]bool{"": true, "1024,2048": true, "x": false, "0,5": false, "5": false} {
		if _, _, err := childLimits(v); (err == nil) != ok {
			t.Errorf("childLimits(%q): %v", v, err)
		}
	}
}

// TestSweepPoint runs `compare sweep-point` for a tiny point of each kind
// (COMPARE_SMOKE=1): it checks the JSON result's shape, never a figure.
func TestSweepPoint(t *testing.T) {
	if os.Getenv("COMPARE_SMOKE") != "1" {
		t.Skip("set COMPARE_SMOKE=1")
	}
	for _, p := range []perf.SweepPoint{
		{Set: perf.SetRate, Kind: perf.PointFrames, Consumers: 2, RateHz: 60, FrameBytes: perf.FeedFrameBytes, Seconds: 0.3},
		{Set: perf.SetSmall, Kind: perf.PointPubSub, Senders: 2, PayloadBytes: perf.SmallPayloadBytes, Seconds: 0.3},
		{Set: perf.SetSmall, Kind: perf.PointRPC, Senders: 2, PayloadBytes: perf.SmallPayloadBytes, Seconds: 0.3},
	} {
		t.Run(p.Kind, func(t *testing.T) {
			spec, _ := json.Marshal(p)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out bytes.Buffer
			if err := runSweepPoint(ctx, []string{"--point", string(spec)}, &out); err != nil {
				t.Fatal(err)
			}
			var r perf.PointResult
			if err := json.Unmarshal(out.Bytes(), &r); err != nil {
				t.Fatalf("%v: %s", err, out.String())
			}
			if r.Peer != "nats" || r.Sent == 0 || r.Deliveries == 0 || r.Latency.Count == 0 || r.ErrorCount != 0 || r.CPUErr != "" {
				t.Errorf("result %+v", r)
			}
		})
	}
}
