package bridge

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flybus/flybus/client"
)

// checkResult verifies a history frame's artifacts, attached to res,
// against the digests in its payload.
func checkHistoryFrame(t *testing.T, res *client.Result, f *HistoryFrame) {
	t.Helper()
	var p framePayload
	if err := jsonUnmarshal(f.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.N != f.Sequence {
		t.Fatalf("frame %d at sequence %d", p.N, f.Sequence)
	}
	if len(f.Artifacts) != len(p.Sums) {
		t.Fatalf("frame %d: %d artifacts", p.N, len(f.Artifacts))
	}
	for _, ha := range f.Artifacts {
		a, err := res.Artifact(ha.Attachment)
		if err != nil {
			t.Fatal(err)
		}
		v, err := a.View(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if sum(v.Bytes()) != p.Sums[ha.Name] || ha.SHA256 != p.Sums[ha.Name] || a.Ref().ContentType != "application/x-"+ha.Name {
			t.Fatalf("frame %d %s: digest or type differs", p.N, ha.Name)
		}
		v.Close()
		a.Close()
	}
}

func call(t *testing.T, c *client.Client, method string, in, out any) *client.Result {
	t.Helper()
	res, err := c.CallAndWait(ctxT(t), "bridge.history", method, in)
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Decode(out); err != nil {
		t.Fatal(err)
	}
	return res
}

// An export stored in a stream with limits: the local history service
// historyExport starts NATS and host a, whose producer declares
// cam.frames, and a bridge exporting it (bounded) into stream, with the
// history service bridge.history.
func historyExport(t *testing.T, stream *StreamConfig) (*natsHarness, *host, *client.Client, *running) {
	t.Helper()
	n := startNATS(t, 64<<10)
	a := newHost(t, "a")
	prod := a.connect("producer")
	if _, err := prod.DeclareTopic(ctxT(t), "cam.frames", 1); err != nil {
		t.Fatal(err)
	}
	ca := bridgeConfig(a, n, "bridge-a")
	ca.Exports = []ExportConfig{{Topic: "cam.frames", Subject: "site.cam", Mode: "bounded", Stream: stream}}
	ca.History = &HistoryConfig{Service: "bridge.history"}
	return n, a, prod, startBridge(t, ca, Options{})
}

// answers History.Get and History.Range with frames sealed from the
// stream, artifacts attached, and reports what the limits let go.
func TestHistoryFromJetStream(t *testing.T) {
	// Room for about three frames: the oldest go first.
	n, a, prod, ba := historyExport(t, &StreamConfig{Name: "CAM", MaxAge: Duration(time.Hour), MaxBytes: 4_000_000})
	const frames = 6
	for i := uint64(1); i <= frames; i++ {
		publishFrame(t, prod, "cam.frames", i, frameSizes)
	}
	waitFor(t, "every frame stored", func() bool { return ba.b.Stats().Exports["cam.frames"].StoredAcked == frames })

	nc, err := nats.Connect(n.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(context.Background(), "CAM")
	if err != nil {
		t.Fatal(err)
	}
	if info := st.CachedInfo(); info.Config.MaxAge != time.Hour || info.Config.MaxBytes != 4_000_000 || info.State.Bytes > 4_000_000 {
		t.Fatalf("stream: %+v %+v", info.Config, info.State)
	}

	late := a.connect("late-joiner")
	var got GetReply
	res := call(t, late, MethodGet, GetRequest{Topic: "cam.frames", Sequence: 5}, &got)
	if !got.Found || got.Frame.Sequence != 5 || got.Frame.Origin != "bridge-a" {
		t.Fatalf("get 5: %+v", got)
	}
	checkHistoryFrame(t, res, got.Frame)
	res.Close()

	for _, seq := range []uint64{1, 99} { // gone past the byte limit; never published
		res = call(t, late, MethodGet, GetRequest{Topic: "cam.frames", Sequence: seq}, &got)
		if got.Found || got.Error != "" {
			t.Fatalf("get %d: %+v", seq, got)
		}
		res.Close()
	}

	var rng RangeReply
	res = call(t, late, MethodRange, RangeRequest{Topic: "cam.frames", From: 1, Count: 8}, &rng)
	if len(rng.Frames) < 2 || rng.Missing[0] != 1 || rng.Missing[len(rng.Missing)-1] != 8 {
		t.Fatalf("range: %d frames, missing %v", len(rng.Frames), rng.Missing)
	}
	for i, f := range rng.Frames {
		if i > 0 && f.Sequence <= rng.Frames[i-1].Sequence {
			t.Fatal("range out of order")
		}
		checkHistoryFrame(t, res, f)
	}
	if last := rng.Frames[len(rng.Frames)-1]; last.Sequence != frames {
		t.Fatalf("range ends at %d", last.Sequence)
	}
	ranged := uint64(len(rng.Frames))
	res.Close()

	res = call(t, late, MethodRange, RangeRequest{Topic: "cam.frames", From: 1, Count: 1000}, &rng)
	if rng.Error == "" {
		t.Fatal("a range of 1000 was answered")
	}
	res.Close()
	res = call(t, late, MethodGet, GetRequest{Topic: "other", Sequence: 1}, &got)
	if got.Error == "" {
		t.Fatal("a topic without history was answered")
	}
	res.Close()
	if h := ba.b.Stats().History; h.Requests != 6 || h.Frames != 1+ranged || h.Errors != 2 {
		t.Fatalf("history: %+v", h)
	}
	late.Close()
	prod.Close()
	a.assertEmpty(t)
}

// Bus admission, local consumption and JetStream's storage acknowledgment
// are three events counted apart: here a store full after two frames
// refuses the rest, and the importing side's topic has a subscriber that
// consumes only one.
func TestAdmittedConsumedAndStoredAreCountedApart(t *testing.T) {
	n := &natsHarness{t: t, dir: t.TempDir(), port: -1, maxPayload: 64 << 10, maxStore: 3 << 20}
	n.start()
	t.Cleanup(n.stop)
	p := bridgePair(t, n, []ExportConfig{{Topic: "cam.frames", Subject: "site.cam", Mode: "bounded",
		Stream: &StreamConfig{Name: "CAM"}}}, []ImportConfig{{Subject: "site.cam", Topic: "cam.frames"}}, Options{}, nil)
	ba, bb := p.ba, p.bb
	sub := subscribe(t, p.cons, "cam.frames", client.Bounded())
	const frames = 5
	for i := uint64(1); i <= frames; i++ {
		publishFrame(t, p.prod, "cam.frames", i, map[string]int{"frame": frameSize})
	}
	m, err := sub.Next(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	checkMessage(t, m)
	m.Close()
	waitFor(t, "every frame admitted at B and acknowledged or refused by JetStream", func() bool {
		e := ba.b.Stats().Exports["cam.frames"]
		return bb.b.Stats().Imports["cam.frames"].Admitted == frames && e.StoredAcked+e.StoreFailed == frames
	})
	e, im := ba.b.Stats().Exports["cam.frames"], bb.b.Stats().Imports["cam.frames"]
	if e.Consumed != frames || e.StoredAcked == 0 || e.StoredAcked >= frames || im.Admitted != frames || im.Deliveries != frames {
		t.Fatalf("export %+v, import %+v", e, im)
	}
	t.Logf("consumed at A %d, stored-acked %d (refused %d), admitted at B %d, consumed there 1", e.Consumed, e.StoredAcked, e.StoreFailed, im.Admitted)
}
