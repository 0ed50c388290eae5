package perf

import (
	"context"
	"testing"
)

func TestBaselinesRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	frame := FramePattern()
	n := baselineRounds{copy: 5, pingPong: 20, pwrite: 3, mapTouch: 3, paced: 3}
	var phases []string
	b, err := measureBaselines(context.Background(), t.TempDir(), frame, n, func(p string) { phases = append(phases, p) })
	if err != nil {
		t.Fatal(err)
	}
	if b.CrossProcess == nil {
		t.Fatalf("no cross-process ping-pong: %s", b.CrossProcessErr)
	}
	for name, x := range map[string]Baseline{"copy": b.Copy, "pwrite": b.Pwrite, "map": b.MapTouch, "touch": b.Touch,
		"in.one": b.InProcess.One, "in.two": b.InProcess.Two, "x.one": b.CrossProcess.One, "x.two": b.CrossProcess.Two} {
		if s := x.Hot.Summary(); s.Count < 3 || s.P50 <= 0 {
			t.Errorf("%s back to back: %+v", name, s)
		}
		if s := x.Paced.Summary(); s.Count != 3 || s.P50 <= 0 {
			t.Errorf("%s paced: %+v", name, s)
		}
	}
	if len(phases) != 6 {
		t.Errorf("phases %v", phases)
	}
	if pp, topo := b.matching(false); pp != b.CrossProcess || topo != "cross-process" {
		t.Errorf("process mode matches %s", topo)
	}
	if pp, topo := b.matching(true); pp != b.InProcess || topo != "in-process" {
		t.Errorf("embedded mode matches %s", topo)
	}
}

func TestTouchReadsOneBytePerLine(t *testing.T) {
	b := make([]byte, 4*TouchStride)
	for i := range b {
		b[i] = 1
	}
	if got := Touch(b); got != 4 {
		t.Fatalf("touch read %d bytes, want 4", got)
	}
	if f := FramePattern(); len(f) != FrameBytes || FrameBytes != 1_228_800 {
		t.Fatalf("frame of %d bytes", len(f))
	}
}
