package perf

import (
	"strings"
	"testing"
	"time"
)

func isolationPass(rpc time.Duration, stalled bool) *Schedule {
	s := testSchedule(1)
	s.RPCByAgent = []*Hist{histOf(rpc)}
	s.Side = &SideTraffic{Topic: "perf.side.s9", Admitted: 300}
	if stalled {
		s.Side = &SideTraffic{Topic: "perf.side.s10", Stalled: true, Queued: stalledQueued, InFlight: stalledInFlight,
			Admitted: 5, Refused: 295}
	}
	return s
}

func TestCompareIsolation(t *testing.T) {
	ms := time.Millisecond
	iso := compareIsolation(isolationPass(ms, false), isolationPass(1190*time.Microsecond, true))
	if len(iso.Rows) != 4 || iso.Rows[0].Limit != isolationLimit || !iso.Rows[0].Measured || !iso.Rows[0].Met || !iso.Met() {
		t.Fatalf("%+v", iso.Rows)
	}
	for _, r := range iso.Rows[1:] {
		if r.Limit != 0 || !r.Measured || r.Ratio != 1 {
			t.Errorf("comparison row %+v", r)
		}
	}
	if miss := compareIsolation(isolationPass(ms, false), isolationPass(1210*time.Microsecond, true)); miss.Met() {
		t.Fatalf("1.21x is not within 1.2x: %+v", miss.Rows[0])
	}
	empty := isolationPass(ms, true)
	empty.RPCByAgent = []*Hist{newHist(0)}
	if none := compareIsolation(isolationPass(ms, false), empty); none.Met() || none.Rows[0].Measured {
		t.Fatalf("an unmeasured target row is not met: %+v", none.Rows[0])
	}
}

func TestMarkdownIsolation(t *testing.T) {
	r := testReport("process", 1)
	r.Isolation = compareIsolation(isolationPass(time.Millisecond, false), isolationPass(1500*time.Microsecond, true))
	out := render(t, r)
	wantAll(t, out,
		"## Slow consumer isolation (one agent, two passes)",
		"(queue 4, 1 in flight)",
		"| producer → agent 1: RPC round trip | 1.000 | 1.500 | 1.50x: NOT met (within 1.2x) |",
		"| side publisher: publications admitted / refused (BACKPRESSURE) | 300 / 0 | 5 / 295 | |",
	)
	if r.Failed() {
		t.Error("clean isolation passes make the report fail")
	}
	r.Isolation.With.ErrorCount, r.Isolation.With.Errors = 1, []string{"side publisher: broken"}
	if !r.Failed() || !strings.Contains(render(t, r), "- isolation pass with the stalled subscriber: side publisher: broken") {
		t.Error("an isolation pass's errors are not reported")
	}
}
