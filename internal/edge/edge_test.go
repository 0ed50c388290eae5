package edge

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"testing"

	"github.com/flybus/flybus/internal/bustest"
	"github.com/flybus/flybus/wire"
)

// The protocol end to end, over both transports in both store modes: a Go
// WebSocket client subscribes, and every header field and every byte is
// checked against what the publisher sent.
func TestServesHeadersAndBytes(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		pub := h.Dial("camera")
		info := declare(t, pub, "cam.frames", wire.RetainLatest)
		bus := &clients{}
		s := serve(t, Config{Topics: []string{"cam.frames"}}, harnessDialer(h, "edge", bus), bus)
		s.await("the subscription", func(st Stats) bool { return st.Topic("cam.frames").Subscribed })

		all := s.connect("")
		all.subscribe(map[string][]string{"cam.frames": {"*"}}, false)
		metaOnly := s.connect("")
		metaOnly.subscribe(map[string][]string{"cam.frames": {"meta"}}, false)
		headerOnly := s.connect("")
		headerOnly.subscribe(map[string][]string{"cam.frames": {}}, false)

		for n := 1; n <= 3; n++ {
			// 13 bytes: the next attachment's offset needs padding.
			meta := attachment{ctype: "application/octet-stream", data: bustest.FrameBytes(byte(n), 13)}
			sent := publishFrame(t, pub, "cam.frames", n, map[string]attachment{"frame": frame(byte(n)), "meta": meta})

			hd, msg := all.publication()
			if hd.Topic != "cam.frames" || hd.Sequence != uint64(n) || hd.Incarnation != info.Incarnation.String() ||
				hd.Replaced != 0 || hd.Skipped != 0 || hd.ReceivedUs == 0 {
				t.Fatalf("header %+v", hd)
			}
			want, _ := json.Marshal(sent)
			if !bytes.Equal(hd.Payload, want) {
				t.Fatalf("payload %s, want %s", hd.Payload, want)
			}
			if len(hd.Attachments) != 2 {
				t.Fatalf("attachments %+v", hd.Attachments)
			}
			for _, a := range hd.Attachments {
				wantType, wantSize := "image/x-rgba; width=640; height=480", uint64(640*480*4)
				if a.Name == "meta" {
					wantType, wantSize = "application/octet-stream", 13
				}
				if a.ContentType != wantType || a.Size != wantSize || a.Offset == 0 || a.Offset%Align != 0 {
					t.Fatalf("attachment %+v", a)
				}
			}
			checkAttachments(t, hd, msg)

			hd, msg = metaOnly.publication()
			for _, a := range hd.Attachments {
				if (a.Name == "meta") != (a.Offset != 0) {
					t.Fatalf("meta only: attachment %+v", a)
				}
			}
			checkAttachments(t, hd, msg)
			for _, a := range hd.Attachments {
				if a.Name == "meta" && uint64(len(msg)) != a.Offset+13 {
					t.Fatalf("meta only: a message of %d bytes, meta at %d", len(msg), a.Offset)
				}
			}

			hd, msg = headerOnly.publication()
			if hd.Sequence != uint64(n) || hd.Attachments[0].Offset != 0 || hd.Attachments[1].Offset != 0 {
				t.Fatalf("header only: %+v", hd)
			}
			if n := binary.LittleEndian.Uint32(msg); int(n)+4 != len(msg) {
				t.Fatalf("header only: a message of %d bytes for a header of %d", len(msg), n)
			}
		}

		// A browser that comes later gets the latest at once, as a replay.
		late := s.connect("")
		late.subscribe(map[string][]string{"cam.frames": {"frame"}}, false)
		hd, msg := late.publication()
		if hd.Sequence != 3 {
			t.Fatalf("late browser got #%d, want the latest #3", hd.Sequence)
		}
		checkAttachments(t, hd, msg)

		st := s.await("every frame sent", func(st Stats) bool { return st.FramesSent == 10 })
		if st.FramesSkipped != 0 || st.DecodeFailures != 0 || st.Publications != 3 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// A browser that does not read skips frames, each counted in the header of
// the next one it gets, while another browser gets every frame; neither
// the bus nor the fast browser waits for the slow one.
func TestSlowBrowserSkips(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		pub := h.Dial("camera")
		declare(t, pub, "cam.frames", wire.RetainNone)
		bus := &clients{}
		s := serve(t, Config{Topics: []string{"cam.frames"}, WriteTimeout: 120e9}, harnessDialer(h, "edge", bus), bus)
		s.await("the subscription", func(st Stats) bool { return st.Topic("cam.frames").Subscribed })
		fast, slow := s.connect(""), s.connect("")
		fast.subscribe(map[string][]string{"cam.frames": {"frame"}}, false)
		slow.subscribe(map[string][]string{"cam.frames": {"frame"}}, false)

		// 30 frames of 1.2 MB are more than the socket buffers hold, so
		// the slow browser's socket fills and the edge skips for it. Each
		// frame is published once the fast browser has the last one.
		const frames = 30
		for n := 1; n <= frames; n++ {
			publishFrame(t, pub, "cam.frames", n, map[string]attachment{"frame": frame(byte(n))})
			hd, msg := fast.publication()
			if hd.Sequence != uint64(n) || hd.Skipped != 0 || hd.Replaced != 0 {
				t.Fatalf("fast browser: %+v, want #%d with nothing skipped", hd, n)
			}
			checkAttachments(t, hd, msg)
		}
		st := s.await("skips", func(st Stats) bool { return st.FramesSkipped > 0 })
		t.Logf("skipped %d of %d for the slow browser before it read", st.FramesSkipped, frames)

		// Now it reads: every message's skip count is exactly the gap
		// before it, and it ends at the last frame.
		var prev, skipped uint64
		for prev < frames {
			hd, msg := slow.publication()
			if hd.Skipped != hd.Sequence-prev-1 {
				t.Fatalf("slow browser: #%d says %d skipped after #%d", hd.Sequence, hd.Skipped, prev)
			}
			checkAttachments(t, hd, msg)
			prev, skipped = hd.Sequence, skipped+hd.Skipped
		}
		if skipped == 0 {
			t.Fatal("the slow browser skipped nothing")
		}
		st = s.await("the last frame sent", func(st Stats) bool { return st.FramesSent == uint64(2*frames)-skipped })
		if st.FramesSkipped != skipped || st.Topic("cam.frames").Replaced != 0 {
			t.Fatalf("stats %+v, the browser counted %d skipped", st, skipped)
		}
	})
}

