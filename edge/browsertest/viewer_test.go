package browsertest

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/flybus/flybus/internal/edge"
)

// The viewer draws what the edge sends, pixel for pixel: a frame whose
// content type gives its size, and a frame as the perf harness publishes
// it (plain image/x-rgba, 1,228,800 bytes, {"seq","t"} as payload), whose
// size the viewer guesses. The canvases are read back and hashed.
func TestViewerDrawsFrames(t *testing.T) {
	s := newStack(t, "cam.frames", "perf.frames")
	b := browser(t)
	page := tab(t, b, s.url("127.0.0.1", "topic=cam.frames&topic=perf.frames&router=1"))
	waitJS(t, page, "the viewer subscribed", ready("cam.frames", "perf.frames"))

	for seed := byte(1); seed <= 3; seed++ {
		px := pattern(640, 480, seed)
		s.publish("cam.frames", "image/x-rgba; width=640; height=480", map[string]int{"seed": int(seed)}, px)
		waitJS(t, page, "the frame drawn", fmt.Sprintf("%s.lastSeq >= %d", topicJS("cam.frames"), seed))
		if got, want := canvasDigest(t, page, "cam.frames"), "640x480 "+digest(px); got != want {
			t.Fatalf("frame %d: the canvas holds %s, want %s", seed, got, want)
		}
	}

	px := pattern(640, 480, 99)
	s.publish("perf.frames", "image/x-rgba", map[string]int64{"seq": 1, "t": time.Now().UnixNano()}, px)
	waitJS(t, page, "the perf frame drawn", topicJS("perf.frames")+".lastSeq >= 1")
	if got, want := canvasDigest(t, page, "perf.frames"), "640x480 "+digest(px); got != want {
		t.Fatalf("perf frame: the canvas holds %s, want %s", got, want)
	}
	from := eval[string](t, page, topicJS("perf.frames")+".sizes.frame.from")
	if from != "guessed 4:3" {
		t.Errorf("perf frame's size from %q", from)
	}

	// The router's view, as flybus top shows it.
	waitJS(t, page, "the router view", `document.querySelector("#router-tables table td") && document.getElementById("router-tables").textContent.includes("perf.frames")`)
	routerText := eval[string](t, page, `document.getElementById("router").textContent`)
	for _, want := range []string{"SUBSCRIPTION", "edge", "camera", "latency (bucket bounds)"} {
		if !strings.Contains(routerText, want) {
			t.Errorf("the router view lacks %q", want)
		}
	}
	// Rates are shown once a topics notice has come.
	waitJS(t, page, "the topics table", `document.querySelector("#topics tbody tr")`)

	if path := os.Getenv("FLYBUS_EDGE_SCREENSHOT"); path != "" {
		png, err := chromedp.Run(page, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", filepath.Clean(path))
	}
}

// A slow tab skips frames while another keeps full rate. The slow one
// takes 250 ms per message, and is held still (paused in the debugger)
// while the frames go by, so that it is the slower one however loaded the
// machine is; the fast one is sent each frame once it drew the last. The
// slow tab is on another site (localhost, not 127.0.0.1), so it runs in a
// renderer process of its own.
func TestSlowTabSkips(t *testing.T) {
	s := newStack(t, "cam.frames")
	b := browser(t)
	fast := tab(t, b, s.url("127.0.0.1", "topic=cam.frames&router=0"))
	slow := tab(t, b, s.url("localhost", "topic=cam.frames&router=0&slow=250"))
	waitJS(t, fast, "the fast tab subscribed", ready("cam.frames"))
	waitJS(t, slow, "the slow tab subscribed", ready("cam.frames"))
	debug(t, slow, true)

	const frames = 40
	for n := 1; n <= frames; n++ {
		s.publish("cam.frames", "image/x-rgba; width=640; height=480",
			map[string]int64{"n": int64(n), "t": time.Now().UnixNano()}, pattern(640, 480, byte(n)))
		waitJS(t, fast, "the fast tab drew the frame", fmt.Sprintf("%s.lastSeq >= %d", topicJS("cam.frames"), n))
	}
	f := eval[struct{ Messages, Skipped int }](t, fast, topicJS("cam.frames"))
	if f.Messages != frames || f.Skipped != 0 {
		t.Fatalf("fast tab: %d messages, %d skipped; want %d and 0", f.Messages, f.Skipped, frames)
	}
	if got, want := canvasDigest(t, fast, "cam.frames"), "640x480 "+digest(pattern(640, 480, frames)); got != want {
		t.Fatalf("fast tab's last frame: %s, want %s", got, want)
	}
	s.await("skips for the slow tab", func(st edge.Stats) bool { return st.FramesSkipped > 0 })

	// Let go, the slow tab ends on the last frame, having skipped to it.
	debug(t, slow, false)
	waitJS(t, slow, "the slow tab reached the last frame", fmt.Sprintf("%s.lastSeq === %d", topicJS("cam.frames"), frames))
	sl := eval[struct{ Messages, Skipped int }](t, slow, topicJS("cam.frames"))
	if sl.Skipped == 0 || sl.Messages+sl.Skipped != frames {
		t.Fatalf("slow tab: %d messages and %d skipped, want some skipped and %d in all", sl.Messages, sl.Skipped, frames)
	}
	if got, want := canvasDigest(t, slow, "cam.frames"), "640x480 "+digest(pattern(640, 480, frames)); got != want {
		t.Fatalf("slow tab's last frame: %s, want %s", got, want)
	}
	shown := eval[string](t, slow, `document.querySelector('.panel[data-topic="cam.frames"] .stats').textContent`)
	if !strings.Contains(shown, fmt.Sprintf("skipped %d", sl.Skipped)) {
		t.Errorf("the slow tab shows %q, not its %d skipped", shown, sl.Skipped)
	}
	t.Logf("slow tab: drew %d of %d frames, skipped %d", sl.Messages, frames, sl.Skipped)
	if st := s.e.Stats(); st.FramesSkipped != uint64(sl.Skipped) || st.Topic("cam.frames").Replaced != 0 {
		t.Fatalf("edge stats %+v", st)
	}
}

// The browser's own figures on the 60 Hz schedule of 640x480 frames: fps
// and latency from publish to draw, as the viewer measures them. Reported,
// not judged: they depend on the machine.
func TestViewerRate(t *testing.T) {
	s := newStack(t, "cam.frames")
	b := browser(t)
	page := tab(t, b, s.url("127.0.0.1", "topic=cam.frames&router=0"))
	waitJS(t, page, "the viewer subscribed", ready("cam.frames"))
	frames := make([][]byte, 8)
	for i := range frames {
		frames[i] = pattern(640, 480, byte(i))
	}
	const n = 180 // three seconds
	tick := time.NewTicker(time.Second / 60)
	defer tick.Stop()
	start := time.Now()
	for i := 1; i <= n; i++ {
		<-tick.C
		s.publish("cam.frames", "image/x-rgba; width=640; height=480",
			map[string]int64{"n": int64(i), "t": time.Now().UnixNano()}, frames[i%len(frames)])
	}
	elapsed := time.Since(start)
	waitJS(t, page, "the last frame drawn", fmt.Sprintf("%s.lastSeq === %d", topicJS("cam.frames"), n))
	v := eval[struct {
		Messages, Skipped, Replaced int
		Latencies                   []float64
	}](t, page, topicJS("cam.frames"))
	sort.Float64s(v.Latencies)
	q := func(p float64) float64 { return v.Latencies[int(p*float64(len(v.Latencies)-1))] }
	st := s.e.Stats()
	t.Logf("60 Hz for %v: published %d, the page drew %d (%.1f fps), skipped %d at the edge, %d replaced at the router; "+
		"publish-to-draw latency over the last %d: p50 %.2f ms, p90 %.2f ms, max %.2f ms",
		elapsed.Round(time.Millisecond), n, v.Messages, float64(v.Messages)/elapsed.Seconds(), st.FramesSkipped,
		st.Topic("cam.frames").Replaced, len(v.Latencies), q(0.5), q(0.9), q(1))
	if v.Messages+v.Skipped+v.Replaced < n/2 || v.Messages == 0 {
		t.Fatalf("the page accounted for %d+%d+%d of %d frames", v.Messages, v.Skipped, v.Replaced, n)
	}
}

// A router that goes away shows "feed down" in the page, and once a new
// one is up and publishing, frames again, without reloading.
func TestRouterRestart(t *testing.T) {
	s := newStack(t, "cam.frames")
	b := browser(t)
	page := tab(t, b, s.url("127.0.0.1", "topic=cam.frames&router=0"))
	waitJS(t, page, "the viewer subscribed", ready("cam.frames"))
	s.publish("cam.frames", "image/x-rgba; width=640; height=480", map[string]int{"n": 1}, pattern(640, 480, 1))
	waitJS(t, page, "the first frame", topicJS("cam.frames")+".messages >= 1")

	s.stopRouter()
	waitJS(t, page, `"feed down" shown`, `document.getElementById("feed").textContent.startsWith("feed down")`)
	s.await("the loss counted", func(st edge.Stats) bool { return st.BusLost == 1 })

	s.startRouter("cam.frames")
	waitJS(t, page, `"feed up" shown`, `document.getElementById("feed").textContent === "feed up"`)
	px := pattern(640, 480, 2)
	s.await("the topic followed again", func(st edge.Stats) bool { return st.Topic("cam.frames").Subscribed })
	s.publish("cam.frames", "image/x-rgba; width=640; height=480", map[string]int{"n": 2}, px)
	waitJS(t, page, "a frame after the restart", topicJS("cam.frames")+".messages >= 2")
	if got, want := canvasDigest(t, page, "cam.frames"), "640x480 "+digest(px); got != want {
		t.Fatalf("after the restart the canvas holds %s, want %s", got, want)
	}
}
