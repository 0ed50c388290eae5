package bridge

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flybus/flybus/client"
)

// rawFrame builds the messages an export would send for frame n of topic
// with one artifact "frame", in chunks of at most chunk bytes.
func rawFrame(t *testing.T, origin, subject string, n uint64, size int, chunk int) []*nats.Msg {
	t.Helper()
	data := fill(n, "frame", size)
	raw, err := jsonRaw(framePayload{N: n, Sums: map[string]string{"frame": sum(data)}})
	if err != nil {
		t.Fatal(err)
	}
	man := manifest{Payload: part{Size: int64(len(raw)), SHA256: sum(raw)},
		Artifacts: []part{{Name: "frame", ContentType: "application/x-frame", Size: int64(size), SHA256: sum(data)}}}
	mj, _ := json.Marshal(&man)
	body := append(append([]byte{}, raw...), data...)
	count := (len(body) + chunk - 1) / chunk
	var out []*nats.Msg
	for i := range count {
		h := nats.Header{}
		h.Set(hdrOrigin, origin)
		h.Set(hdrTopic, "src")
		h.Set(hdrSeq, strconv.FormatUint(n, 10))
		h.Set(hdrFrame, origin+"-"+strconv.FormatUint(n, 10))
		h.Set(hdrChunk, strconv.Itoa(i)+"/"+strconv.Itoa(count))
		if i == 0 {
			h.Set(hdrManifest, string(mj))
		}
		end := min(len(body), (i+1)*chunk)
		out = append(out, &nats.Msg{Subject: subject + "." + strconv.FormatUint(n, 10), Header: h, Data: body[i*chunk : end]})
	}
	return out
}

// An import drops a frame with a missing or corrupt chunk, or one whose
// last chunk never comes, counts each, and never publishes any part of it;
// the frames around them arrive whole.
func TestImportDropsMissingAndCorruptChunks(t *testing.T) {
	n := startNATS(t, 64<<10)
	b := newHost(t, "b")
	cb := bridgeConfig(b, n, "bridge-b")
	cb.Imports = []ImportConfig{{Subject: "site.cam", Topic: "cam.frames", FrameTimeout: Duration(300 * time.Millisecond)}}
	bb := startBridge(t, cb, Options{})
	cons := b.connect("consumer")
	sub := subscribe(t, cons, "cam.frames", client.Bounded())
	nc, err := nats.Connect(n.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	send := func(msgs []*nats.Msg) {
		for _, m := range msgs {
			if err := nc.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	const chunk = 60 << 10
	expect := func(want uint64) {
		t.Helper()
		expectFrame(t, sub, want)
	}
	stats := func() ImportStats { return bb.b.Stats().Imports["cam.frames"] }

	send(rawFrame(t, "peer", "site.cam", 1, frameSize, chunk))
	expect(1)

	f := rawFrame(t, "peer", "site.cam", 2, frameSize, chunk) // a middle chunk lost
	send(append(f[:5:5], f[6:]...))
	f = rawFrame(t, "peer", "site.cam", 3, frameSize, chunk) // one byte changed
	f[7].Data = append([]byte{}, f[7].Data...)
	f[7].Data[100] ^= 1
	send(f)
	f = rawFrame(t, "peer", "site.cam", 4, frameSize, chunk) // the first chunk lost
	send(f[1:])
	f = rawFrame(t, "peer", "site.cam", 5, frameSize, chunk) // the last chunk lost, the next frame follows
	send(f[:len(f)-1])
	send(rawFrame(t, "peer", "site.cam", 6, frameSize, chunk))
	expect(6)
	// Admitted is counted once the publish returned, which may be after
	// the consumer had the message; the drops before it were counted
	// before it.
	admitted := func(n uint64) func() bool { return func() bool { return stats().Admitted == n } }
	waitFor(t, "frame 6 to be counted", admitted(2))
	if s := stats(); s.DroppedMissing != 3 || s.DroppedCorrupt != 1 || s.Admitted != 2 {
		t.Fatalf("import: %+v", s)
	}
	f = rawFrame(t, "peer", "site.cam", 7, frameSize, chunk) // the last chunk never comes
	send(f[:len(f)-1])
	waitFor(t, "the frame timeout", func() bool { return stats().DroppedMissing == 4 })
	send(rawFrame(t, "peer", "site.cam", 8, frameSize, chunk))
	expect(8)
	waitFor(t, "frame 8 to be counted", admitted(3))
	if m, ok := sub.TryNext(); ok {
		t.Fatalf("an extra message: #%d", m.TopicSequence)
	}
	if s := stats(); s.Admitted != 3 || s.Received != 3 {
		t.Fatalf("import: %+v", s)
	}
	sub.Close()
	bb.stop()        // its prepared allocation (AllocateAhead) goes with it
	b.assertEmpty(t) // and no staging file of a dropped frame is left
}

// A latest import takes a frame's memory when its first chunk arrives, so
// it refuses at once a frame whose artifacts the local store could not
// hold (32 of 100 MiB against the router's 512 MiB), counted as
// DroppedLocal, rather than holding gigabytes for it; the next frame
// arrives.
func TestLatestImportRefusesAFrameItsStoreCannotHold(t *testing.T) {
	n := startNATS(t, 64<<10)
	b := newHost(t, "b")
	cb := bridgeConfig(b, n, "bridge-b")
	cb.Imports = []ImportConfig{{Subject: "site.cam", Topic: "cam.frames", Mode: "latest"}}
	bb := startBridge(t, cb, Options{})
	sub := subscribe(t, b.connect("consumer"), "cam.frames", client.Bounded())
	nc, err := nats.Connect(n.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	huge := rawFrame(t, "peer", "site.cam", 1, 1000, 60<<10)[0]
	var man manifest
	if err := json.Unmarshal([]byte(huge.Header.Get(hdrManifest)), &man); err != nil {
		t.Fatal(err)
	}
	man.Artifacts = nil
	for i := range 32 {
		man.Artifacts = append(man.Artifacts, part{Name: "a" + strconv.Itoa(i), Size: 100 << 20, SHA256: sum(nil)})
	}
	mj, _ := json.Marshal(&man)
	huge.Header.Set(hdrManifest, string(mj))
	huge.Header.Set(hdrChunk, "0/60000")
	for _, m := range append([]*nats.Msg{huge}, rawFrame(t, "peer", "site.cam", 2, frameSize, 60<<10)...) {
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	expectFrame(t, sub, 2)
	waitFor(t, "frame 2 to be counted", func() bool { return bb.b.Stats().Imports["cam.frames"].Admitted == 1 })
	if s := bb.b.Stats().Imports["cam.frames"]; s.DroppedLocal != 1 || s.DroppedMissing != 0 || s.Received != 1 {
		t.Fatalf("import: %+v", s)
	}
}