// However many browsers watch a topic, the edge holds one subscription to
// it, and each browser gets the same bytes.
func TestManyBrowsersOneSubscription(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		pub := h.Dial("camera")
		declare(t, pub, "cam.frames", wire.RetainLatest)
		declare(t, pub, "cam.meta", wire.RetainNone)
		bus := &clients{}
		s := serve(t, Config{Topics: []string{"cam.frames", "cam.meta"}}, harnessDialer(h, "edge", bus), bus)
		s.await("the subscriptions", func(st Stats) bool {
			return st.Topic("cam.frames").Subscribed && st.Topic("cam.meta").Subscribed
		})
		var browsers []*ws
		for range 6 {
			b := s.connect("")
			b.subscribe(map[string][]string{"cam.frames": {"*"}, "cam.meta": {}}, false)
			browsers = append(browsers, b)
		}
		for n := 1; n <= 3; n++ {
			publishFrame(t, pub, "cam.frames", n, map[string]attachment{"frame": frame(byte(n))})
			var first []byte
			for i, b := range browsers {
				hd, msg := b.publication()
				if hd.Sequence != uint64(n) {
					t.Fatalf("browser %d: #%d, want #%d", i, hd.Sequence, n)
				}
				checkAttachments(t, hd, msg)
				if first == nil {
					first = msg
				} else if !bytes.Equal(first, msg) {
					t.Fatalf("browser %d got other bytes than browser 0", i)
				}
			}
		}
		d := h.Router().Details()
		subs := map[string]int{}
		for _, sub := range d.Subscriptions {
			if sub.Client == "edge" {
				subs[sub.Topic]++
			}
		}
		if subs["cam.frames"] != 1 || subs["cam.meta"] != 1 || len(subs) != 2 {
			t.Fatalf("the edge holds subscriptions %v, want one per topic", subs)
		}
		conns := 0
		for _, c := range d.Clients {
			if c.ID == "edge" {
				conns++
			}
		}
		if conns != 1 {
			t.Fatalf("the edge has %d connections", conns)
		}
	})
}

// The edge never publishes and serves only the topics it was given: a
// browser asking for another is told so and keeps its connection.
func TestServesOnlyTheTopicsNamed(t *testing.T) {
	bustest.ForEachTransport(t, bustest.Open(), func(t *testing.T, h *bustest.Harness) {
		pub := h.Dial("camera")
		declare(t, pub, "cam.frames", wire.RetainLatest)
		declare(t, pub, "secret.keys", wire.RetainLatest)
		bus := &clients{}
		s := serve(t, Config{Topics: []string{"cam.frames"}}, harnessDialer(h, "edge", bus), bus)
		b := s.connect("")
		b.send(map[string]any{"op": "subscribe", "topics": map[string][]string{"secret.keys": {"*"}}})
		e := b.notice("error")
		if e["code"] != "NOT_SERVED" {
			t.Fatalf("error %v", e)
		}
		b.subscribe(map[string][]string{"cam.frames": {"*"}}, false)
		publishFrame(t, pub, "secret.keys", 1, map[string]attachment{"frame": frame(9)})
		publishFrame(t, pub, "cam.frames", 1, map[string]attachment{"frame": frame(1)})
		if hd, _ := b.publication(); hd.Topic != "cam.frames" {
			t.Fatalf("got a publication of %s", hd.Topic)
		}
		for _, d := range h.Router().Details().Clients {
			if d.ID == "edge" && d.ActiveCalls != 0 {
				t.Fatalf("the edge called: %+v", d)
			}
		}
		if got := h.Router().Details().Topics; len(got) != 2 || got[0].Publications+got[1].Publications != 2 {
			t.Fatalf("topics %+v: the edge published?", got)
		}
	})
}

// The protocol's notices: status, topics with rates, time.
func TestNotices(t *testing.T) {
	h := bustest.LeakChecked(t, bustest.Open(), false, 0)
	pub := h.Dial("camera")
	declare(t, pub, "cam.frames", wire.RetainLatest)
	bus := &clients{}
	s := serve(t, Config{Topics: []string{"cam.frames"}, StatusInterval: 20e6}, harnessDialer(h, "edge", bus), bus)
	b := s.connect("")
	b.noticeWhere("status", func(m map[string]any) bool { return m["bus"] == "up" })
	publishFrame(t, pub, "cam.frames", 1, map[string]attachment{"frame": frame(1)})
	tp := b.noticeWhere("topics", func(m map[string]any) bool {
		ts := m["topics"].([]any)[0].(map[string]any)
		return ts["publications"] == 1.0
	})
	ts := tp["topics"].([]any)[0].(map[string]any)
	atts := ts["attachments"].([]any)
	if ts["name"] != "cam.frames" || ts["subscribed"] != true || ts["sequence"] != 1.0 || len(atts) != 1 ||
		atts[0].(map[string]any)["size"] != float64(640*480*4) {
		t.Fatalf("topics notice %v", tp)
	}
	b.send(map[string]any{"op": "time", "t": 12.5})
	tm := b.notice("time")
	if tm["t"] != 12.5 || tm["now"].(float64) < 1e12 {
		t.Fatalf("time %v", tm)
	}
}
